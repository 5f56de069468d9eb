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

import functools
import sys

import torch

from modeling_dwlstm import precision
from modeling_dwlstm.precision import SMALLEST_SCALE, rescaled
from nmt_toolkit.lab.speed import (
    build_model,
    generate_forced,
    inference_copy,
    interleaved_medians,
    random_batch,
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


def decode(model, batch, beams: int, variant: str):
    precision.Int8Projection.rows_product = NOW if variant == "now" else rows_product_before
    return generate_forced(model, batch, beams, 24, "cpu")


def main():
    torch.set_num_threads(2)
    torch.manual_seed(0)
    sentences, repeats = int(sys.argv[1]), int(sys.argv[2])
    model = build_model("dwlstm", "base").eval()
    batch = random_batch(sentences, 20, 24, model.config.vocab_size)
    copy = inference_copy(model, "int8")
    del model
    for beams in (4, 1):
        before, now = (decode(copy, batch, beams, variant) for variant in ("before", "now"))
        tasks = {
            variant: functools.partial(decode, copy, batch, beams, variant)
            for variant in ("before", "now")
        }
        medians = interleaved_medians(tasks, repeats, "cpu")
        print(
            f"int8 {sentences} beams {beams} same {torch.equal(before, now)}: before "
            f"{medians['before']:.3f} s, now {medians['now']:.3f} s, before/now "
            f"{medians['before'] / medians['now']:.3f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
