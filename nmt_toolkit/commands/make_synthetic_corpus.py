"""Write a synthetic parallel corpus of a real corpus's size and shape, to measure the data path
without downloading.

WMT14 En-De's size (4.5M pairs), sentence lengths drawn from Multi30k's pairs and stretched to news
text's (about twice as long, with a longer tail), words from a Zipfian vocabulary per language:
    dwlstm-make-synthetic-corpus --output_dir /data/synthetic-wmt14 --train_pairs 4500000 \\
        --lengths_from path/to/multi30k --length_scale 2 --length_spread 0.35 --formats text jsonl
OPUS-100's shape (99 languages with English, a few 1M-pair directions and a long tail), at any
total size:
    dwlstm-make-synthetic-corpus --output_dir /data/synthetic-opus-2m --opus100_shaped --train_pairs 2000000

The first writes train.{en,de}.gz (and train.jsonl.gz in the Hub's {"translation": {...}} schema)
plus a val split, the second one folder per language pair (de-en/train.jsonl.gz, ...), as
`--dataset` of train_tokenizer.py and train_translation.py reads them; corpus.json records what was
written. The same arguments give the same files. Without --lengths_from the lengths come from a
log-normal (median 20 words; 10 for --opus100_shaped).
"""  # noqa: E501

import argparse
import json
import logging
import time

from nmt_toolkit.arguments import finite_float, non_negative_int, positive_int
from nmt_toolkit.cli import exit_on_error
from nmt_toolkit.files import (
    atomic_directory,
    atomic_write_json,
    check_inputs_outside,
    prepare_output_dir,
    releasing_output_dirs,
)
from nmt_toolkit.synthetic_corpus import (
    OPUS100_LANGUAGES,
    read_length_pairs,
    realistic_length_pairs,
    write_opus100_shaped_corpus,
    write_parallel_corpus,
)


@releasing_output_dirs
def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--output_dir", required=True)
    parser.add_argument(
        "--overwrite_output_dir", action="store_true", help="Replace what --output_dir holds."
    )
    parser.add_argument(
        "--train_pairs", type=positive_int, default=4_500_000, help="Training pairs in all."
    )
    parser.add_argument(
        "--validation_pairs",
        type=non_negative_int,
        default=None,
        help="Validation pairs (a 'val' split; per language pair with --opus100_shaped). "
        "Default: 3000, or none with --opus100_shaped.",
    )
    parser.add_argument(
        "--source_lang", default=None, help="Default: en (not with --opus100_shaped)."
    )
    parser.add_argument(
        "--target_lang", default=None, help="Default: de (not with --opus100_shaped)."
    )
    parser.add_argument(
        "--lengths_from",
        help="A folder of aligned {split}.{lang}[.gz] files (Multi30k) whose pairs' "
        "word counts are drawn; its sentences are not copied.",
    )
    parser.add_argument(
        "--length_scale",
        type=finite_float,
        default=None,
        help="Median factor on the drawn lengths (default 1; not with --opus100_shaped).",
    )
    parser.add_argument(
        "--length_spread",
        type=finite_float,
        default=None,
        help="Log-normal shape of the per-pair factor (default 0; not with --opus100_shaped).",
    )
    parser.add_argument(
        "--formats",
        nargs="+",
        default=None,
        choices=["text", "jsonl"],
        help="text: {split}.{lang}.gz (default); jsonl: {split}.jsonl.gz. One direction only: "
        "--opus100_shaped always writes JSON lines.",
    )
    parser.add_argument(
        "--vocabulary_size",
        type=positive_int,
        default=None,
        help="Words per language (default 50000; 20000 with --opus100_shaped).",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--opus100_shaped", action="store_true", help="OPUS-100's 99 pairs with English, scaled."
    )
    parser.add_argument(
        "--languages",
        nargs="+",
        default=None,
        help="With --opus100_shaped: only these languages (default: OPUS-100's 99).",
    )
    args = parser.parse_args(argv)
    check_arguments(parser, args)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    # the folder is replaced whole
    check_inputs_outside(args.output_dir, {"--lengths_from": args.lengths_from})
    prepare_output_dir(args.output_dir, args.overwrite_output_dir, replaced_whole=True)
    # Written into a staging folder that replaces --output_dir when complete: an overwrite leaves no
    # file of the old corpus (a train.jsonl.gz the readers would prefer to the new
    # train.{en,de}.gz), wherever it stops.
    with atomic_directory(args.output_dir, replace=True) as staging:
        write_corpus(args, staging)


def write_corpus(args: argparse.Namespace, output) -> None:
    start = time.perf_counter()
    if args.opus100_shaped:
        lengths = read_length_pairs(args.lengths_from) if args.lengths_from else None
        sizes = write_opus100_shaped_corpus(
            output,
            args.train_pairs,
            seed=args.seed,
            vocabulary_size=args.vocabulary_size or 20_000,
            length_pairs=lengths,
            validation_pairs=args.validation_pairs or 0,
            languages=tuple(args.languages or OPUS100_LANGUAGES),
        )
        record = {"shape": "opus100", "train_pairs": sizes}
    else:
        languages = (args.source_lang or "en", args.target_lang or "de")
        lengths = (
            read_length_pairs(args.lengths_from, languages)
            if args.lengths_from
            else realistic_length_pairs(seed=args.seed)
        )
        validation = 3000 if args.validation_pairs is None else args.validation_pairs
        splits = {"train": args.train_pairs, **({"val": validation} if validation else {})}
        write_parallel_corpus(
            output,
            languages,
            splits,
            lengths,
            formats=args.formats or ["text"],
            seed=args.seed,
            vocabulary_size=args.vocabulary_size or 50_000,
            length_scale=1.0 if args.length_scale is None else args.length_scale,
            length_spread=args.length_spread or 0.0,
        )
        record = {"shape": "one direction", "languages": list(languages), "splits": splits}
    record.update({"arguments": vars(args), "seconds": round(time.perf_counter() - start, 1)})
    atomic_write_json(output / "corpus.json", record)
    logging.info(
        "Wrote %s in %.0f s.",
        json.dumps({k: v for k, v in record.items() if k != "arguments"})[:200],
        record["seconds"],
    )


def check_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Refuse flags the chosen shape would ignore, and values it cannot use, before anything is
    written."""
    if args.opus100_shaped:
        ignored = [
            flag
            for flag, value in (
                ("--source_lang", args.source_lang),
                ("--target_lang", args.target_lang),
                ("--length_scale", args.length_scale),
                ("--length_spread", args.length_spread),
                ("--formats", args.formats),
            )
            if value is not None
        ]
        if ignored:
            parser.error(
                f"{', '.join(ignored)} shape a one-direction corpus; --opus100_shaped pairs "
                "English with "
                "--languages and writes JSON lines: drop them, or drop --opus100_shaped."
            )
        languages = args.languages or []
        repeated = sorted({language for language in languages if languages.count(language) > 1})
        if "en" in languages or repeated:
            parser.error(
                f"--languages names the languages paired with English, each once; got "
                f"{'en' if 'en' in languages else 'repeats of ' + ', '.join(repeated)}."
            )
        return
    if args.languages:
        parser.error(
            "--languages is for --opus100_shaped; one direction takes --source_lang and "
            "--target_lang."
        )
    if (args.source_lang or "en") == (args.target_lang or "de"):
        parser.error(
            f"--source_lang and --target_lang are both {args.source_lang or 'en'!r}: name two "
            "languages."
        )
    if args.length_scale is not None and args.length_scale <= 0:
        parser.error(
            "--length_scale must be positive (a factor on the drawn lengths), got "
            f"{args.length_scale}."
        )
    if args.length_spread is not None and args.length_spread < 0:
        parser.error(
            "--length_spread must be 0 or more (0: every pair scaled alike), got "
            f"{args.length_spread}."
        )


def run():
    exit_on_error(main)


if __name__ == "__main__":
    run()
