"""Train the joint BPE tokenizer of a translation model on both sides of a parallel corpus.

    python scripts/train_tokenizer.py --dataset wmt14 --source_lang en --target_lang de --output_dir tok-wmt14-ende
    python scripts/train_tokenizer.py --dataset ../shared/data/multi30k --source_lang en --target_lang de \\
        --merges 8000 --output_dir tok-multi30k

The result loads with `AutoTokenizer.from_pretrained(output_dir)` and is what `train_translation.py
--tokenizer_name_or_path` expects. 32k merges by default (the papers). `--language_tags <2de> <2fr> ...`
reserves target-language tags as special tokens, for multilingual models trained with
`--add_language_tag`; a bilingual model's tokenizer has none (the translation pipeline prepends a tag
whenever the tokenizer has one).
"""

import argparse
import logging

from modeling_dwlstm.checkpoints import save_pretrained_atomically
from modeling_dwlstm.cli import exit_on_error
from modeling_dwlstm.data import load_parallel_corpus, train_corpus_tokenizer
from modeling_dwlstm.files import prepare_output_dir


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", required=True, help="Hub name (wmt14, wmt15, opus100), folder or .jsonl file.")
    parser.add_argument("--source_lang", required=True)
    parser.add_argument("--target_lang", required=True)
    parser.add_argument("--split", default="train")
    parser.add_argument("--hub_config", default=None, help="Hub dataset configuration, if not the pair's.")
    parser.add_argument("--max_pairs", type=int, default=None, help="Train on the first N pairs only.")
    parser.add_argument("--merges", type=int, default=32000, help="BPE merges (papers: 32000).")
    parser.add_argument("--min_frequency", type=int, default=2)
    parser.add_argument("--language_tags", nargs="*", default=[], help="Tags to reserve for a multilingual model, e.g. <2de> <2fr>.")
    parser.add_argument("--model_max_length", type=int, default=1024, help="The model's max_position_embeddings.")
    parser.add_argument("--output_dir", required=True)
    parser.add_argument("--overwrite_output_dir", action="store_true", help="Replace what --output_dir holds.")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    prepare_output_dir(args.output_dir, args.overwrite_output_dir)  # before reading and training, not after

    languages = [args.source_lang, args.target_lang]
    corpus = load_parallel_corpus(args.dataset, *languages, split=args.split, max_pairs=args.max_pairs,
                                  hub_config=args.hub_config)
    tags = list(dict.fromkeys(args.language_tags))  # unique, in order
    tokenizer = train_corpus_tokenizer([corpus], languages, merges=args.merges, language_tags=tags,
                                       min_frequency=args.min_frequency, model_max_length=args.model_max_length)
    save_pretrained_atomically(tokenizer, args.output_dir)
    logging.info("Saved a %d-token joint BPE tokenizer (%d pairs of %s) to %s.", len(tokenizer), len(corpus),
                 args.dataset, args.output_dir)


if __name__ == "__main__":
    exit_on_error(main)
