"""Build a saved model's vocabulary shortlist from its training corpus (see
nmt_toolkit/shortlist.py).

    dwlstm-build-shortlist --model runs/m30k/averaged --data path/to/multi30k --source_lang en --target_lang de
    dwlstm-build-shortlist --model runs/m30k/averaged --data wmt14 --source_lang en --target_lang de \
        --top_k 100 --frequent 100 --validation_split validation

It writes shortlist.safetensors into the model folder (or --output_dir), where `from_pretrained`
reads it; then `model.generate(..., use_shortlist=True)`, `pipeline(...)(text, use_shortlist=True)`
or `scripts/evaluate_translation.py --use_shortlist` decode over each batch's shortlist, and
`scripts/export_ctranslate2.py` gives CTranslate2 the same table (`use_vmap=True`).
"""  # noqa: E501

import argparse

from modeling_dwlstm.generation_translation import Shortlist
from nmt_toolkit.arguments import positive_int
from nmt_toolkit.checkpoints import load_saved_tokenizer
from nmt_toolkit.cli import exit_on_error
from nmt_toolkit.shortlist import (
    DEFAULT_FREQUENT,
    DEFAULT_MIN_COUNT,
    DEFAULT_TOP_K,
    build_shortlist_for_model,
    corpus_coverage,
)


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--model", required=True, help="A saved model directory (with its tokenizer)."
    )
    parser.add_argument(
        "--data",
        required=True,
        help=(
            "The training corpus: a folder of {split}.{lang}[.gz], a JSON-lines file or a Hub "
            "corpus (as train_translation.py's --dataset)."
        ),
    )
    parser.add_argument("--source_lang", required=True, help="Source language code, e.g. en.")
    parser.add_argument("--target_lang", required=True, help="Target language code, e.g. de.")
    parser.add_argument(
        "--split", default="train", help="The split of --data to count (default: train)."
    )
    parser.add_argument(
        "--max_pairs", type=positive_int, default=None, help="Count only the first pairs."
    )
    parser.add_argument(
        "--top_k",
        type=positive_int,
        default=DEFAULT_TOP_K,
        help=f"Target tokens per source token, by Dice (default: {DEFAULT_TOP_K}).",
    )
    parser.add_argument(
        "--frequent",
        type=int,
        default=DEFAULT_FREQUENT,
        help=f"Most frequent target tokens, always allowed (default: {DEFAULT_FREQUENT}).",
    )
    parser.add_argument(
        "--min_count",
        type=positive_int,
        default=DEFAULT_MIN_COUNT,
        help=f"Pairs seen fewer times are never chosen (default: {DEFAULT_MIN_COUNT}).",
    )
    parser.add_argument(
        "--output_dir", default=None, help="Where shortlist.safetensors goes (default: --model)."
    )
    parser.add_argument(
        "--overwrite", action="store_true", help="Replace a shortlist.safetensors already there."
    )
    parser.add_argument(
        "--validation_split",
        default=None,
        help=(
            "Also report on this split of --data how much of the references the shortlist keeps, "
            "per sentence and per batch of 32."
        ),
    )
    args = parser.parse_args(argv)
    path = build_shortlist_for_model(
        args.model,
        args.data,
        args.source_lang,
        args.target_lang,
        args.split,
        args.max_pairs,
        args.output_dir,
        args.overwrite,
        top_k=args.top_k,
        frequent=args.frequent,
        min_count=args.min_count,
    )
    print(f"Wrote {path}")
    if args.validation_split:
        tokenizer = load_saved_tokenizer(args.model, "--model")
        for size, kept in corpus_coverage(
            Shortlist.load(path),
            tokenizer,
            args.data,
            args.source_lang,
            args.target_lang,
            args.validation_split,
        ).items():
            print(
                f"{args.validation_split}, batches of {size}: {kept['tokens']:.1%} of reference "
                "tokens and "
                f"{kept['sentences']:.1%} of references inside the shortlist; "
                f"{kept['union_size']:.0f} tokens "
                "allowed per batch on average"
            )


def run():
    exit_on_error(main)


if __name__ == "__main__":
    run()
