"""int8 decoding with glibc's allocator told to keep freed memory (`precision.keep_freed_memory`, which
`prepare_for_inference` calls) against the default, each measurement a process of its own: base model, 32 sources of
20 tokens, 24 forced new tokens, 2 threads, the median of 3 decodes after a warm-up, beam 4 and greedy. The default
is had by replacing `keep_freed_memory` with a function that does nothing. With `training` after the setting: the
float32 residual pre-norm model's training step (4,096 tokens at length 64, fused Adam, the median of 4 after a
warm-up) and its float32 beam-4 decoding (the median of 2), the allocator told at the start of the process.

    for round in 1 2 3; do for member in residual-prenorm dwlstm; do for setting in default kept; do
      PYTHONPATH=. python experiments/benchmark/freed_memory_ab.py $member $setting; done; done; done
    for round in 1 2; do for setting in default kept; do
      PYTHONPATH=. python experiments/benchmark/freed_memory_ab.py residual-prenorm $setting training; done; done
    # record: freed_memory_ab.txt
"""

import statistics
import sys
import time

import torch

from modeling_dwlstm import precision
from nmt_toolkit.lab.benchmark import (
    build_model,
    generate_forced,
    inference_copy,
    make_optimizer,
    random_batch,
    training_step,
)


def main(member: str, setting: str):
    if setting == "default":
        precision.keep_freed_memory = lambda: False
    torch.set_num_threads(2)
    torch.manual_seed(0)
    model = inference_copy(build_model(member, "base").eval(), "int8")
    source = random_batch(32, 20, 1, 35603, seed=1)
    seconds = []
    for beams in (4, 1):
        generate_forced(model, source, beams, 24, "cpu")
        times = []
        for _ in range(3):
            start = time.perf_counter()
            generate_forced(model, source, beams, 24, "cpu")
            times.append(time.perf_counter() - start)
        seconds.append(f"beam {beams} {statistics.median(times):.3f} s")
    print(member, setting, f"(freed memory kept: {precision.freed_memory_kept()})", *seconds, flush=True)


def training(member: str, setting: str):
    if setting == "kept":
        precision.keep_freed_memory()
    torch.set_num_threads(2)
    torch.manual_seed(0)
    model = build_model(member, "base")
    optimizer = make_optimizer(model)
    batch = random_batch(32, 64, 64, 35603, seed=0)
    training_step(model, optimizer, batch, "cpu")
    steps = []
    for _ in range(4):
        start = time.perf_counter()
        training_step(model, optimizer, batch, "cpu")
        steps.append(time.perf_counter() - start)
    source = random_batch(32, 20, 1, 35603, seed=1)
    generate_forced(model, source, 4, 24, "cpu")
    decodes = []
    for _ in range(2):
        start = time.perf_counter()
        generate_forced(model, source, 4, 24, "cpu")
        decodes.append(time.perf_counter() - start)
    print(member, setting, f"(freed memory kept: {precision.freed_memory_kept()})",
          f"training step {statistics.median(steps):.3f} s", f"float32 beam 4 {statistics.median(decodes):.3f} s", flush=True)


if __name__ == "__main__":
    (training if sys.argv[3:] == ["training"] else main)(sys.argv[1], sys.argv[2])
