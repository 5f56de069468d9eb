"""Resident memory a base model's compiled decoding steps add, per precision: each copy decodes 32
sentences eagerly (beam 4, then greedy), then with compiled steps twice; the resident set size
(VmRSS) after each.

    PYTHONPATH=. python experiments/speed/round-four/compiled_memory.py [--members dwlstm ...]

RSS counts what glibc keeps of freed memory too, so each figure bounds the compiled graphs' own
memory from above.
"""

import argparse
import gc
import time

import torch

from modeling_dwlstm.precision import cpu_features
from nmt_toolkit.lab.speed import (
    build_model,
    cpu_identity,
    generate_forced,
    inference_copy,
    random_batch,
    resident_kib,
)


def resident_mb() -> float:
    gc.collect()
    return resident_kib("VmRSS") / 1024


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--members", nargs="+", default=["dwlstm"])
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"# {args}\n# torch {torch.__version__}, {cpu_features().describe()}\n# {cpu_identity()}")
    batch = random_batch(32, 24, 24, 32000)
    kept = []  # every copy stays alive, as in the deployment benchmark
    for member in args.members:
        base = build_model(member, "base")
        for precision in ("float32", "bfloat16", "int8", "bfloat16+int8"):
            model = inference_copy(base, precision)
            kept.append(model)
            before = resident_mb()
            for beams in (4, 1):
                generate_forced(model, batch, beams, 24, "cpu")
            eager = resident_mb()
            started = time.perf_counter()
            for beams in (4, 1):
                generate_forced(model, batch, beams, 24, "cpu", compile_decoding=True)
            compiled = resident_mb()
            seconds = time.perf_counter() - started
            for beams in (4, 1):
                generate_forced(model, batch, beams, 24, "cpu", compile_decoding=True)
            print(
                f"{member} {precision}: copy {before:.0f} MB, after eager decodes {eager:.0f} MB, "
                f"compiled steps +{compiled - eager:.0f} MB ({seconds:.0f} s), "
                f"decoding again +{resident_mb() - compiled:.0f} MB",
                flush=True,
            )


if __name__ == "__main__":
    main()
