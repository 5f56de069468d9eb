"""Eager decoding's wall time under the allocator the process was started with: a base-size random
depth-wise LSTM in one precision, SENTENCES sources (default 32) of 20 tokens, 24 forced new tokens,
beam 4 and greedy, medians of 5 after a warm-up, and the pages each decode faulted in (minor page
faults, median). Run it in pairs of processes, with and without glibc keeping freed memory (the
variables `nmt_toolkit.allocator.keep_freed_memory` stands for), alternating:

    for pair in 1 2 3; do
        PYTHONPATH=. python experiments/speed/round-four/allocator_decode_ab.py int8 [SENTENCES]
        MALLOC_MMAP_THRESHOLD_=33554432 MALLOC_TRIM_THRESHOLD_=17179869184 \\
            PYTHONPATH=. python experiments/speed/round-four/allocator_decode_ab.py int8 [SENTENCES]
    done
"""

import functools
import os
import resource
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


def page_faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def faulted_and_timed(decode) -> tuple[int, float]:
    """(pages faulted in, seconds) of one call of `decode`."""
    before = page_faults()
    seconds = timed(decode, "cpu")
    return page_faults() - before, seconds


def main():
    torch.set_num_threads(2)
    torch.manual_seed(0)
    precision = sys.argv[1]
    sentences = int(sys.argv[2]) if len(sys.argv) > 2 else 32
    model = build_model("dwlstm", "base").eval()
    batch = random_batch(sentences, 20, 24, model.config.vocab_size)
    copy = inference_copy(model, precision)
    del model
    medians = []
    for beams in (4, 1):
        decode = functools.partial(generate_forced, copy, batch, beams, 24, "cpu")
        decode()  # warm-up
        faults, seconds = zip(*(faulted_and_timed(decode) for _ in range(5)))
        medians.append(
            f"beam {beams} median {statistics.median(seconds):.3f} s, "
            f"{statistics.median(faults):.0f} pages faulted in"
        )
    allocator = "kept" if os.environ.get("MALLOC_MMAP_THRESHOLD_") else "plain"
    print(f"{precision} {sentences} {allocator}: " + "; ".join(medians), flush=True)


if __name__ == "__main__":
    main()
