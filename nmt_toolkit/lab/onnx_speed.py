"""Greedy decoding speed of the ONNX Runtime export beside `generate()`, float32 and int8, on a
benchmark model.

Measured as `speed.py` measures generation, with its helpers: a randomly initialised model at the
papers' size, a fixed batch of random sources, exactly `new_tokens` new tokens per sentence (the end
of sentence forbidden until then), `threads` threads for both torch and ONNX Runtime, every task
once per repetition in a rotating order and the median over repetitions. `generate()`'s int8 is
`precision.prepare_for_inference(quantize="int8")` (the route this CPU gets); ONNX Runtime's is the
export's int8 graphs. The token agreement of each row with float32 `generate()` is reported beside
its speed (random weights: a sanity check, not a quality measure).
"""

import statistics
import tempfile

import numpy as np
import torch

from modeling_dwlstm.precision import cpu_features, int8_route

from ..onnx_export import OnnxTranslator, export_loaded
from .speed import (
    PAPER_VOCAB_SIZE,
    build_model,
    generate_forced,
    inference_copy,
    interleaved_times,
    random_batch,
    random_words_tokenizer,
)

ROWS = (
    ("generate", "float32"),
    ("generate", "int8"),
    ("onnxruntime", "float32"),
    ("onnxruntime", "int8"),
)


def benchmark_onnx(
    member: str = "dwlstm",
    size: str = "base",
    threads: int = 2,
    repeats: int = 3,
    batch: int = 32,
    source_length: int = 20,
    new_tokens: int = 24,
    vocab_size: int = PAPER_VOCAB_SIZE,
    log=print,
) -> dict:
    """{"settings", "cpu", "sentences_per_second": {"engine/precision": rate},
    "token_agreement": {...}}."""
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = build_model(member, size, vocab_size).eval()
    source = random_batch(batch, source_length, 1, vocab_size, seed=1)
    ids, mask = source["input_ids"].numpy(), source["attention_mask"].numpy()
    with tempfile.TemporaryDirectory() as folder:
        log(f"Exporting {member} ({size}) to ONNX ...")
        export_loaded(model, random_words_tokenizer(vocab_size), folder)
        translators = {
            precision: OnnxTranslator(folder, precision, threads=threads)
            for precision in ("float32", "int8")
        }
        models = {"float32": model, "int8": inference_copy(model, "int8")}
        tasks = {
            ("generate", precision): (
                lambda m=m: generate_forced(m, source, 1, new_tokens, "cpu").numpy()
            )
            for precision, m in models.items()
        }
        tasks.update(
            {
                ("onnxruntime", precision): (
                    lambda t=t: t.generate(
                        ids, mask, max_new_tokens=new_tokens, min_new_tokens=new_tokens
                    )
                )
                for precision, t in translators.items()
            }
        )
        # a warm-up run, also the outputs compared
        outputs = {key: task() for key, task in tasks.items()}
        log(
            f"Timing {', '.join('/'.join(key) for key in ROWS)}: {repeats} interleaved "
            "repetitions ..."
        )
        times = interleaved_times(tasks, repeats, "cpu")  # every time kept: the spread is reported
    reference = outputs["generate", "float32"]
    return {
        "settings": {
            "member": member,
            "size": size,
            "threads": threads,
            "repeats": repeats,
            "batch": batch,
            "source_length": source_length,
            "new_tokens": new_tokens,
            "vocab_size": vocab_size,
            "decoding": "greedy",
        },
        "cpu": {"features": cpu_features().describe(), "generate_int8_route": int8_route()},
        "sentences_per_second": {
            "/".join(key): batch / statistics.median(times[key]) for key in ROWS
        },
        "sentences_per_second_range": {
            "/".join(key): [batch / max(times[key]), batch / min(times[key])] for key in ROWS
        },
        "token_agreement_with_generate_float32": {
            "/".join(key): float(np.mean(outputs[key] == reference)) for key in ROWS
        },
    }


def format_report(report: dict) -> str:
    settings = report["settings"]
    lines = [
        f"{settings['member']} ({settings['size']}), greedy, {settings['batch']} sources of "
        f"{settings['source_length']} tokens, {settings['new_tokens']} new tokens, "
        f"{settings['threads']} threads; CPU {report['cpu']['features']}, generate() int8 route "
        f"{report['cpu']['generate_int8_route']}",
        f"{'row':<22} {'sentences/s (median)':>21} {'range':>13} {'vs generate float32':>20} "
        f"{'tokens as generate float32':>27}",
    ]
    rates, agreement = (
        report["sentences_per_second"],
        report["token_agreement_with_generate_float32"],
    )
    for row, rate in rates.items():
        low, high = report["sentences_per_second_range"][row]
        lines.append(
            f"{row:<22} {rate:>21.2f} {f'{low:.2f}-{high:.2f}':>13} "
            f"{rate / rates['generate/float32']:>19.2f}x {agreement[row]:>26.1%}"
        )
    return "\n".join(lines)


__all__ = ["benchmark_onnx", "format_report"]
