"""The int8 projection's rescale of its int32 sums: `torch.mul(sums, weight_scale)` ("before": the
mixed-type product converts the sums into a new float32 tensor of its own first) against the
conversion into the output tensor and the scales in place ("now", `Int8Projection.rows_product`);
the same numbers. Interleaved in one process, base dwlstm in int8 (the int_mm route), SENTENCES
sources of 20 tokens, 24 forced new tokens, beam 4 and greedy, 2 threads; the tokens of both
compared first. Run it as it is (glibc's defaults, as `generate()` in a user's process) and with
`MALLOC_MMAP_THRESHOLD_=33554432 MALLOC_TRIM_THRESHOLD_=17179869184` (freed memory kept, as in the
translate and evaluate commands):

    PYTHONPATH=. python experiments/speed/round-four/int8_rescale_ab.py SENTENCES REPEATS
"""

import sys

import torch

from modeling_dwlstm import precision
from modeling_dwlstm.precision import SMALLEST_SCALE, rescaled
from nmt_toolkit.lab.speed import (
    compare_decoding_variants,
    decoding_comparison_inputs,
)

NOW = precision.Int8Projection.rows_product


def rows_product_before(self, rows, sums=None, out=None):
    scale = (
        rows.abs().amax(dim=1, keepdim=True).float().clamp_(min=SMALLEST_SCALE)
        / self.activation_range
    )
    quantized = (rows / scale).round_().to(torch.int8)
    products = torch._int_mm(quantized, self.weight.t(), out=sums)
    return rescaled(torch.mul(products, self.weight_scale, out=out), scale, self.bias)


def use(variant: str) -> None:
    precision.Int8Projection.rows_product = NOW if variant == "now" else rows_product_before


def main():
    torch.set_num_threads(2)
    sentences, repeats = int(sys.argv[1]), int(sys.argv[2])
    copy, batch = decoding_comparison_inputs("int8", sentences)
    compare_decoding_variants(
        copy, batch, use, ("before", "now"), repeats, label=f"int8 {sentences}"
    )


if __name__ == "__main__":
    main()
