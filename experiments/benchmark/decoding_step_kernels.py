"""The kernels of a decoding step at the benchmark's shapes (32 sentences x 4 beams, d 512, 8 heads, vocabulary
35,603), each against what it replaced, interleaved (the order rotating), medians of 15 rounds:

- top-k of 2 x beams over each sentence's beams x vocabulary: torch.topk against `row_topk` (blocks of 32-256
  columns);
- attention at a decoding step: SDPA against `decoding_step_attention`, over 1-128 rows and 1-24 keys (the
  folded cross-attention: 4 queries per sentence over 20 source positions);
- fbgemm's int8 projection around its product: torch.cat and a separate bias pass against the input written in
  place and `rescaled`.

    PYTHONPATH=. python experiments/benchmark/decoding_step_kernels.py THREADS
    # record: decoding_step_kernels.txt
"""

import functools
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from modeling_dwlstm import generation_translation
from modeling_dwlstm.modeling_translation import decoding_step_attention
from modeling_dwlstm.precision import quantize_int8

sys.path.insert(0, str(Path(__file__).parent))
from decoding_step_ab import fbgemm_forward_with_cat  # noqa: E402


def medians(tasks: dict, rounds: int = 15, calls: int = 10) -> dict:
    """{name: median milliseconds per call}, the tasks interleaved, the order rotating each round."""
    times = {name: [] for name in tasks}
    for task in tasks.values():
        task()
    names = list(tasks)
    for round_index in range(rounds):
        for name in names[round_index % len(names):] + names[: round_index % len(names)]:
            start = time.perf_counter()
            for _ in range(calls):
                tasks[name]()
            times[name].append((time.perf_counter() - start) / calls * 1e3)
    return {name: statistics.median(values) for name, values in times.items()}


def with_block(scores, block):
    generation_translation.TOPK_BLOCK = block
    return generation_translation.row_topk(scores, 8)


def top_k():
    scores = torch.randn(128, 35603).log_softmax(-1)
    tasks = {"torch.topk over (32, 4 x 35603)": lambda: torch.topk(scores.view(32, -1), 8),
             "torch.topk over (128, 35603)": lambda: torch.topk(scores, 8)}
    tasks.update({f"row_topk, blocks of {block}": lambda b=block: with_block(scores, b) for block in (32, 64, 128, 256)})
    for name, milliseconds in medians(tasks).items():
        print(f"  {name}: {milliseconds:.2f} ms")
    generation_translation.TOPK_BLOCK = 64


def attention():
    for rows, queries, keys in ((1, 1, 12), (8, 1, 12), (32, 1, 20), (128, 1, 6), (128, 1, 12), (128, 1, 24),
                                (32, 4, 20)):
        query, key, value = (torch.randn(rows, 8, length, 64) for length in (queries, keys, keys))
        times = medians({"sdpa": functools.partial(F.scaled_dot_product_attention, query, key, value),
                         "products": functools.partial(decoding_step_attention, query, key, value)})
        print(f"  {rows} rows x 8 heads, {queries} quer{'y' if queries == 1 else 'ies'} over {keys} keys: SDPA "
              f"{times['sdpa'] * 1e3:.0f} us, decoding_step_attention {times['products'] * 1e3:.0f} us "
              f"({times['sdpa'] / times['products']:.2f}x)")


def fbgemm_projection():
    for inputs, outputs in ((512, 512), (512, 1536), (2048, 512), (512, 35603)):
        linear = quantize_int8(nn.Sequential(nn.Linear(inputs, outputs)), route="fbgemm")[0]
        x = torch.randn(128, 1, inputs)
        times = medians({"cat": functools.partial(fbgemm_forward_with_cat, linear, x),
                         "now": functools.partial(linear, x)})
        print(f"  128 rows, {inputs} -> {outputs}: torch.cat and a bias pass {times['cat'] * 1e3:.0f} us, now "
              f"{times['now'] * 1e3:.0f} us ({times['cat'] / times['now']:.2f}x)")


def main(threads: int):
    torch.set_num_threads(threads)
    with torch.inference_mode():
        print(f"## top-k, {threads} thread(s)")
        top_k()
        print(f"## attention at a decoding step, {threads} thread(s)")
        attention()
        print(f"## fbgemm's int8 projection, {threads} thread(s)")
        fbgemm_projection()


if __name__ == "__main__":
    main(int(sys.argv[1]))
