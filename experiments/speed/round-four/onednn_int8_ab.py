"""A variant measured and not built: the int8 projections' products through oneDNN's matmul with
each weight packed once ("packed": `torch.ops.onednn.qlinear_prepack` / `qlinear_pointwise`, the
operators of torch.compile's x86 quantisation, private to PyTorch) instead of `torch._int_mm`
("now", which reaches oneDNN's `gemm_api` and packs the weight at every call). oneDNN takes u8
activations only on this path (s8 falls to its reference kernel), so the int8 values are shifted by
128 with a zero point of 128: the same int32 sums, the same numbers. Interleaved in one process,
base dwlstm in int8, SENTENCES sources of 20 tokens, 24 forced new tokens, beam 4 and greedy, 2
threads; the tokens of both compared first. The second command times the products alone at the
decode's shapes, 32 rows, 16 copies of each weight in turn (as a decode streams its weights):

    PYTHONPATH=. python experiments/speed/round-four/onednn_int8_ab.py decode SENTENCES REPEATS
    PYTHONPATH=. python experiments/speed/round-four/onednn_int8_ab.py products
"""

import functools
import sys
import time
import weakref

import torch

from modeling_dwlstm import precision
from modeling_dwlstm.precision import SMALLEST_SCALE, rescaled
from nmt_toolkit.lab.speed import (
    compare_decoding_variants,
    decoding_comparison_inputs,
)

NOW = precision.Int8Projection.rows_product
# module -> (packed weight, zero points of its weight)
PACKED = weakref.WeakKeyDictionary()
# (out, in) of the base dwlstm decoder's int8 products, and its output projection
SHAPES = [(35603, 512), (2048, 1024), (1536, 1024), (512, 1024), (1536, 512), (512, 512)]


def packed_product(rows_u8: torch.Tensor, packed, weight_scale, zero_points) -> torch.Tensor:
    """float32 (N, out): the int32 sums of (rows_u8 - 128) with the weight, times `weight_scale`."""
    return torch.ops.onednn.qlinear_pointwise(
        rows_u8, 1.0, 128, packed, weight_scale, zero_points, None, 1.0, 0, torch.float32,
        "none", [], "",
    )  # fmt: skip


def rows_product_packed(self, rows, sums=None, out=None):
    scale = (
        rows.abs().amax(dim=1, keepdim=True).float().clamp_(min=SMALLEST_SCALE)
        / self.activation_range
    )
    shifted = (rows / scale).round_().add_(128).to(torch.uint8)  # (N, in), int8 + 128
    if self not in PACKED:
        zero_points = torch.zeros(self.out_features, dtype=torch.int64)
        PACKED[self] = (torch.ops.onednn.qlinear_prepack(self.weight, None), zero_points)
    packed, zero_points = PACKED[self]
    output = packed_product(shifted, packed, self.weight_scale, zero_points)
    return rescaled(output, scale, self.bias)


def use(variant: str) -> None:
    precision.Int8Projection.rows_product = NOW if variant == "now" else rows_product_packed


def decode(sentences: int, repeats: int) -> None:
    copy, batch = decoding_comparison_inputs("int8", sentences)
    compare_decoding_variants(
        copy, batch, use, ("now", "packed"), repeats, label=f"int8 {sentences}"
    )


def seconds_per_call(calls: list, repeats: int = 20) -> float:
    for call in calls:
        call()
    start = time.perf_counter()
    for _ in range(repeats):
        for call in calls:
            call()
    return (time.perf_counter() - start) / repeats / len(calls)


def products(rows: int = 32, copies: int = 16) -> None:
    generator = torch.Generator().manual_seed(0)
    for out_features, in_features in SHAPES:
        time_shape(out_features, in_features, rows, copies, generator)


def time_shape(out_features: int, in_features: int, rows: int, copies: int, generator) -> None:
    weights = [
        torch.randint(-127, 128, (out_features, in_features), generator=generator).to(torch.int8)
        for _ in range(copies)
    ]
    weight_scale = torch.rand(out_features, generator=generator) / 100 + 1e-3
    zero_points = torch.zeros(out_features, dtype=torch.int64)
    quantized = torch.randint(-127, 128, (rows, in_features), generator=generator).to(torch.int8)
    shifted = (quantized.to(torch.int16) + 128).to(torch.uint8)
    packed = [torch.ops.onednn.qlinear_prepack(weight, None) for weight in weights]

    def int_mm(weight):
        return torch._int_mm(quantized, weight.t()).float().mul_(weight_scale)

    def onednn(packed_weight):
        return packed_product(shifted, packed_weight, weight_scale, zero_points)

    same = torch.equal(int_mm(weights[0]), onednn(packed[0]))
    int_mm_seconds = seconds_per_call([functools.partial(int_mm, weight) for weight in weights])
    onednn_seconds = seconds_per_call([functools.partial(onednn, weight) for weight in packed])
    print(
        f"{rows} x {in_features} -> {out_features}: same {same}, _int_mm "
        f"{int_mm_seconds * 1e6:.0f} us ({weights[0].numel() / int_mm_seconds / 1e9:.1f} GB/s of "
        f"weight), packed {onednn_seconds * 1e6:.0f} us "
        f"({weights[0].numel() / onednn_seconds / 1e9:.1f} GB/s), _int_mm/packed "
        f"{int_mm_seconds / onednn_seconds:.2f}",
        flush=True,
    )


if __name__ == "__main__":
    torch.set_num_threads(2)
    if sys.argv[1] == "decode":
        decode(int(sys.argv[2]), int(sys.argv[3]))
    else:
        products()
