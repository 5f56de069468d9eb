"""Sentences/s of one base model's generate() in one precision (random weights, 32 sources of 20 tokens, 24 forced
new tokens, 2 threads, median of 3 after a warm-up), in a process of its own: what malloc_ab.sh compares.

    PYTHONPATH=. python experiments/benchmark/decode_time.py dwlstm float32 int8 4    # member dtype quantize beams
"""

import sys

import torch

from modeling_dwlstm.precision import prepare_for_inference
from nmt_toolkit.lab.benchmark import build_model, generate_forced, interleaved_medians, random_batch


def main(member: str, dtype: str, quantize: str, beams: int):
    torch.set_num_threads(2)
    torch.manual_seed(0)
    model = prepare_for_inference(build_model(member, "base"), dtype, quantize)
    source = random_batch(32, 20, 1, 35603, seed=1)
    decode = lambda: generate_forced(model, source, beams, 24, "cpu")  # noqa: E731
    decode()  # warm-up
    print(f"{32 / interleaved_medians({'decode': decode}, 3, 'cpu')['decode']:.2f}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]))
