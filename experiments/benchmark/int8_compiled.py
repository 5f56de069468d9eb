"""Does torch.compile make torchao's int8 fast on this CPU? Greedy generate() seconds of the small residual pre-norm
model (random weights, 16 sources of 20 tokens, 12 forced new tokens, 1 thread, medians of 3 interleaved) in float32,
bfloat16 weights, torchao int8 W8A8 eager, and the same compiled (inductor, dynamic shapes).

    PYTHONPATH=. python experiments/benchmark/int8_compiled.py     # output in int8_compiled.txt
"""

import copy
import statistics
import time

import torch
from torchao.quantization import Int8DynamicActivationInt8WeightConfig, quantize_

from nmt_toolkit.lab.benchmark import build_model, generate_forced, random_batch


def main():
    torch.set_num_threads(1)
    torch.manual_seed(0)
    base = build_model("residual-prenorm", "small").eval()
    source = random_batch(16, 20, 1, 35603, seed=1)
    int8 = copy.deepcopy(base)
    quantize_(int8, Int8DynamicActivationInt8WeightConfig(), filter_fn=lambda module, name: isinstance(module, torch.nn.Linear))
    compiled = copy.deepcopy(int8)
    compiled.forward = torch.compile(compiled.forward, dynamic=True)
    start = time.perf_counter()
    generate_forced(compiled, source, 1, 12, "cpu")
    print(f"compile and first call: {time.perf_counter() - start:.1f} s", flush=True)
    variants = {"fp32": base, "bf16": copy.deepcopy(base).to(torch.bfloat16), "int8": int8, "int8+compile": compiled}
    for model in variants.values():
        generate_forced(model, source, 1, 12, "cpu")
    times = {name: [] for name in variants}
    for _ in range(3):
        for name, model in variants.items():
            start = time.perf_counter()
            generate_forced(model, source, 1, 12, "cpu")
            times[name].append(time.perf_counter() - start)
    print("greedy seconds:", {name: round(statistics.median(t), 3) for name, t in times.items()})


if __name__ == "__main__":
    main()
