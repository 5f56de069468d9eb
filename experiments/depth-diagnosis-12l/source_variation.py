"""Why does the deep depth-wise LSTM with its forget gates at 0.5 translate every source into the
same few sentences? For trained models, how much each encoder layer's output still varies between
sources and between the positions of one source (`nmt_toolkit.lab.analysis.source_variation`), over
the first sentences of a split: if the top of the encoder gives every source nearly the same
vectors, the decoder has nothing to translate from.

    PYTHONPATH=. python experiments/depth-diagnosis-12l/source_variation.py --data path/to/multi30k \
        --models NAME=path/to/averaged [NAME=path ...] --output
        experiments/depth-trend/source-variation.json
    PYTHONPATH=. python experiments/depth-diagnosis-12l/source_variation.py ... --untrained NAME=hub_configs/X.json \
        --untrained_overrides '{"d_model": 128, ...}' --tokenizer path/to/tokenizer   # models as initialised too
    PYTHONPATH=. python experiments/depth-diagnosis-12l/source_variation.py --report --output ...   # the table and picture again

Writes the JSON (rows per model and layer) and a picture beside it (same name, .png).
"""  # noqa: E501

import argparse
import json
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForSeq2SeqLM

import modeling_dwlstm  # noqa: F401  (registers the model family with the Auto classes)
from nmt_toolkit.checkpoints import load_saved_model, load_saved_tokenizer
from nmt_toolkit.data import load_parallel_corpus
from nmt_toolkit.files import atomic_write_json, set_threads
from nmt_toolkit.lab.analysis import source_variation, tokenized_batches
from nmt_toolkit.lab.plotting_analysis import plot_source_variation


def named_path(text: str) -> tuple[str, Path]:
    name, separator, path = text.rpartition("=")  # the name may hold "=" (b=2), a path seldom does
    if not separator or not name or not path:
        raise argparse.ArgumentTypeError(f"expected NAME=path/to/model, got {text!r}")
    return name, Path(path)


def measure(args) -> dict:
    set_threads(args.threads)
    corpus = load_parallel_corpus(
        args.data, args.source_lang, args.target_lang, args.split, max_pairs=args.sentences
    )
    pairs = [(pair[args.source_lang], pair[args.target_lang]) for pair in corpus["translation"]]
    results = {"split": args.split, "sentences": len(pairs), "models": {}}
    tokenizer = load_saved_tokenizer(args.tokenizer) if args.untrained else None
    settings = (
        {
            "vocab_size": len(tokenizer),
            "pad_token_id": tokenizer.pad_token_id,
            **args.untrained_overrides,
        }
        if args.untrained
        else {}
    )
    for name, config in args.untrained or []:  # as initialised (seed --seed), before any update
        torch.manual_seed(args.seed)
        model = AutoModelForSeq2SeqLM.from_config(AutoConfig.from_pretrained(config, **settings))
        results["models"][name] = {
            "config": str(config),
            "overrides": args.untrained_overrides,
            "seed": args.seed,
            "rows": source_variation(model, tokenized_batches(tokenizer, pairs)),
        }
    for name, path in args.models or []:
        model, tokenizer = load_saved_model(path), load_saved_tokenizer(path)
        results["models"][name] = {
            "path": str(path),
            "rows": source_variation(model, tokenized_batches(tokenizer, pairs)),
        }
    atomic_write_json(args.output, results)
    return results


def report(results: dict, picture: Path):
    print(
        f"{results['sentences']} sentences of {results['split']}; shares of the mean square E|h|^2 "
        "(layer 0: the embeddings; the last: the encoder's output after its final LayerNorm)"
    )
    for name, model in results["models"].items():
        rows = model["rows"]
        print(
            f"{name}: encoder output between sources {rows[-1]['between sources']:.2e}, within a "
            f"source {rows[-1]['within a source']:.2e} (embeddings: "
            f"{rows[0]['between sources']:.2e}, {rows[0]['within a source']:.2e})"
        )
    plot_source_variation(
        {name: model["rows"] for name, model in results["models"].items()},
        picture,
        title=f"What of the source reaches each encoder layer ({results['sentences']} "
        f"{results['split']} sources)",
    )
    print(f"picture: {picture}")


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--models", type=named_path, nargs="+", help="NAME=path/to/saved/model, each a saved model."
    )
    parser.add_argument(
        "--untrained", type=named_path, nargs="+", help="NAME=config.json: a model as initialised."
    )
    parser.add_argument(
        "--untrained_overrides", type=json.loads, default={}, help="JSON settings for --untrained."
    )
    parser.add_argument(
        "--tokenizer", help="The tokenizer for --untrained models (the trained ones carry theirs)."
    )
    parser.add_argument(
        "--seed", type=int, default=1, help="The initialisation seed of --untrained models."
    )
    parser.add_argument("--data", help="The corpus folder (Multi30k's).")
    parser.add_argument("--source_lang", default="en")
    parser.add_argument("--target_lang", default="de")
    parser.add_argument("--split", default="val", help="Tune and look on val, never on a test set.")
    parser.add_argument(
        "--sentences", type=int, default=500, help="The first N sentences of --split."
    )
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument(
        "--output", type=Path, required=True, help="The JSON to write (and the picture beside it)."
    )
    parser.add_argument(
        "--report", action="store_true", help="Only the table and the picture, from --output."
    )
    args = parser.parse_args()
    if args.report:
        results = json.loads(args.output.read_text())
    else:
        if not (args.models or args.untrained) or not args.data:
            parser.error(
                "--models or --untrained, and --data, are needed (or --report with an existing "
                "--output)."
            )
        if args.untrained and not args.tokenizer:
            parser.error("--untrained models need --tokenizer (for the vocabulary).")
        results = measure(args)
    report(results, args.output.with_suffix(".png"))


if __name__ == "__main__":
    main()
