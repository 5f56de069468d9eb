"""Write and draw a model's gates or layer weights, whichever its model_type has.

    dwlstm-plot-internals --model runs/dwlstm/averaged --data path/to/multi30k \
        --source_lang en --target_lang de --split test_2016_flickr --output_dir runs/dwlstm/internals --threads 1
    dwlstm-plot-internals --model runs/ta/averaged --output_dir runs/ta/internals

- dwlstm: input / forget / output gates per layer (mean, std, 10th and 90th percentiles over the
  corpus);
- dwlstm-highway: the SDU transform gate T(X) per layer and sub-layer (over the corpus);
- dwlstm-ta: the softmax layer-mixing weights of each decoder layer (no corpus needed);
- dwlstm-dlcl: the weight matrices of both stacks, drawn like Wang et al. 2019, Fig. 5 (no corpus
  needed).

Writes <name>.json and <name>.png into --output_dir. The work is done by
`nmt_toolkit.lab.analysis.model_internals` and
`nmt_toolkit.lab.plotting_analysis.plot_model_internals`.
"""  # noqa: E501

import argparse

import modeling_dwlstm  # noqa: F401  (registers the model family with the Auto classes)
from nmt_toolkit.arguments import positive_int
from nmt_toolkit.checkpoints import load_saved_model, load_saved_tokenizer
from nmt_toolkit.cli import add_run_arguments, exit_on_error, prepare_run_output
from nmt_toolkit.data import load_parallel_corpus
from nmt_toolkit.files import atomic_write_json, set_threads
from nmt_toolkit.lab.analysis import (
    CORPUS_INTERNALS,
    internals_name,
    model_internals,
    tokenized_batches,
)
from nmt_toolkit.lab.plotting_analysis import plot_model_internals


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--model", required=True, help="A saved model directory (with its tokenizer)."
    )
    parser.add_argument(
        "--data",
        default=None,
        help="Corpus for gate statistics: a folder of {split}.{lang}[.gz], ...",
    )
    parser.add_argument("--source_lang", default=None)
    parser.add_argument("--target_lang", default=None)
    parser.add_argument("--split", default="test")
    parser.add_argument(
        "--max_sentences",
        type=positive_int,
        default=None,
        help="Use only the first N sentence pairs.",
    )
    parser.add_argument(
        "--batch_size", type=positive_int, default=64, help="Sentence pairs per forward pass."
    )
    add_run_arguments(parser)
    args = parser.parse_args(argv)

    set_threads(args.threads)
    # before any work
    output_dir = prepare_run_output(args, {"--model": args.model, "--data": args.data})
    model = load_saved_model(args.model, "--model").to(args.device)
    batches = None
    if internals_name(model) in CORPUS_INTERNALS:
        if not (args.data and args.source_lang and args.target_lang):
            raise ValueError(
                f"{internals_name(model)} are statistics over a corpus: give --data, --source_lang "
                "and --target_lang."
            )
        tokenizer = load_saved_tokenizer(args.model, "--model")
        pairs = load_parallel_corpus(
            args.data, args.source_lang, args.target_lang, args.split, max_pairs=args.max_sentences
        )
        pairs = [(pair[args.source_lang], pair[args.target_lang]) for pair in pairs["translation"]]
        batches = tokenized_batches(
            tokenizer, pairs, args.batch_size, min(256, model.config.max_position_embeddings)
        )
    name, data = model_internals(model, batches)
    atomic_write_json(
        output_dir / f"{name}.json",
        {"model": args.model, "data": args.data, "split": args.split, name: data},
    )
    plot_model_internals(name, data, output_dir / f"{name}.png")
    print(f"Wrote {output_dir / f'{name}.json'} and {output_dir / f'{name}.png'}")


def run():
    exit_on_error(main)


if __name__ == "__main__":
    run()
