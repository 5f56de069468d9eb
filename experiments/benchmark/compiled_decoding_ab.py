"""Decoding steps through torch.compile (`generate(..., compile_decoding=True)`) against eager decoding, int8 base
models on this CPU's int8 route, 32 sources of 20 tokens, 24 forced new tokens, beam 4 and greedy, interleaved in
one process (`interleaved_times`: the order rotating), medians. The compile itself (one graph per search: the
batch differs) is timed once, in the warm-up, and left out of the medians.

    PYTHONPATH=. python experiments/benchmark/compiled_decoding_ab.py THREADS REPEATS [PRECISION]
    # record: compiled_decoding_ab.txt
"""

import sys
import time

import torch

from nmt_toolkit.lab.benchmark import build_model, generate_forced, inference_copy, interleaved_times, random_batch

MEMBERS = ("dwlstm", "residual-prenorm")
SEARCHES = {"beam 4": 4, "greedy": 1}


def main(threads: int, repeats: int, precision: str = "int8"):
    torch.set_num_threads(threads)
    tasks, compile_seconds = {}, {}
    for member in MEMBERS:
        torch.manual_seed(0)
        model = inference_copy(build_model(member, "base").eval(), precision)
        source = random_batch(32, 20, 1, model.config.vocab_size, seed=1)
        for search, beams in SEARCHES.items():
            eager = generate_forced(model, source, beams, 24, "cpu")
            start = time.perf_counter()
            compiled = generate_forced(model, source, beams, 24, "cpu", compile_decoding=True)
            compile_seconds[member, search] = time.perf_counter() - start
            if not torch.equal(eager, compiled):
                raise SystemExit(f"{member} {search}: compiled decoding gave other tokens")
            for variant, options in (("eager", {}), ("compiled", {"compile_decoding": True})):
                tasks[member, search, variant] = (
                    lambda m=model, s=source, b=beams, o=options: generate_forced(m, s, b, 24, "cpu", **o))
    times = interleaved_times(tasks, repeats, "cpu")
    for member in MEMBERS:
        for search in SEARCHES:
            eager, compiled = (sorted(times[member, search, variant]) for variant in ("eager", "compiled"))
            ratios = sorted(e / c for e, c in zip(times[member, search, "eager"], times[member, search, "compiled"]))
            print(f"{member} {precision} {search}, {threads} thread(s): eager {eager[len(eager) // 2]:.3f} s, "
                  f"compiled {compiled[len(compiled) // 2]:.3f} s: {ratios[len(ratios) // 2]:.2f}x (paired ratios "
                  f"{ratios[0]:.2f}-{ratios[-1]:.2f}); first compiled decode {compile_seconds[member, search]:.0f} s")


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), *sys.argv[3:])
