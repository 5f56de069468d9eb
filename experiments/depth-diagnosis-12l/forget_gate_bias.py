"""Does the 12+12 depth-wise LSTM learn slower because its forget gates start at 0.5? The depth
diagnosis (RESULTS.md) found every forget gate at 0.5 +- 0.02 for 300 updates, so the cell keeps
about 0.5^12 of the embedding at the top of a stack. This trains the same model from the same seed
on the same batches as that diagnosis, with the forget gate's LayerNorm bias started at `b` instead
of 0 (sigmoid(b) of the cell carried on per layer at the start: b = 1 keeps 0.73 per layer, b = 2
keeps 0.88), and compares its training loss with the diagnosis' models. Xu et al. 2024 do not set a
gate bias (their LayerNorms start at ones and zeros), so this is an experiment, not a fix.

    PYTHONPATH=. python experiments/depth-diagnosis-12l/forget_gate_bias.py --data path/to/multi30k --biases 1 2 --threads 1
    PYTHONPATH=. python experiments/depth-diagnosis-12l/forget_gate_bias.py --report   # the table and the picture again
"""  # noqa: E501

import argparse
import json
import statistics
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForSeq2SeqLM

import modeling_dwlstm  # noqa: F401  (registers the model family with the Auto classes)
from modeling_dwlstm.modeling_dwlstm import DepthWiseLstmGates
from nmt_toolkit.checkpoints import load_saved_tokenizer
from nmt_toolkit.data import load_parallel_corpus
from nmt_toolkit.files import atomic_write_json, set_threads
from nmt_toolkit.lab.depth_diagnosis import token_batches, trace_training
from nmt_toolkit.lab.plotting_analysis import plot_depth_diagnosis

REPOSITORY = Path(__file__).resolve().parents[2]
DIAGNOSIS = REPOSITORY / "experiments" / "results" / "depth-diagnosis-12l" / "diagnosis.json"
FORGET = 1  # the gates' order in DepthWiseLstmGates: input, forget, output


def median_loss(trace: list[dict], first: int = 150) -> float:
    return statistics.median(record["loss"] for record in trace if record["step"] >= first)


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data", help="Multi30k's folder.")
    parser.add_argument("--biases", type=float, nargs="+", default=[1.0, 2.0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--output", type=Path, default=DIAGNOSIS.with_name("forget-gate-bias.json"))
    parser.add_argument(
        "--report", action="store_true", help="Only the table and the picture, from --output."
    )
    args = parser.parse_args()
    diagnosis = json.loads(DIAGNOSIS.read_text())
    if not args.report:
        if not args.data:
            parser.error("--data (Multi30k's folder) is needed to train; --report only redraws.")
        train(args, diagnosis)
    report(
        diagnosis, json.loads(args.output.read_text())["traces"], args.output.with_suffix(".png")
    )


def train(args, diagnosis: dict):
    settings = diagnosis["settings"]
    set_threads(args.threads)
    tokenizer = load_saved_tokenizer(
        REPOSITORY / "experiments" / "results" / "multi30k-en-de" / "tokenizer"
    )
    corpus = load_parallel_corpus(args.data, "en", "de", "train")["translation"]
    batches = token_batches(
        tokenizer,
        [(pair["en"], pair["de"]) for pair in corpus],
        settings["max_tokens"],
        settings["steps"],
        seed=settings["seed"],
    )
    size = dict(
        d_model=settings["d_model"],
        ffn_dim=settings["ffn_dim"],
        encoder_attention_heads=settings["heads"],
        decoder_attention_heads=settings["heads"],
        encoder_layers=settings["layers"],
        decoder_layers=settings["layers"],
        vocab_size=len(tokenizer),
        **json.loads(settings["config_overrides"]),
    )
    traces = {}
    for bias in args.biases:
        torch.manual_seed(settings["seed"])
        model = AutoModelForSeq2SeqLM.from_config(
            AutoConfig.from_pretrained(REPOSITORY / settings["configs"][0], **size)
        )
        gates = [module for module in model.modules() if isinstance(module, DepthWiseLstmGates)]
        with torch.no_grad():
            for module in gates:
                module.norm_bias[FORGET].fill_(bias)
        name = f"dwlstm-forget-bias-{bias:g}"
        traces[name] = trace_training(
            model, batches, settings["learning_rate"], settings["warmup_steps"], settings["every"]
        )
        print(
            f"{name} ({len(gates)} gate modules): loss {traces[name][0]['loss']:.2f} -> "
            f"{traces[name][-1]['loss']:.2f}",
            flush=True,
        )
    atomic_write_json(
        args.output, {"settings": {**settings, "forget_gate_biases": args.biases}, "traces": traces}
    )


def report(diagnosis: dict, traces: dict, picture: Path):
    steps = diagnosis["settings"]["steps"]
    print(f"median training loss over updates 150-{steps} (the diagnosis' measure):")
    for name, trace in {**diagnosis["traces"], **traces}.items():
        print(
            f"  {name}: {median_loss(trace):.3f}; at update {trace[-1]['step']}: "
            f"{trace[-1]['loss']:.3f}"
        )
    shown = {
        "dwlstm (forget bias 0)": diagnosis["traces"]["dwlstm"],
        **traces,
        "residual-prenorm": diagnosis["traces"]["residual-prenorm"],
    }
    plot_depth_diagnosis(
        shown,
        picture,
        title=f"12+12 layers, d 128: the depth-wise LSTM's forget gates started at "
        f"sigmoid(b), {steps} updates",
    )
    print(f"Wrote {picture}")


if __name__ == "__main__":
    main()
