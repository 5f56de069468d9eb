"""Does torch.compile speed up the fbgemm int8 route (the one AVX2 CPUs get)? Beam-4 generate() of the residual
pre-norm base (random weights, 32 sources of 20 tokens, 24 forced new tokens, 1 thread), int8 eager against the
same model with its forward compiled (inductor, dynamic shapes), medians of 3 interleaved, after checking that both
give the same tokens.

    TORCH_LOGS=graph_breaks PYTHONPATH=. python experiments/benchmark/int8_compiled_fbgemm.py
    # record: int8_compiled_fbgemm.txt
"""

import copy
import time

import torch

from nmt_toolkit.lab.benchmark import build_model, generate_forced, inference_copy, interleaved_medians, random_batch


def main():
    torch.set_num_threads(1)
    torch.manual_seed(0)
    int8 = inference_copy(build_model("residual-prenorm", "base").eval(), "int8")
    source = random_batch(32, 20, 1, 35603, seed=1)
    compiled = copy.deepcopy(int8)
    compiled.forward = torch.compile(compiled.forward, dynamic=True)
    start = time.perf_counter()
    generate_forced(compiled, source, 4, 24, "cpu")
    print(f"compile and first call: {time.perf_counter() - start:.1f} s", flush=True)
    variants = {"int8": int8, "int8+compile": compiled}
    outputs = {name: generate_forced(model, source, 4, 24, "cpu") for name, model in variants.items()}
    print("equal outputs:", torch.equal(outputs["int8"], outputs["int8+compile"]))
    tasks = {name: lambda m=model: generate_forced(m, source, 4, 24, "cpu") for name, model in variants.items()}
    seconds = interleaved_medians(tasks, 3, "cpu")
    print("beam-4 seconds:", {name: round(value, 3) for name, value in seconds.items()})


if __name__ == "__main__":
    main()
