"""fbgemm's int8 product with the activation quantisation given (2026-11-28) against the one before it, int8 base
models on fbgemm's route, 32 sources of 20 tokens, 24 forced new tokens, beam 4 and greedy, interleaved in one
process (`interleaved_times`: the order rotating), medians.

- before: each row divided by its max |x_t| into a buffer with two more rows, +1 and -1, so that
  `quantized::linear_dynamic` finds the range [-1, 1] (its own pass over the input) and quantises it.
- now: `precision.FbgemmInt8Projection`: the divided rows go to
  `quantized::linear_with_input_q_dq_qweight_dq_output_fp32` with that range's (scale, zero point) given
  (`precision.UNIT_RANGE_QUANTIZATION`): no buffer, no extra rows, no range pass. The same floats (tested).

With --kernels, the two fbgemm calls alone instead, at the base model's shapes (rows, in, out), medians of 7 rounds.

    PYTHONPATH=. python experiments/benchmark/fused_qdq_ab.py THREADS REPEATS [--kernels]
    # record: fused_qdq_ab.txt
"""

import statistics
import sys
import time

import torch
from decoding_step_ab import print_before_now, range_rows
from torch import nn

from modeling_dwlstm import precision
from modeling_dwlstm.precision import SMALLEST_SCALE, quantize_int8, rescaled
from nmt_toolkit.lab.benchmark import build_model, generate_forced, inference_copy, random_batch

MEMBERS = ("dwlstm", "residual-prenorm")
NOW = precision.FbgemmInt8Projection.forward


def forward_with_pinned_rows(self, input):
    rows = input.reshape(-1, self.in_features).float()
    scale = rows.abs().amax(dim=1, keepdim=True).clamp_(min=SMALLEST_SCALE)
    pinned = rows.new_empty(rows.shape[0] + 2, self.in_features)
    torch.div(rows, scale, out=pinned[:-2])
    pinned[-2:] = range_rows(self.in_features)
    output = torch.ops.quantized.linear_dynamic(pinned, self.packed_weight, True)[:-2]
    return rescaled(output, scale, self.bias).to(input.dtype).unflatten(0, input.shape[:-1])


VARIANTS = {"before": forward_with_pinned_rows, "now": NOW}
KERNEL_SHAPES = [(128, 512, 35603), (32, 512, 35603), (128, 512, 1536), (128, 512, 2048), (128, 2048, 512),
                 (32, 2048, 512), (128, 1024, 1536)]  # beam 4's and greedy's


def kernels(repeats: int):
    torch.manual_seed(0)
    for rows, inner, columns in KERNEL_SHAPES:
        packed = quantize_int8(nn.Sequential(nn.Linear(inner, columns, bias=False)), route="fbgemm")[0].packed_weight
        divided = torch.randn(rows, inner)
        divided /= divided.abs().amax(1, keepdim=True)
        pinned = torch.cat([divided, range_rows(inner)])
        calls = {"before": lambda p=pinned, w=packed: torch.ops.quantized.linear_dynamic(p, w, True),
                 "now": lambda d=divided, w=packed: torch.ops.quantized.linear_with_input_q_dq_qweight_dq_output_fp32(
                     d, *precision.UNIT_RANGE_QUANTIZATION, w)}
        loops = repeats if columns > 10000 else 15 * repeats
        times = {name: [] for name in calls}
        for round_ in range(7):
            for name in list(calls)[:: 1 if round_ % 2 else -1]:
                start = time.perf_counter()
                for _ in range(loops):
                    calls[name]()
                times[name].append((time.perf_counter() - start) / loops * 1e6)
        before, now = (statistics.median(times[name]) for name in calls)
        print(f"({rows}, {inner}) x ({inner}, {columns}): before {before:.0f} us, now {now:.0f} us ({before / now:.3f}x)")


def main(threads: int, repeats: int, kernels_only: bool = False):
    torch.set_num_threads(threads)
    if kernels_only:
        return kernels(repeats)
    source = random_batch(32, 20, 1, 35603, seed=1)
    tasks = {}
    for member in MEMBERS:
        torch.manual_seed(0)
        model = inference_copy(build_model(member, "base").eval(), "int8")
        for beams in (4, 1):
            for name, forward in VARIANTS.items():
                def task(m=model, b=beams, f=forward):
                    precision.FbgemmInt8Projection.forward = f
                    return generate_forced(m, source, b, 24, "cpu")
                tasks[member, beams, name] = task
    print_before_now(tasks, repeats, threads)


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), "--kernels" in sys.argv[3:])
