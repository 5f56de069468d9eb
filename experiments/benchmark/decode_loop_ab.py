"""generate()'s decoding loop for the translation models (generation_translation) against transformers' own
(`lean_decoding=False`), interleaved (the order alternating), medians; the depth-wise LSTM at base size, random
weights, float32 and int8, beam 4 and greedy, forced length (benchmark.generate_forced).

    PYTHONPATH=. python experiments/benchmark/decode_loop_ab.py [threads] [sources] [repeats]  # decode_loop_ab.txt
"""

import os
import statistics
import sys
import time

import torch

from modeling_dwlstm.precision import cpu_features, int8_route
from nmt_toolkit.lab.benchmark import build_model, generate_forced, inference_copy, random_batch

NEW_TOKENS = 24


def main(threads: int = 1, sources: int = 16, repeats: int = 5):
    torch.set_num_threads(threads)
    print(f"# {cpu_features().describe()}, int8 route {int8_route()}, {threads} thread(s), {sources} sources of 20 "
          f"tokens, {NEW_TOKENS} new tokens, medians of {repeats}; load average before: {os.getloadavg()}", flush=True)
    source = random_batch(sources, 20, 1, 35603, seed=1)
    torch.manual_seed(0)
    base = build_model("dwlstm", "base").eval()
    for precision in ("float32", "int8"):
        model = inference_copy(base, precision)
        for beams in (4, 1):
            tasks = {"transformers' loop": lambda m=model, b=beams: generate_forced(m, source, b, NEW_TOKENS, "cpu",
                                                                                  lean_decoding=False),
                     "this loop": lambda m=model, b=beams: generate_forced(m, source, b, NEW_TOKENS, "cpu")}
            same = torch.equal(*(task() for task in tasks.values()))  # also the warm-up
            times = {name: [] for name in tasks}
            for repeat in range(repeats):
                for name in list(tasks)[::1 if repeat % 2 == 0 else -1]:
                    start = time.perf_counter()
                    tasks[name]()
                    times[name].append(time.perf_counter() - start)
            stock, lean = (statistics.median(times[name]) for name in tasks)
            ratios = sorted(a / b for a, b in zip(*times.values()))
            print(f"dwlstm {precision} beam{beams}: transformers' loop {stock:.2f} s, this loop {lean:.2f} s: "
                  f"{stock / lean:.3f}x the speed (per-repeat ratios {ratios[0]:.2f}-{ratios[-1]:.2f}); "
                  f"same tokens: {same}", flush=True)
    print(f"# load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main(*(int(arg) for arg in sys.argv[1:]))
