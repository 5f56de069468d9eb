"""Layer non-linearity analysis (Xu et al. 2020, §4, Tables 6-7): BLEU with each layer replaced by
an affine map.

    dwlstm-analyze-layers --model runs/dwlstm/averaged --data path/to/multi30k \
        --source_lang en --target_lang de --split test_2016_flickr --train_split train --fit_steps 300 \
        --output_dir runs/dwlstm/layers --threads 1

--data is a local Multi30k folder here (any corpus the training script reads will do).

For every encoder and decoder layer in turn, the layer is replaced by y = W x + b of its input state
([o; c] for the depth-wise LSTM), fitted by least squares to the layer's true output on --fit_steps
batches of training pairs with the model frozen; the test split is decoded with beam search and
scored. Writes layer_nonlinearity.json (BLEU and Δ (%) per layer), layer_nonlinearity.png and
hypotheses/<row>.txt into --output_dir. The work is done by
`nmt_toolkit.lab.analysis.layer_nonlinearity`.
"""  # noqa: E501

import argparse
from pathlib import Path

import modeling_dwlstm  # noqa: F401  (registers the model family with the Auto classes)
from nmt_toolkit.arguments import positive_int
from nmt_toolkit.checkpoints import load_saved_model, load_saved_tokenizer
from nmt_toolkit.cli import add_run_arguments, exit_on_error, prepare_run_output
from nmt_toolkit.data import load_parallel_corpus
from nmt_toolkit.evaluation import (
    DEFAULT_MAX_TOKENS,
    check_directions,
    tagged_languages,
    write_lines,
)
from nmt_toolkit.files import atomic_write_json, set_threads
from nmt_toolkit.lab.analysis import layer_nonlinearity
from nmt_toolkit.lab.plotting_analysis import plot_layer_nonlinearity


def read_pairs(args, split: str, max_pairs: int | None) -> list[tuple[str, str]]:
    pairs = load_parallel_corpus(
        args.data, args.source_lang, args.target_lang, split, max_pairs=max_pairs
    )
    return [(pair[args.source_lang], pair[args.target_lang]) for pair in pairs["translation"]]


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
        help="Corpus: a folder of {split}.{lang}[.gz], JSON lines or a Hub name.",
    )
    parser.add_argument("--source_lang", required=True)
    parser.add_argument("--target_lang", required=True)
    parser.add_argument("--split", default="test", help="The split decoded and scored.")
    parser.add_argument(
        "--train_split", default="train", help="The split the affine maps are fitted on."
    )
    parser.add_argument(
        "--fit_steps",
        type=positive_int,
        default=300,
        help="Training batches the maps are fitted on.",
    )
    parser.add_argument(
        "--fit_batch_size", type=positive_int, default=64, help="Sentence pairs per fitting batch."
    )
    parser.add_argument(
        "--max_sentences",
        type=positive_int,
        default=None,
        help="Decode only the first N test sentences.",
    )
    parser.add_argument(
        "--num_beams", type=positive_int, default=4, help="Beam size (the papers: 4)."
    )
    parser.add_argument(
        "--max_tokens",
        type=positive_int,
        default=DEFAULT_MAX_TOKENS,
        help="Source tokens per decoding batch.",
    )
    add_run_arguments(parser)
    args = parser.parse_args(argv)

    set_threads(args.threads)
    # before any work
    output_dir = prepare_run_output(args, {"--model": args.model, "--data": args.data})
    tokenizer = load_saved_tokenizer(args.model, "--model")
    # its sources need a tag the analysis does not give: every BLEU would be wrong
    if tagged_languages(tokenizer):
        raise ValueError(
            f"--model {args.model} was trained with language tags (its tokenizer reserves "
            f"{[f'<2{code}>' for code in tagged_languages(tokenizer)]}); the layer analysis "
            "decodes "
            "untagged sources. Analyse a bilingual model."
        )
    model = load_saved_model(args.model, "--model").to(args.device)
    # warns if untrained
    check_directions(model, tokenizer, [(args.source_lang, args.target_lang)], with_tags=False)
    train_pairs = read_pairs(args, args.train_split, args.fit_steps * args.fit_batch_size)
    test_pairs = read_pairs(args, args.split, args.max_sentences)
    results = layer_nonlinearity(
        model,
        tokenizer,
        train_pairs,
        test_pairs,
        fit_steps=args.fit_steps,
        batch_size=args.fit_batch_size,
        num_beams=args.num_beams,
        max_tokens=args.max_tokens,
        target_lang=args.target_lang,
    )
    for name, hypotheses in results.pop("hypotheses").items():
        write_lines(hypotheses, output_dir / "hypotheses" / f"{name}.txt")
    results = {
        "model": args.model,
        "data": args.data,
        "split": args.split,
        "train_split": args.train_split,
        **results,
    }
    atomic_write_json(output_dir / "layer_nonlinearity.json", results)
    plot_layer_nonlinearity(
        results,
        output_dir / "layer_nonlinearity.png",
        title=f"{Path(args.model).name}: BLEU "
        "with one layer replaced by y = W x + b (Xu et al. 2020, §4)",
    )
    print(
        f"{'layer':<12}{'sacreBLEU':>10}{'Δ (%)':>9}{'tok. BLEU':>11}{'Δ (%)':>9}"
        f"{'unexplained var.':>18}"
    )
    print(
        f"{'none':<12}{results['full']['sacrebleu']:>10.2f}{0:>9.2f}{results['full']['tokenized_bleu']:>11.2f}{0:>9.2f}"
    )
    for row in results["layers"]:
        deltas = [row[f"{metric}_delta_percent"] for metric in ("sacrebleu", "tokenized_bleu")]
        deltas = [f"{delta:>9.2f}" if delta is not None else f"{'n/a':>9}" for delta in deltas]
        print(
            f"{row['stack'] + ' ' + str(row['layer']):<12}{row['sacrebleu']:>10.2f}{deltas[0]}"
            f"{row['tokenized_bleu']:>11.2f}{deltas[1]}{row['unexplained_variance']:>18.4f}"
        )
    print(
        f"Wrote {output_dir / 'layer_nonlinearity.json'} and "
        f"{output_dir / 'layer_nonlinearity.png'}"
    )


def run():
    exit_on_error(main)


if __name__ == "__main__":
    run()
