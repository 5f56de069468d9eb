"""Where generate() time goes (base, random weights, 32 sources of 20 tokens, 24 forced new tokens): inside the
model's forward calls vs generate()'s own work between them (logits to float32, log-softmax, logits processors,
beam scores, top-k, cache reordering). Medians of 3.

    PYTHONPATH=. python experiments/benchmark/beam_search_share.py 1 float32 bfloat16   # threads, precisions
"""

import statistics
import sys
import time

import torch

from nmt_toolkit.lab.benchmark import build_model, generate_forced, inference_copy, random_batch


def time_inside_forward(model, source, beams: int) -> tuple[float, float]:
    """(seconds of one generate(), share of it spent inside the model's forward calls)."""
    inside = []
    hooks = [model.register_forward_pre_hook(lambda module, args: inside.append(-time.perf_counter())),
             model.register_forward_hook(lambda module, args, output: inside.append(inside.pop() + time.perf_counter()))]
    start = time.perf_counter()
    generate_forced(model, source, beams, 24, "cpu")
    total = time.perf_counter() - start
    for hook in hooks:
        hook.remove()
    return total, sum(inside) / total


def main(threads: int, precisions: list[str]):
    torch.set_num_threads(threads)
    source = random_batch(32, 20, 1, 35603, seed=1)
    for member in ("residual-prenorm", "dwlstm", "marian"):
        torch.manual_seed(0)
        base = build_model(member, "base").eval()
        for precision in precisions:
            model = inference_copy(base, precision)
            rows = []
            for beams in (4, 1):
                totals, shares = zip(*[time_inside_forward(model, source, beams) for _ in range(3)])
                total, share = statistics.median(totals), statistics.median(shares)
                rows.append(f"beam{beams}: {total:.3f} s, model forward {share:.1%}, generate() outside it {total * (1 - share):.3f} s")
            print(member, precision, " | ".join(rows), flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 2, sys.argv[2:] or ["float32", "bfloat16"])
