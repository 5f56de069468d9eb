"""Eager decoding's wall time under the allocator the process was started with: a base-size random
depth-wise LSTM in one precision, 32 sources of 20 tokens, 24 forced new tokens, beam 4 and greedy,
medians of 5 after a warm-up. Run it in pairs of processes, with and without glibc keeping freed
memory (the variables `nmt_toolkit.allocator.keep_freed_memory` stands for), alternating:

    for pair in 1 2 3; do
        PYTHONPATH=. python experiments/speed/round-four/allocator_decode_ab.py int8
        MALLOC_MMAP_THRESHOLD_=33554432 MALLOC_TRIM_THRESHOLD_=17179869184 \\
            PYTHONPATH=. python experiments/speed/round-four/allocator_decode_ab.py int8
    done
"""

import functools
import os
import statistics
import sys

import torch

from nmt_toolkit.lab.speed import (
    build_model,
    generate_forced,
    inference_copy,
    random_batch,
    timed,
)


def main():
    torch.set_num_threads(2)
    torch.manual_seed(0)
    precision = sys.argv[1]
    model = build_model("dwlstm", "base").eval()
    batch = random_batch(32, 20, 24, model.config.vocab_size)
    copy = inference_copy(model, precision)
    del model
    medians = []
    for beams in (4, 1):
        decode = functools.partial(generate_forced, copy, batch, beams, 24, "cpu")
        decode()  # warm-up
        seconds = [timed(decode, "cpu") for _ in range(5)]
        medians.append(f"beam {beams} median {statistics.median(seconds):.3f} s")
    allocator = "kept" if os.environ.get("MALLOC_MMAP_THRESHOLD_") else "plain"
    print(f"{precision} {allocator}: " + "; ".join(medians), flush=True)


if __name__ == "__main__":
    main()
