"""int8 decoding with glibc's allocator told to keep freed memory (`precision.keep_freed_memory`, at the start of
the process) against the default, each measurement a process of its own: base model, 32 sources of 20 tokens, 24
forced new tokens, 2 threads, beam 4 and greedy interleaved, the median of 3 after a warm-up. With `training` after
the setting: the float32 residual pre-norm model's training step (4,096 tokens at length 64, fused Adam, the median
of 4 after a warm-up) and its float32 beam-4 decoding (the median of 2).

    for round in 1 2 3; do for member in residual-prenorm dwlstm; do for setting in default kept; do
      PYTHONPATH=. python experiments/benchmark/freed_memory_ab.py $member $setting; done; done; done
    for round in 1 2; do for setting in default kept; do
      PYTHONPATH=. python experiments/benchmark/freed_memory_ab.py residual-prenorm $setting training; done; done
    # record: freed_memory_ab.txt
"""

import sys

import torch

from modeling_dwlstm import precision
from nmt_toolkit.lab.benchmark import (
    build_model,
    generate_forced,
    inference_copy,
    interleaved_medians,
    make_optimizer,
    random_batch,
    training_step,
)


def start(setting: str):
    """Two threads, a fixed seed, and the allocator as `setting` says ("default" or "kept")."""
    if setting == "kept":
        precision.keep_freed_memory()
    torch.set_num_threads(2)
    torch.manual_seed(0)


def main(member: str, setting: str):
    start(setting)
    model = inference_copy(build_model(member, "base").eval(), "int8")
    source = random_batch(32, 20, 1, 35603, seed=1)
    decodes = {beams: (lambda beams=beams: generate_forced(model, source, beams, 24, "cpu")) for beams in (4, 1)}
    for decode in decodes.values():
        decode()  # warm-up
    seconds = interleaved_medians(decodes, 3, "cpu")
    print(member, setting, f"(freed memory kept: {precision.freed_memory_kept()})",
          *(f"beam {beams} {seconds[beams]:.3f} s" for beams in decodes), flush=True)


def training(member: str, setting: str):
    start(setting)
    model = build_model(member, "base")
    optimizer = make_optimizer(model)
    batch = random_batch(32, 64, 64, 35603, seed=0)
    source = random_batch(32, 20, 1, 35603, seed=1)
    tasks = {"training step": lambda: training_step(model, optimizer, batch, "cpu"),
             "float32 beam 4": lambda: generate_forced(model, source, 4, 24, "cpu")}
    seconds = {}
    for name, repeats in (("training step", 4), ("float32 beam 4", 2)):
        tasks[name]()  # warm-up
        seconds.update(interleaved_medians({name: tasks[name]}, repeats, "cpu"))
    print(member, setting, f"(freed memory kept: {precision.freed_memory_kept()})",
          *(f"{name} {value:.3f} s" for name, value in seconds.items()), flush=True)


if __name__ == "__main__":
    (training if sys.argv[3:] == ["training"] else main)(sys.argv[1], sys.argv[2])
