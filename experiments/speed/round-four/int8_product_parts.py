"""The int8 route's product in parts, alone, at a decoding step's shapes (2 threads, interleaved
medians): other ways to write `Int8Projection.rows_product`'s activation scale and quantisation
(each checked to give the same int8 values and scales), and the weight stored as (in, out) instead
of (out, in) for `torch._int_mm` (the same int32 sums).

    PYTHONPATH=. python experiments/speed/round-four/int8_product_parts.py quantisation
    PYTHONPATH=. python experiments/speed/round-four/int8_product_parts.py weight_layout --rows 32
"""

import argparse
import warnings

import torch

from modeling_dwlstm.precision import SMALLEST_SCALE
from nmt_toolkit.lab.speed import interleaved_medians

RANGE = 127
# (in, out) of the base depth-wise LSTM's projections
SHAPES = [
    (512, 512),
    (512, 1024),
    (512, 1536),
    (1024, 512),
    (1024, 1536),
    (1024, 2048),
    (512, 35603),
]


def quantised_as_built(rows):
    scale = rows.abs().amax(dim=1, keepdim=True).float().clamp_(min=SMALLEST_SCALE) / RANGE
    return (rows / scale).round_().to(torch.int8), scale


def quantised_from_max_and_min(rows):
    largest = torch.maximum(rows.amax(dim=1, keepdim=True), rows.amin(dim=1, keepdim=True).neg_())
    scale = largest.clamp_(min=SMALLEST_SCALE) / RANGE
    return (rows / scale).round_().to(torch.int8), scale


def quantised_from_aminmax(rows):
    smallest, largest = torch.aminmax(rows, dim=1, keepdim=True)
    scale = torch.maximum(largest, smallest.neg_()).clamp_(min=SMALLEST_SCALE) / RANGE
    return (rows / scale).round_().to(torch.int8), scale


def quantised_from_norm(rows):
    largest = torch.linalg.vector_norm(rows, ord=float("inf"), dim=1, keepdim=True)
    scale = largest.clamp_(min=SMALLEST_SCALE) / RANGE
    return (rows / scale).round_().to(torch.int8), scale


def quantised_per_channel(rows):
    _, scale = quantised_as_built(rows)
    zero_points = torch.zeros(len(rows), dtype=torch.long)
    with warnings.catch_warnings():  # PyTorch's quantised tensors are deprecated
        warnings.simplefilter("ignore")
        quantized = torch.quantize_per_channel(
            rows, scale.view(-1).double(), zero_points, 0, torch.qint8
        )
    return quantized.int_repr(), scale


QUANTISATIONS = {
    "as built (abs, amax)": quantised_as_built,
    "amax and amin": quantised_from_max_and_min,
    "aminmax": quantised_from_aminmax,
    "vector_norm(inf)": quantised_from_norm,
    "quantize_per_channel": quantised_per_channel,
}


def microseconds(functions: dict, calls: int, repeats: int = 7) -> dict:
    """{name: median microseconds a call}: `speed.interleaved_medians` over tasks of `calls`
    calls each."""
    tasks = {
        name: lambda function=function: [function() for _ in range(calls)]
        for name, function in functions.items()
    }
    medians = interleaved_medians(tasks, repeats, "cpu")
    return {name: seconds / calls * 1e6 for name, seconds in medians.items()}


def compare_quantisations(row_counts) -> None:
    for rows_count in row_counts:
        for inputs in (512, 1024):
            rows = torch.randn(rows_count, inputs) * torch.rand(rows_count, 1) * 3
            reference = quantised_as_built(rows)
            for name, quantise in QUANTISATIONS.items():
                quantized, scale = quantise(rows)
                if not (torch.equal(quantized, reference[0]) and torch.equal(scale, reference[1])):
                    raise SystemExit(f"{name} gives other int8 values than the built quantisation")
            calls = {
                name: (lambda quantise=quantise, rows=rows: quantise(rows))
                for name, quantise in QUANTISATIONS.items()
            }
            times = microseconds(calls, 300)
            print(
                f"{rows_count} x {inputs}: "
                + ", ".join(f"{name} {value:.1f} us" for name, value in times.items()),
                flush=True,
            )


def compare_weight_layouts(row_counts) -> None:
    for rows_count in row_counts:
        for inputs, outputs in SHAPES:
            activations = torch.randint(-127, 128, (rows_count, inputs), dtype=torch.int8)
            # several weights of the shape in turn, as a decoding step reads them
            weights = [
                torch.randint(-127, 128, (outputs, inputs), dtype=torch.int8)
                for _ in range(2 if outputs > 10_000 else 8)
            ]
            stored_transposed = [weight.t().contiguous().t() for weight in weights]
            if not torch.equal(
                torch._int_mm(activations, weights[0].t()),
                torch._int_mm(activations, stored_transposed[0].t()),
            ):
                raise SystemExit("the two layouts give other sums")
            times = microseconds(
                {
                    layout: lambda stored=stored, activations=activations: [
                        torch._int_mm(activations, weight.t()) for weight in stored
                    ]
                    for layout, stored in (("(out, in)", weights), ("(in, out)", stored_transposed))
                },
                3 if outputs > 10_000 else 30,
            )
            each = {layout: value / len(weights) for layout, value in times.items()}
            print(
                f"{rows_count} rows, {inputs} -> {outputs}: weight stored (out, in) "
                f"{each['(out, in)']:.1f} us, (in, out) {each['(in, out)']:.1f} us: "
                f"{each['(out, in)'] / each['(in, out)']:.2f}x",
                flush=True,
            )


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("part", choices=["quantisation", "weight_layout"])
    parser.add_argument("--rows", type=int, nargs="+", default=[32, 128])
    args = parser.parse_args()
    torch.set_num_threads(2)
    torch.manual_seed(0)
    if args.part == "quantisation":
        compare_quantisations(args.rows)
    else:
        compare_weight_layouts(args.rows)


if __name__ == "__main__":
    main()
