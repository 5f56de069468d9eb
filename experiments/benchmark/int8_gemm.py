"""GEMM rates on this CPU by dtype: float32 and bfloat16 `@` against `torch._int_mm` (int8 x int8 -> int32, the
product precision.py's int8 route uses), at the shapes of a base decode step with 4 x 32 beams (rows 128) and a
square 2048 one. Best of 5 after a warm-up, GFLOP/s counted as 2 m k n.

    PYTHONPATH=. python experiments/benchmark/int8_gemm.py 2      # threads; output in int8_gemm.txt
"""

import sys
import time

import torch

SHAPES = [(2048, 2048, 2048), (128, 512, 1536), (128, 512, 2048), (128, 2048, 512), (128, 512, 35603)]


def best_seconds(task, repeats: int = 5) -> float:
    task()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        task()
        times.append(time.perf_counter() - start)
    return min(times)


def rates(rows: int, inner: int, columns: int) -> dict:
    """{dtype: GFLOP/s} of (rows, inner) x (columns, inner)^T, the weight stored (out, in) as nn.Linear's."""
    a, weight = torch.randn(rows, inner), torch.randn(columns, inner)
    a16, weight16 = a.bfloat16(), weight.bfloat16()
    a8, weight8 = (torch.randint(-127, 128, t.shape, dtype=torch.int8) for t in (a, weight))
    seconds = {"float32": best_seconds(lambda: a @ weight.t()), "bfloat16": best_seconds(lambda: a16 @ weight16.t()),
               "int8 (_int_mm)": best_seconds(lambda: torch._int_mm(a8, weight8.t()))}
    return {name: 2 * rows * inner * columns / s / 1e9 for name, s in seconds.items()}


def main(threads: int):
    torch.set_num_threads(threads)
    for shape in SHAPES:
        print("m={} k={} n={}: ".format(*shape) + ", ".join(f"{name} {rate:.0f}" for name, rate in rates(*shape).items())
              + " GFLOP/s", flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 2)
