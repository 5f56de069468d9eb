"""Embedding-layer gradient norm of a deep post-norm residual Transformer vs post-norm DLCL (Wang et
al. 2019, §5.1), in a short training run on Multi30k (--data_dir: a local Multi30k folder). Prints
the norms over the run and writes them as JSON.

    dwlstm-measure-gradient-norms --data_dir path/to/multi30k --steps 80
"""

import argparse
from pathlib import Path

from modeling_dwlstm import DlclConfig, ResidualTransformerConfig
from modeling_dwlstm.tokenization_dwlstm import tokenizer_model_kwargs, train_joint_bpe_tokenizer
from nmt_toolkit.arguments import finite_float, non_negative_int, positive_int
from nmt_toolkit.cli import exit_on_error
from nmt_toolkit.data import load_parallel_corpus
from nmt_toolkit.files import atomic_write_json
from nmt_toolkit.lab.gradient_norms import compare_embedding_gradient_norms, translation_batches


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--data_dir",
        type=Path,
        default=Path(__file__).resolve().parents[4] / "shared" / "data" / "multi30k",
    )
    parser.add_argument("--source", default="en")
    parser.add_argument("--target", default="de")
    parser.add_argument("--sentences", type=positive_int, default=4000)
    parser.add_argument("--steps", type=positive_int, default=80)
    parser.add_argument("--batch_size", type=positive_int, default=32)
    parser.add_argument("--encoder_layers", type=positive_int, default=20)
    parser.add_argument("--decoder_layers", type=positive_int, default=6)
    parser.add_argument("--d_model", type=positive_int, default=64)
    parser.add_argument("--learning_rate", type=finite_float, default=2e-3)
    parser.add_argument("--warmup_steps", type=non_negative_int, default=40)
    parser.add_argument("--output", type=Path, default=Path("gradient_norms.json"))
    args = parser.parse_args(argv)
    if args.output.is_dir():  # found before the work, not when the results are written
        parser.error(
            f"--output {args.output} is a folder; give the JSON file to write, e.g. {args.output}"
            "/norms.json."
        )

    pairs = load_parallel_corpus(
        args.data_dir, args.source, args.target, "train", max_pairs=args.sentences
    )
    sources = [pair[args.source] for pair in pairs["translation"]]
    targets = [pair[args.target] for pair in pairs["translation"]]
    tokenizer = train_joint_bpe_tokenizer(sources + targets, vocab_size=2000)
    size = dict(
        **tokenizer_model_kwargs(tokenizer),
        d_model=args.d_model,
        ffn_dim=4 * args.d_model,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_layers=args.encoder_layers,
        decoder_layers=args.decoder_layers,
        dropout=0.1,
    )
    configs = {
        "residual-postnorm": ResidualTransformerConfig(norm_position="post", **size),
        "dlcl-postnorm": DlclConfig(norm_position="post", **size),
    }
    batches = translation_batches(
        tokenizer, list(zip(sources, targets)), args.batch_size, args.steps
    )
    results = compare_embedding_gradient_norms(
        configs, batches, learning_rate=args.learning_rate, warmup_steps=args.warmup_steps
    )
    atomic_write_json(args.output, results)
    print(
        f"{args.encoder_layers}-layer encoder, {args.decoder_layers}-layer decoder, d_model "
        f"{args.d_model}, {args.steps} steps of {args.batch_size} sentence pairs ({args.source}->"
        f"{args.target})"
    )
    print("step  " + "  ".join(f"{name:>28}" for name in results))
    for i in range(0, args.steps, max(1, args.steps // 10)):
        print(
            f"{i + 1:4d}  "
            + "  ".join(
                f"grad {r[i]['embedding_gradient_norm']:.2e} loss {r[i]['loss']:5.2f}".rjust(28)
                for r in results.values()
            )
        )
    for name, records in results.items():
        norms = [r["embedding_gradient_norm"] for r in records]
        print(
            f"{name}: mean embedding gradient norm {sum(norms) / len(norms):.3e} (first 10 steps "
            f"{sum(norms[:10]) / 10:.3e}, last 10 {sum(norms[-10:]) / 10:.3e}), final loss "
            f"{records[-1]['loss']:.2f}"
        )


def run():
    exit_on_error(main)


if __name__ == "__main__":
    run()
