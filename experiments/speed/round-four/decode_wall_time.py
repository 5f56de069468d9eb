"""Where the eager decode's wall time goes, without torch.profiler (whose per-operator cost swells
the many small operators of a decoding step, the cache's copies most): a base-size random
depth-wise LSTM (seed 0), 32 sources of 20 tokens, 24 forced new tokens, 2 threads, after one
warm-up decode (`speed.decoding_comparison_inputs`).

    # the self-attention cache's append (`torch.cat`) and beam reorder (`index_select`), timed
    # with the wall clock around transformers' DynamicLayer methods, beside the whole decode
    PYTHONPATH=. python experiments/speed/round-four/decode_wall_time.py cache int8 --beams 4

    # the decode in a loop for a sampling profiler, then its samples summed by source line
    pip install py-spy
    PYTHONPATH=. py-spy record -r 100 -f raw -o spy.txt -- \\
        python experiments/speed/round-four/decode_wall_time.py loop int8 --beams 4 --repeats 15
    python experiments/speed/round-four/decode_wall_time.py lines spy.txt
"""

import argparse
import re
import statistics
import time
from collections import Counter

import torch
from transformers.cache_utils import DynamicLayer

from nmt_toolkit.lab.speed import decoding_comparison_inputs, generate_forced

STEPS = 24


def time_cache(precision: str, beams: int, repeats: int) -> None:
    model, batch = decoding_comparison_inputs(precision, 32)
    generate_forced(model, batch, beams, STEPS, "cpu")  # warm-up
    seconds = Counter()
    update, reorder = DynamicLayer.update, DynamicLayer.reorder_cache

    def timed_update(self, *args, **kwargs):
        started = time.perf_counter()
        try:
            return update(self, *args, **kwargs)
        finally:
            seconds["append (cat)"] += time.perf_counter() - started

    def timed_reorder(self, beam_idx):
        started = time.perf_counter()
        try:
            return reorder(self, beam_idx)
        finally:
            seconds["reorder (index_select)"] += time.perf_counter() - started

    DynamicLayer.update, DynamicLayer.reorder_cache = timed_update, timed_reorder
    try:
        for _ in range(repeats):
            seconds.clear()
            started = time.perf_counter()
            generate_forced(model, batch, beams, STEPS, "cpu")
            wall = time.perf_counter() - started
            parts = ", ".join(f"{name} {value:.3f} s" for name, value in seconds.items())
            print(f"{precision}, beams {beams}: decode {wall:.3f} s; {parts}", flush=True)
    finally:
        DynamicLayer.update, DynamicLayer.reorder_cache = update, reorder


def decode_in_loop(precision: str, beams: int, repeats: int) -> None:
    model, batch = decoding_comparison_inputs(precision, 32)
    generate_forced(model, batch, beams, STEPS, "cpu")  # warm-up
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        generate_forced(model, batch, beams, STEPS, "cpu")
        times.append(time.perf_counter() - started)
    print(f"{precision}, beams {beams}: median decode {statistics.median(times):.3f} s")


def sampled_lines(raw_file: str, top: int = 25) -> None:
    """py-spy's raw output (one `frame;frame;... count` a line), the samples under the decode
    (`generate_forced`) summed by innermost source line and by function (inclusive)."""
    lines, functions, total = Counter(), Counter(), 0
    with open(raw_file) as samples:
        for sample in samples:
            stack, count = sample.rstrip().rsplit(" ", 1)
            if "generate_forced" not in stack:
                continue
            frames = stack.split(";")
            total += int(count)
            lines[frames[-1]] += int(count)
            for function in {re.sub(r":\d+\)$", ")", frame) for frame in frames}:
                functions[function] += int(count)
    print(f"{total} samples under the decode; by source line:")
    for line, count in lines.most_common(top):
        print(f"{100 * count / total:5.1f}% {line}")
    print("by function, inclusive:")
    for function, count in functions.most_common(top + 15):
        print(f"{100 * count / total:5.1f}% {function}")


def main():
    parser = argparse.ArgumentParser()
    commands = parser.add_subparsers(dest="command", required=True)
    for name in ("cache", "loop"):
        command = commands.add_parser(name)
        command.add_argument("precision")
        command.add_argument("--beams", type=int, default=4)
        command.add_argument("--repeats", type=int, default=3 if name == "cache" else 15)
    commands.add_parser("lines").add_argument("raw_file")
    args = parser.parse_args()
    torch.set_num_threads(2)
    if args.command == "cache":
        time_cache(args.precision, args.beams, args.repeats)
    elif args.command == "loop":
        decode_in_loop(args.precision, args.beams, args.repeats)
    else:
        sampled_lines(args.raw_file)


if __name__ == "__main__":
    main()
