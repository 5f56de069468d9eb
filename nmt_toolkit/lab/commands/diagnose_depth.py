"""Train deep models for a few hundred updates and record what reaches each layer (gradients,
activations, depth-wise LSTM gates and how much of the embedding the cell still carries); write
diagnosis.json and a picture.

    dwlstm-diagnose-depth --data path/to/multi30k --tokenizer experiments/multi30k-en-de/tokenizer \
        --configs hub_configs/dwlstm-base-6l.json hub_configs/residual-prenorm-base-6l.json \
        --d_model 128 --ffn_dim 512 --heads 4 --layers 12 --steps 300 --every 25 --output_dir diagnosis --threads 1

Every model starts from the same seed and sees the same batches. The work is done by
`nmt_toolkit.lab.depth_diagnosis.trace_training` and
`nmt_toolkit.lab.plotting_analysis.plot_depth_diagnosis`.
"""  # noqa: E501

import argparse
import json
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForSeq2SeqLM

import modeling_dwlstm  # noqa: F401  (registers the model family with the Auto classes)
from nmt_toolkit.arguments import finite_float, non_negative_int, positive_int
from nmt_toolkit.checkpoints import load_saved_tokenizer
from nmt_toolkit.cli import add_run_arguments, exit_on_error, prepare_run_output
from nmt_toolkit.data import load_parallel_corpus
from nmt_toolkit.files import atomic_write_json, set_threads
from nmt_toolkit.lab.depth_diagnosis import token_batches, trace_training
from nmt_toolkit.lab.plotting_analysis import plot_depth_diagnosis
from nmt_toolkit.training import check_config_fields, read_config_file


def read_overrides(text: str) -> dict:
    """--config_overrides: a JSON object of config fields."""
    try:
        overrides = json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(
            f"--config_overrides is not valid JSON ({error}); give an object like "
            "'{\"dropout\": 0.1}'."
        ) from error
    if not isinstance(overrides, dict):
        raise ValueError(
            f"--config_overrides must be a JSON object like '{{\"dropout\": 0.1}}', got {text!r}."
        )
    return overrides


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--data", required=True, help="Training corpus: a folder of {split}.{lang}[.gz], ..."
    )
    parser.add_argument("--source_lang", default="en")
    parser.add_argument("--target_lang", default="de")
    parser.add_argument(
        "--max_pairs", type=positive_int, default=None, help="Use only the first N training pairs."
    )
    parser.add_argument("--tokenizer", required=True, help="A saved tokenizer folder.")
    parser.add_argument(
        "--configs", nargs="+", required=True, help="Config JSON files (e.g. hub_configs/...)."
    )
    parser.add_argument(
        "--names", nargs="+", default=None, help="One name per config (default: the file names)."
    )
    parser.add_argument(
        "--config_overrides",
        default="{}",
        help="JSON of fields set on every config, e.g. '{\"dropout\": 0.1}'.",
    )
    parser.add_argument("--d_model", type=positive_int, default=128)
    parser.add_argument("--ffn_dim", type=positive_int, default=512)
    parser.add_argument("--heads", type=positive_int, default=4)
    parser.add_argument(
        "--layers", type=positive_int, default=12, help="Encoder and decoder layers."
    )
    parser.add_argument("--steps", type=positive_int, default=300)
    parser.add_argument(
        "--every", type=positive_int, default=25, help="Record every N updates (and the first)."
    )
    parser.add_argument("--learning_rate", type=finite_float, default=1e-3)
    parser.add_argument("--warmup_steps", type=non_negative_int, default=200)
    parser.add_argument(
        "--max_tokens", type=positive_int, default=2048, help="Padded tokens per batch and side."
    )
    parser.add_argument("--seed", type=int, default=1)
    add_run_arguments(parser)
    args = parser.parse_args(argv)
    names = args.names or [Path(path).stem for path in args.configs]
    if len(names) != len(args.configs):
        raise ValueError(f"--names gives {len(names)} names for {len(args.configs)} --configs.")
    overrides = read_overrides(args.config_overrides)
    # a missing file, a JSON error, a model_type typo or an unknown field: before any work
    for path in args.configs:
        check_config_fields(read_config_file(path)["model_type"], overrides, "--config_overrides")
    set_threads(args.threads)
    output_dir = prepare_run_output(
        args, {"--data": args.data, "--tokenizer": args.tokenizer, "--configs": args.configs}
    )
    tokenizer = load_saved_tokenizer(args.tokenizer, "--tokenizer")
    corpus = load_parallel_corpus(
        args.data, args.source_lang, args.target_lang, "train", max_pairs=args.max_pairs
    )["translation"]
    pairs = [(pair[args.source_lang], pair[args.target_lang]) for pair in corpus]
    batches = token_batches(tokenizer, pairs, args.max_tokens, args.steps, seed=args.seed)
    size = dict(
        d_model=args.d_model,
        ffn_dim=args.ffn_dim,
        encoder_attention_heads=args.heads,
        decoder_attention_heads=args.heads,
        encoder_layers=args.layers,
        decoder_layers=args.layers,
        vocab_size=len(tokenizer),
        **overrides,
    )
    traces = {}
    for name, path in zip(names, args.configs):
        torch.manual_seed(args.seed)
        model = AutoModelForSeq2SeqLM.from_config(AutoConfig.from_pretrained(path, **size)).to(
            args.device
        )
        traces[name] = trace_training(
            model, batches, args.learning_rate, args.warmup_steps, args.every
        )
        print(
            f"{name}: loss {traces[name][0]['loss']:.2f} -> {traces[name][-1]['loss']:.2f} in "
            f"{args.steps} updates"
        )
    settings = {
        key: value
        for key, value in vars(args).items()
        if key not in ("output_dir", "overwrite_output_dir")
    }
    atomic_write_json(output_dir / "diagnosis.json", {"settings": settings, "traces": traces})
    plot_depth_diagnosis(
        traces,
        output_dir / "diagnosis.png",
        title=f"{args.layers}+{args.layers} layers, d {args.d_model}: what reaches each layer",
    )
    print(f"Wrote {output_dir / 'diagnosis.json'} and {output_dir / 'diagnosis.png'}")


def run():
    exit_on_error(main)


if __name__ == "__main__":
    run()
