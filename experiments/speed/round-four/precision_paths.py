"""Beam-4 and greedy decoding of base (6+6) models in every inference precision, interleaved,
medians: the measurement behind `prepare_for_inference(model, precision="auto")`'s table of fastest
paths per CPU class.

    PYTHONPATH=. python experiments/speed/round-four/precision_paths.py --threads 1 --repeats 5

--batch sentences (32) of 20 source tokens, 24 forced new tokens (`generate_forced`), random
weights, vocabulary 32k. Prints seconds per decode (median), each precision's speed-up over float32,
and the CPU's flags.
"""

import argparse
import statistics

import torch

from modeling_dwlstm.precision import cpu_features
from nmt_toolkit.lab.speed import (
    PRECISIONS,
    build_model,
    cpu_identity,
    generate_forced,
    inference_copy,
    interleaved_times,
    random_batch,
)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--members", nargs="+", default=["dwlstm", "residual-prenorm", "marian"])
    parser.add_argument("--precisions", nargs="+", default=list(PRECISIONS))
    parser.add_argument(
        "--batch", type=int, default=32, help="source sentences per generate() call"
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"# {args}")
    print(f"# threads {args.threads}, torch {torch.__version__}, {cpu_features().describe()}")
    print(f"# {cpu_identity()}")
    source = random_batch(args.batch, 20, 1, 32000, seed=1)
    tasks = {}
    for member in args.members:
        torch.manual_seed(0)
        model = build_model(member, "base")
        for precision in args.precisions:
            prepared = inference_copy(model, precision)
            for search, beams in (("beam4", 4), ("greedy", 1)):
                tasks[member, search, precision] = lambda m=prepared, b=beams: generate_forced(
                    m, source, b, 24, "cpu"
                )
    for task in tasks.values():  # warm-up
        task()
    times = interleaved_times(tasks, args.repeats, "cpu", log=lambda line: print(line, flush=True))
    print(
        f"{'member':18} {'search':7} {'precision':14} {'median s':>9} {'min s':>7} {'x float32':>9}"
    )
    for (member, search, precision), values in times.items():
        base = statistics.median(times[member, search, "float32"])
        median = statistics.median(values)
        print(
            f"{member:18} {search:7} {precision:14} {median:9.3f} {min(values):7.3f} "
            f"{base / median:9.2f}"
        )


if __name__ == "__main__":
    main()
