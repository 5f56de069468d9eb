"""Compiled decoding steps with inductor's options against compiled steps without them and eager
steps: `freezing` (weights constant-folded and packed inside the graph) and `cpp_wrapper` (the
graph's kernels called from generated C++ instead of a Python wrapper). A base-size random
depth-wise LSTM, 32 sources of 20 tokens, 24 forced new tokens, beam 4 and greedy, interleaved
medians; the first decode of each (the compile) printed, and the tokens compared with eager's.

    PYTHONPATH=. python experiments/speed/round-four/compiled_freezing_ab.py --precision bfloat16
    PYTHONPATH=. python experiments/speed/round-four/compiled_freezing_ab.py --precision int8 \
        --variants eager compiled "compiled, cpp_wrapper"
"""

import argparse
import functools
import statistics
import time

import torch
from transformers import CompileConfig

from nmt_toolkit.lab.speed import (
    build_model,
    generate_forced,
    inference_copy,
    interleaved_times,
    random_batch,
)

OPTIONS = {
    "eager": None,
    "compiled": CompileConfig(dynamic=None, mode="default"),
    "compiled, freezing": CompileConfig(dynamic=None, mode=None, options={"freezing": True}),
    "compiled, cpp_wrapper": CompileConfig(dynamic=None, mode=None, options={"cpp_wrapper": True}),
}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--precision", default="bfloat16")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--variants", nargs="+", default=list(OPTIONS)[:3], choices=list(OPTIONS))
    args = parser.parse_args()
    if "eager" not in args.variants:
        parser.error("--variants must include eager: the others are compared with it")
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = build_model("dwlstm", "base").eval()
    batch = random_batch(32, 20, 24, model.config.vocab_size)
    copies = {name: inference_copy(model, args.precision) for name in args.variants}

    def run(name, beams):
        config = OPTIONS[name]
        options = {} if config is None else {"compile_decoding": True, "compile_config": config}
        return generate_forced(copies[name], batch, beams, 24, "cpu", **options)

    outputs = {}
    for name in args.variants:
        for beams in (4, 1):
            start = time.perf_counter()
            outputs[name, beams] = run(name, beams)
            print(f"{name} beam {beams}: first decode {time.perf_counter() - start:.1f} s")
    for name in args.variants:
        for beams in (4, 1):
            differ = (outputs[name, beams] != outputs["eager", beams]).any(-1).float().mean()
            print(f"{name} beam {beams}: {differ.item():.0%} of the sentences differ from eager")
    tasks = {
        (beams, name): functools.partial(run, name, beams)
        for beams in (4, 1)
        for name in args.variants
    }
    times = interleaved_times(tasks, args.repeats, "cpu")
    for (beams, name), seconds in sorted(times.items()):
        eager = statistics.median(times[beams, "eager"])
        median = statistics.median(seconds)
        print(f"beam {beams} {name}: median {median:.3f} s, speed {eager / median:.2f}x eager")


if __name__ == "__main__":
    main()
