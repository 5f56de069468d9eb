"""Compiled decoding steps attending through SDPA (as built: `building_blocks.is_decoding_step` is
False while torch.compile traces) against compiled steps attending through the two products
(`decoding_step_attention`, which inductor fuses with the softmax into a loop of its own at one
query row), beside eager steps: a base-size random depth-wise LSTM, 20-token sources, 24 forced new
tokens, 2 threads; each compiled variant decodes with a model copy of its own, so each compiles its
own graphs (the first decode of each printed); then interleaved medians, beam 4 and greedy.

    PYTHONPATH=. python experiments/speed/round-four/compiled_attention_ab.py --precision int8 \\
        --sentences 32 --repeats 5
"""

import argparse
import functools
import time

import torch

from modeling_dwlstm import building_blocks
from nmt_toolkit.lab.speed import (
    build_model,
    generate_forced,
    inference_copy,
    interleaved_medians,
    random_batch,
)

AS_BUILT = building_blocks.is_decoding_step


def two_products_at_every_step(query, hidden_states) -> bool:
    """The two products at every CPU decoding step, compiled or not (no row minimum: a comparison
    of the dynamic rows would be a guard of the graph)."""
    return hidden_states.shape[1] == 1 and query.device.type == "cpu"


ROUTES = {"compiled, SDPA": AS_BUILT, "compiled, two products": two_products_at_every_step}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--precision", default="int8")
    parser.add_argument("--sentences", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(2)
    torch.manual_seed(0)
    model = build_model("dwlstm", "base").eval()
    batch = random_batch(args.sentences, 20, 24, model.config.vocab_size)
    copies = {name: inference_copy(model, args.precision) for name in ["eager", *ROUTES]}

    def decode(name: str, beams: int) -> torch.Tensor:
        if name == "eager":
            building_blocks.is_decoding_step = AS_BUILT
            return generate_forced(copies[name], batch, beams, 24, "cpu")
        building_blocks.is_decoding_step = ROUTES[name]
        return generate_forced(copies[name], batch, beams, 24, "cpu", compile_decoding=True)

    try:
        for beams in (4, 1):
            eager = decode("eager", beams)
            for name in ROUTES:
                started = time.perf_counter()
                tokens = decode(name, beams)
                differ = (tokens != eager).any(-1).float().mean().item()
                print(
                    f"{name}, beam {beams}: first decode {time.perf_counter() - started:.1f} s, "
                    f"{differ:.0%} of the sentences differ from eager",
                    flush=True,
                )
        for beams in (4, 1):
            tasks = {name: functools.partial(decode, name, beams) for name in copies}
            seconds = interleaved_medians(tasks, args.repeats, "cpu")
            print(
                f"{args.precision}, {args.sentences} sentences, beam {beams}: "
                + ", ".join(
                    f"{name} {value:.3f} s ({seconds['eager'] / value:.2f}x eager)"
                    for name, value in seconds.items()
                ),
                flush=True,
            )
    finally:
        building_blocks.is_decoding_step = AS_BUILT


if __name__ == "__main__":
    main()
