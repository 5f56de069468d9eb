"""Train the joint BPE tokenizer of a translation model on both sides of a parallel corpus.

    dwlstm-train-tokenizer --dataset wmt14 --source_lang en --target_lang de --output_dir tok-wmt14-ende
    dwlstm-train-tokenizer --dataset path/to/multi30k --source_lang en --target_lang de \\
        --merges 8000 --output_dir tok-multi30k
Multilingual (one BPE over every language, a <2xx> tag reserved per target language):
    dwlstm-train-tokenizer --dataset path/to/multi30k --language_pairs en-de,de-en,en-fr,fr-en \\
        --sampling_temperature 5 --merges 8000 --output_dir tok-multi30k-m2m

The result loads with `AutoTokenizer.from_pretrained(output_dir)` and is what
`train_translation.py --tokenizer_name_or_path` expects. 32k merges by default (the papers). With
`--language_pairs` the BPE is trained on a temperature-balanced sample of each language's sentences
(`multilingual.balanced_sentences`), so that small languages get their merges.
`--language_tags <2de> <2fr> ...` reserves further tags; a bilingual model's tokenizer has none (the
translation pipeline prepends a tag whenever the tokenizer has one).
"""  # noqa: E501

import argparse
import logging
import random

from nmt_toolkit.arguments import positive_int
from nmt_toolkit.checkpoints import save_pretrained_atomically
from nmt_toolkit.cli import exit_on_error
from nmt_toolkit.data import load_parallel_corpus, train_corpus_tokenizer, train_sentence_tokenizer
from nmt_toolkit.files import check_inputs_outside, prepare_output_dir
from nmt_toolkit.multilingual import (
    balanced_sentences,
    language_tag,
    load_multilingual_corpus,
    parse_sources,
)


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--dataset", required=True, help="Hub name (wmt14, wmt15, opus100), folder or .jsonl file."
    )
    parser.add_argument("--source_lang")
    parser.add_argument("--target_lang")
    parser.add_argument(
        "--language_pairs",
        help="Multilingual: 'en-de,de-en,...' or 'all' (instead of the two above).",
    )
    parser.add_argument(
        "--more_datasets", nargs="*", default=[], help="Further sources, each 'SOURCE=PAIRS'."
    )
    parser.add_argument(
        "--sampling_temperature",
        type=float,
        default=5.0,
        help="Multilingual: languages sampled ~ (share)^(1/T) for the BPE (1 = as in the data).",
    )
    parser.add_argument(
        "--seed", type=int, default=0, help="Seed of the multilingual sample and of --sample_pairs."
    )
    parser.add_argument("--split", default="train")
    parser.add_argument(
        "--hub_config", default=None, help="Hub dataset configuration, if not the pair's."
    )
    parser.add_argument(
        "--max_pairs",
        type=int,
        default=None,
        help="Train on the first N pairs (per direction) only.",
    )
    parser.add_argument(
        "--sample_pairs",
        type=positive_int,
        default=None,
        help=(
            "Train on N pairs drawn at random (--seed) from the whole corpus (the merges of a "
            "large corpus come from its frequent words; docs/training.md, Scale, measures how "
            "many suffice)."
        ),
    )
    parser.add_argument("--merges", type=int, default=32000, help="BPE merges (papers: 32000).")
    parser.add_argument("--min_frequency", type=positive_int, default=2)
    parser.add_argument(
        "--language_tags",
        nargs="*",
        default=[],
        help="Tags to reserve for a multilingual model, e.g. <2de> <2fr>.",
    )
    parser.add_argument(
        "--model_max_length",
        type=positive_int,
        default=1024,
        help="The model's max_position_embeddings.",
    )
    parser.add_argument("--output_dir", required=True)
    parser.add_argument(
        "--overwrite_output_dir", action="store_true", help="Replace what --output_dir holds."
    )
    args = parser.parse_args(argv)
    if args.language_pairs and args.sample_pairs:
        parser.error(
            "--sample_pairs is for one direction; --language_pairs draws its own balanced sample "
            "(--max_pairs per direction, --sampling_temperature)."
        )
    if args.language_pairs and (args.source_lang or args.target_lang):
        parser.error(
            "--language_pairs replaces --source_lang/--target_lang: pass one or the other."
        )
    if not args.language_pairs and not (args.source_lang and args.target_lang):
        parser.error("Pass --source_lang and --target_lang, or --language_pairs.")
    if args.more_datasets and not args.language_pairs:
        parser.error(
            "--more_datasets adds sources to a multilingual tokenizer: pass --language_pairs "
            "(e.g. en-de), or leave --more_datasets out."
        )
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    more = [source.partition("=")[0] for source in args.more_datasets]
    # it is replaced whole
    check_inputs_outside(args.output_dir, {"--dataset": args.dataset, "--more_datasets": more})
    # before reading and training
    prepare_output_dir(args.output_dir, args.overwrite_output_dir, replaced_whole=True)

    settings = {
        "merges": args.merges,
        "min_frequency": args.min_frequency,
        "model_max_length": args.model_max_length,
    }
    if args.language_pairs:
        sources = parse_sources(args.dataset, args.language_pairs, args.more_datasets, args.split)
        corpus = load_multilingual_corpus(
            sources, args.split, max_pairs=args.max_pairs, hub_config=args.hub_config
        )
        targets = sorted({target for _, directions in sources for _, target in directions})
        tags = list(
            dict.fromkeys([language_tag(target) for target in targets] + args.language_tags)
        )
        sentences = balanced_sentences(corpus, args.sampling_temperature, args.seed)
        tokenizer = train_sentence_tokenizer(
            lambda: iter(sentences), language_tags=tags, **settings
        )
    else:
        languages = [args.source_lang, args.target_lang]
        corpus = load_parallel_corpus(
            args.dataset,
            *languages,
            split=args.split,
            max_pairs=args.max_pairs,
            hub_config=args.hub_config,
        )
        if args.sample_pairs and args.sample_pairs < len(corpus):
            # in file order
            drawn = sorted(random.Random(args.seed).sample(range(len(corpus)), args.sample_pairs))
            logging.info("BPE sample: %d of %d pairs.", len(drawn), len(corpus))
            corpus = corpus.select(drawn)
        elif args.sample_pairs:
            logging.info(
                "BPE on all %d pairs: --sample_pairs %d is not fewer.",
                len(corpus),
                args.sample_pairs,
            )
        tags = list(dict.fromkeys(args.language_tags))  # unique, in order
        tokenizer = train_corpus_tokenizer([corpus], languages, language_tags=tags, **settings)
    save_pretrained_atomically(tokenizer, args.output_dir)
    logging.info(
        "Saved a %d-token joint BPE tokenizer (%d pairs of %s) to %s.",
        len(tokenizer),
        len(corpus),
        args.dataset,
        args.output_dir,
    )


def run():
    exit_on_error(main)


if __name__ == "__main__":
    run()
