"""How much of an int8 decode is the same whatever the model's width: the base models against the same models
(same layers, heads and decoding) shrunk to d_model 64, ffn 128 and a 1,000-word vocabulary, whose products cost
almost nothing. What the tiny model takes is the per-step cost of running the operators and the Python around
them (about 2,900 operators a beam-4 step for the depth-wise LSTM), which no faster kernel removes. 32 sources of
20 tokens, 24 forced new tokens, interleaved (`interleaved_medians`).

    PYTHONPATH=. python experiments/benchmark/decode_overhead_floor.py THREADS REPEATS
    # record: decode_overhead_floor.txt
"""

import sys

import torch

from nmt_toolkit.lab.benchmark import build_model, generate_forced, inference_copy, interleaved_medians, random_batch

MEMBERS = ("dwlstm", "residual-prenorm")
SHAPES = {"base": {}, "tiny": dict(d_model=64, ffn_dim=128, heads=8, vocab_size=1000)}


def main(threads: int, repeats: int):
    torch.set_num_threads(threads)
    tasks = {}
    for member in MEMBERS:
        for shape, overrides in SHAPES.items():
            torch.manual_seed(0)
            model = inference_copy(build_model(member, "base", **overrides).eval(), "int8")
            source = random_batch(32, 20, 1, model.config.vocab_size, seed=1)
            for beams in (4, 1):
                tasks[member, beams, shape] = lambda m=model, s=source, b=beams: generate_forced(m, s, b, 24, "cpu")
    for task in tasks.values():  # warm-up
        task()
    seconds = interleaved_medians(tasks, repeats, "cpu")
    for member in MEMBERS:
        for beams in (4, 1):
            base, tiny = seconds[member, beams, "base"], seconds[member, beams, "tiny"]
            print(f"{member} int8 {'beam 4' if beams == 4 else 'greedy'}, {threads} thread(s): base {base:.3f} s, "
                  f"tiny {tiny:.3f} s ({tiny / base:.0%} of base)")


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]))
