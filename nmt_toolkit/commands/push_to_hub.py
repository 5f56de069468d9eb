"""Push a trained translation model to the Hugging Face Hub with its tokenizer, code, pipeline and a
model card.

    dwlstm-push-to-hub --model runs/base-avg --repo_id user/dwlstm-base-wmt14-ende \
        --training_data "WMT14 En-De (4.5M pairs), joint BPE 32k" --results
        runs/base-avg/test/results.json

Afterwards `AutoModelForSeq2SeqLM.from_pretrained("user/...", trust_remote_code=True)` and
`pipeline("translation", model="user/...", trust_remote_code=True)` work anywhere. Log in first
(`hf auth login`) or pass --token; HF_ENDPOINT selects another Hub. The work is done by
`nmt_toolkit.hub`.
"""

import argparse

import modeling_dwlstm  # noqa: F401  (registers the family, so the saved model carries its code)
from nmt_toolkit.checkpoints import load_saved_model, load_saved_tokenizer
from nmt_toolkit.cli import exit_on_error
from nmt_toolkit.hub import check_results_of, model_card, push_translation_model, read_results


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--model", required=True, help="A saved model directory with its tokenizer."
    )
    parser.add_argument("--repo_id", required=True, help="user/name on the Hub.")
    parser.add_argument(
        "--training_data", required=True, help="What the model was trained on, for the card."
    )
    parser.add_argument(
        "--results", default=None, help="results.json of scripts/evaluate_translation.py."
    )
    parser.add_argument("--private", action="store_true")
    parser.add_argument("--token", default=None)
    args = parser.parse_args(argv)
    model = load_saved_model(args.model, "--model")  # checked: checksums, finite weights
    tokenizer = load_saved_tokenizer(args.model, "--model")
    results = read_results(args.results) if args.results else None
    if results is not None:
        check_results_of(results, args.model, args.results)
    card = model_card(model, args.training_data, results, repo_id=args.repo_id)
    commit = push_translation_model(
        model, tokenizer, args.repo_id, card, private=args.private, token=args.token
    )
    print(f"Pushed {args.model} to {args.repo_id}: {commit.commit_url}")


def run():
    exit_on_error(main)


if __name__ == "__main__":
    run()
