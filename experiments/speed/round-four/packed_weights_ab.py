"""bfloat16 products with the weight packed for oneDNN (`precision.PackedBfloat16Projection`)
against PyTorch's plain bfloat16 F.linear, which reorders the weight at every call.

`products`: one bfloat16 linear at a base model's shapes (d 512, feed-forward 2048, a 32k
vocabulary) and 128 / 512 / 4096 rows, plain, packed, and float32, best of many calls:

    PYTHONPATH=. python experiments/speed/round-four/packed_weights_ab.py products

`decode`: a base-size random depth-wise LSTM in bfloat16, `--sentences` sources of 20 tokens, 24
forced new tokens, beam 4 and greedy, interleaved medians of `--repeats` (`interleaved_times`:
the order rotated each repetition); four copies: unpacked
(`pack_weights=False`), packed as `prepare_for_inference` packs (up to PACKED_PRODUCT_MAX_ROWS
rows), packed at every row count, and packed except the output projection. The tokens of each are
compared with the unpacked copy's:

    PYTHONPATH=. python experiments/speed/round-four/packed_weights_ab.py decode --sentences 32
    PYTHONPATH=. python experiments/speed/round-four/packed_weights_ab.py decode --sentences 256
"""

import argparse
import copy
import functools
import math
import statistics
import time

import torch
import torch.nn.functional as F

from modeling_dwlstm import precision
from modeling_dwlstm.precision import OUTPUT_PROJECTION, prepare_for_inference
from nmt_toolkit.lab.speed import (
    build_model,
    cpu_identity,
    generate_forced,
    interleaved_times,
    random_batch,
)

# (inner, outer) of the base model's products: attention, feed-forward in and out, the vocabulary
SHAPES = [(512, 512), (512, 2048), (2048, 512), (512, 32000)]


def best_seconds(task, flops: int) -> float:
    calls = max(5, int(2e9 / flops))
    for _ in range(10):
        task()
    start = time.perf_counter()
    for _ in range(calls):
        task()
    return (time.perf_counter() - start) / calls


def product_seconds(rows: int, inner: int, outer: int) -> dict:
    """Seconds of one (rows, inner) x (inner, outer) linear with a bias: bfloat16 plain and packed,
    float32."""
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(rows, inner, generator=generator)
    w = torch.randn(outer, inner, generator=generator)
    b = torch.randn(outer, generator=generator)
    bx, bw, bb = x.bfloat16(), w.bfloat16(), b.bfloat16()
    packed = torch.ops.mkldnn._reorder_linear_weight(bw, None)
    flops = 2 * rows * inner * outer
    return {
        "bfloat16": best_seconds(lambda: F.linear(bx, bw, bb), flops),
        "packed": best_seconds(lambda: precision.onednn_linear(bx, packed, bb), flops),
        "float32": best_seconds(lambda: F.linear(x, w, b), flops),
    }


def products(args):
    for rows in (128, 512, 4096):
        for inner, outer in SHAPES:
            seconds = product_seconds(rows, inner, outer)
            flops = 2 * rows * inner * outer
            print(
                f"{rows:5} rows x {inner:5} -> {outer:6}: "
                + ", ".join(
                    f"{name} {s * 1e3:.3f} ms ({flops / s / 1e9:.0f} GFLOP/s)"
                    for name, s in seconds.items()
                )
                + f"; packed / plain speed {seconds['bfloat16'] / seconds['packed']:.2f}x",
                flush=True,
            )


def unpacked_head(model):
    """`model` with its output projection back to an unpacked nn.Linear class."""
    head = model.get_submodule(OUTPUT_PROJECTION)
    head.__class__ = type(head).__mro__[2]  # PackedLinear -> (PackedBfloat16Projection, Linear)
    return model


def decode(args):
    torch.manual_seed(0)
    model = build_model("dwlstm", "base").eval()
    batch = random_batch(args.sentences, 20, 24, model.config.vocab_size)

    copies = {
        "unpacked": prepare_for_inference(copy.deepcopy(model), "bfloat16", pack_weights=False),
        "packed": prepare_for_inference(copy.deepcopy(model), "bfloat16"),
        "packed, every row": prepare_for_inference(copy.deepcopy(model), "bfloat16"),
        "packed, not the output projection": unpacked_head(
            prepare_for_inference(copy.deepcopy(model), "bfloat16")
        ),
    }
    every_row = {"packed, every row"}
    limit = precision.PACKED_PRODUCT_MAX_ROWS

    def run(name, beams):
        precision.PACKED_PRODUCT_MAX_ROWS = math.inf if name in every_row else limit
        try:
            return generate_forced(copies[name], batch, beams, 24, "cpu")
        finally:
            precision.PACKED_PRODUCT_MAX_ROWS = limit

    for beams in (4, 1):
        expected = run("unpacked", beams)
        for name in copies:
            differ = (run(name, beams) != expected).any(-1).float().mean().item()
            print(f"beam {beams} {name}: {differ:.0%} of the sentences differ from unpacked")
    tasks = {
        (beams, name): functools.partial(run, name, beams) for beams in (4, 1) for name in copies
    }
    times = interleaved_times(tasks, args.repeats, "cpu")
    for (beams, name), seconds in sorted(times.items()):
        base = statistics.median(times[beams, "unpacked"])
        median = statistics.median(seconds)
        print(
            f"{args.sentences} sentences, beam {beams}, {name}: median {median:.3f} s, speed "
            f"{base / median:.2f}x unpacked ({', '.join(f'{s:.3f}' for s in seconds)})"
        )


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("measurement", choices=("products", "decode"))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--sentences", type=int, default=32)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"# {args}, torch {torch.__version__}, {precision.cpu_features().describe()}")
    print(f"# {cpu_identity()}")
    {"products": products, "decode": decode}[args.measurement](args)


if __name__ == "__main__":
    main()
