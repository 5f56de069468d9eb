"""Which int8 route is fast on this CPU: greedy and beam-4 sentences/s of one base model (random weights, 32 sources of
20 tokens, 24 forced new tokens, 2 threads, medians of 3 interleaved) in float32, bfloat16 weights, torchao int8
weight-only (float32 / bfloat16 activations), torchao int8 W8A8 dynamic (precision.py's first route), the deprecated
torch.ao.quantization.quantize_dynamic (fbgemm; it reaches only exact nn.Linear modules), and precision.py's route
since (`torch._int_mm` on every nn.Linear, float32 or bfloat16 around it).

    PYTHONPATH=. python experiments/benchmark/int8_routes.py residual-prenorm dwlstm    # output in int8_routes.txt
"""

import copy
import statistics
import sys
import time

import torch
from torchao.quantization import Int8DynamicActivationInt8WeightConfig, Int8WeightOnlyConfig, quantize_

from modeling_dwlstm.precision import prepare_for_inference
from nmt_toolkit.lab.benchmark import build_model, generate_forced, random_batch


def torchao_copy(model, config, dtype=torch.float32):
    quantized = copy.deepcopy(model).to(dtype)
    quantize_(quantized, config, filter_fn=lambda module, name: isinstance(module, torch.nn.Linear))
    return quantized


def main(member: str):
    torch.set_num_threads(2)
    torch.manual_seed(0)
    base = build_model(member, "base").eval()
    source = random_batch(32, 20, 1, 35603, seed=1)
    fbgemm = torch.ao.quantization.quantize_dynamic(copy.deepcopy(base), {torch.nn.Linear}, dtype=torch.qint8)
    variants = {"fp32": base, "bf16": copy.deepcopy(base).to(torch.bfloat16),
                "w8 fp32": torchao_copy(base, Int8WeightOnlyConfig()),
                "w8 bf16": torchao_copy(base, Int8WeightOnlyConfig(), torch.bfloat16),
                "w8a8 fp32": torchao_copy(base, Int8DynamicActivationInt8WeightConfig()), "ao dynamic": fbgemm,
                "int8 fp32": prepare_for_inference(copy.deepcopy(base), "float32", "int8"),
                "int8 bf16": prepare_for_inference(copy.deepcopy(base), "bfloat16", "int8")}
    for beams in (1, 4):
        for model in variants.values():
            generate_forced(model, source, beams, 24, "cpu")
        times = {name: [] for name in variants}
        for _ in range(3):
            for name, model in variants.items():
                start = time.perf_counter()
                generate_forced(model, source, beams, 24, "cpu")
                times[name].append(time.perf_counter() - start)
        print(member, f"beam{beams}", {name: round(32 / statistics.median(t), 1) for name, t in times.items()}, flush=True)


if __name__ == "__main__":
    for name in sys.argv[1:] or ["residual-prenorm"]:
        main(name)
