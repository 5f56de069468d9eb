"""generate()'s decoding loop for the translation models (generation_translation) against transformers' own
(`lean_decoding=False`), interleaved (the order alternating), medians; the depth-wise LSTM at base size, random
weights, float32 and int8, beam 4 and greedy, forced length (benchmark.generate_forced). Both the process's CPU
time and the wall-clock time are timed: on a shared, oversubscribed machine the CPU time of a one-thread run is
the steadier measure of the work (the wall clock also counts the time other jobs held the core).

    PYTHONPATH=. python experiments/benchmark/decode_loop_ab.py [threads] [sources] [repeats]  # decode_loop_ab.txt

First, the score work of one beam-4 step alone (32 sentences x 4 beams x 35,603 scores, what the two loops do
between the output projection and the top-k's result), against the output projection itself, in CPU time: a
measurement fine enough to see what the whole decode's noise hides.
"""

import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

from modeling_dwlstm.precision import cpu_features, int8_route
from nmt_toolkit.lab.benchmark import build_model, generate_forced, inference_copy, random_batch

NEW_TOKENS = 24


def score_passes(sentences: int = 32, beams: int = 4, vocabulary: int = 35603, repeats: int = 30) -> str:
    """Median CPU milliseconds of one step's score work in each loop, and of the output projection producing it."""
    def transformers_loop(logits, beam_scores):  # GenerationMixin._beam_search's passes
        scores = F.log_softmax(logits[:, -1, :].to(copy=True, dtype=torch.float32), dim=-1)
        scores = scores.view(sentences, beams, vocabulary) + beam_scores[:, :, None]
        return torch.topk(scores.reshape(sentences, -1), k=2 * beams)

    def this_loop(logits, beam_scores):  # generation_translation.lean_beam_search's
        scores = logits[:, -1]
        torch.log_softmax(scores, dim=-1, out=scores)
        scores.view(sentences, beams, vocabulary).add_(beam_scores[:, :, None])
        return torch.topk(scores.view(sentences, -1), k=2 * beams)

    weight, hidden = torch.randn(vocabulary, 512) * 0.05, torch.randn(sentences * beams, 1, 512)
    beam_scores = torch.randn(sentences, beams)
    times = {"transformers' loop": [], "this loop": [], "output projection": []}
    for repeat in range(repeats):
        for name, work in list(zip(times, (transformers_loop, this_loop)))[::1 if repeat % 2 == 0 else -1]:
            logits = F.linear(hidden, weight)
            start = time.process_time()
            work(logits, beam_scores)
            times[name].append(time.process_time() - start)
        start = time.process_time()
        F.linear(hidden, weight)
        times["output projection"].append(time.process_time() - start)
    return ", ".join(f"{name} {statistics.median(values) * 1e3:.1f} ms" for name, values in times.items())


def main(threads: int = 1, sources: int = 16, repeats: int = 5):
    torch.set_num_threads(threads)
    print(f"# {cpu_features().describe()}, int8 route {int8_route()}, {threads} thread(s), {sources} sources of 20 "
          f"tokens, {NEW_TOKENS} new tokens, medians of {repeats}; load average before: {os.getloadavg()}", flush=True)
    print(f"one beam-4 step's score work (32 x 4 rows, CPU time, medians of 30): {score_passes()}", flush=True)
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
            cpu, wall = ({name: [] for name in tasks} for _ in range(2))
            for repeat in range(repeats):
                for name in list(tasks)[::1 if repeat % 2 == 0 else -1]:
                    start_cpu, start_wall = time.process_time(), time.perf_counter()
                    tasks[name]()
                    cpu[name].append(time.process_time() - start_cpu)
                    wall[name].append(time.perf_counter() - start_wall)
            line = f"dwlstm {precision} beam{beams} (same tokens: {same}):"
            for clock, times in (("CPU time", cpu), ("wall clock", wall)):
                stock, lean = (statistics.median(times[name]) for name in tasks)
                ratios = sorted(a / b for a, b in zip(*times.values()))
                line += (f" {clock}: transformers' loop {stock:.2f} s, this loop {lean:.2f} s, {stock / lean:.3f}x the "
                         f"speed (per repeat {ratios[0]:.2f}-{ratios[-1]:.2f});")
            print(line.rstrip(";"), flush=True)
    print(f"# load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main(*(int(arg) for arg in sys.argv[1:]))
