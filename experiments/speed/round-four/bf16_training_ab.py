"""The training step on an AMX CPU: float32, bf16 autocast eager (what `--bf16` does today) and bf16
autocast under torch.compile (what the Trainer's `--torch_compile` does), interleaved, medians;
beside the float32 and bfloat16 matmul rates at the step's shapes (`step_matmul_rates`) and the
square-matmul float32 peak. Base size (6+6), 4096 source + target tokens per batch at length 64,
fused loss, fused Adam (the benchmark's `training_step`).

    PYTHONPATH=. python experiments/speed/round-four/bf16_training_ab.py --threads 1 --repeats 5 \
        --members dwlstm residual-prenorm marian --variants fp32 bf16 bf16_compiled
    PYTHONPATH=. python experiments/speed/round-four/bf16_training_ab.py --profile dwlstm   # op table, bf16

"bf16_bf16_attention" is the bf16 step with the attention as it was before `building_blocks.sdpa`
(bfloat16 SDPA under autocast); "bf16" runs the code as it is. Two steps without autocast bound what
bfloat16 weights could give: "bf16_weights" trains a bfloat16 copy of the model with Adam on its
bfloat16 parameters (no float32 anywhere but the loss and the attention), "bf16_master" the same
model with float32 master weights (the gradients copied up, fused Adam on the float32 weights, the
weights copied back down: mixed precision without autocast's casts of activations).
"""  # noqa: E501

import argparse
import statistics
import time

import torch
import torch.nn.functional as F
from torch import nn
from torch.profiler import ProfilerActivity, profile

from modeling_dwlstm import building_blocks
from modeling_dwlstm.precision import cpu_features
from nmt_toolkit.lab.speed import (
    BenchmarkSettings,
    batch_size_for,
    build_model,
    cpu_identity,
    interleaved_times,
    make_optimizer,
    matmul_peak_flops,
    random_batch,
    step_matmul_rates,
    training_flops,
    training_step,
)

VARIANTS = {
    "fp32": (False, False),
    "bf16_weights": (False, False),
    "bf16_master": (False, False),
    "bf16": (True, False),
    "bf16_compiled": (True, True),
    "fp32_compiled": (False, True),
    "bf16_bf16_attention": (True, False),
}


def plain_sdpa(query, keys, values, attention_mask=None, dropout=0.0):
    """The attention before `building_blocks.sdpa`: SDPA in the inputs' dtype (bfloat16 under
    autocast)."""
    return F.scaled_dot_product_attention(
        query, keys, values, attn_mask=attention_mask, dropout_p=dropout
    )


def float32_sdpa(query, keys, values, attention_mask=None, dropout=0.0):
    """The attention of a bfloat16 model in float32, as `building_blocks.sdpa` does under autocast
    (PyTorch's bfloat16 CPU attention is the slower)."""
    attended = F.scaled_dot_product_attention(
        query.float(), keys.float(), values.float(), attn_mask=attention_mask, dropout_p=dropout
    )
    return attended.to(query.dtype)


class MasterWeightsAdam:
    """Fused Adam on float32 copies of a bfloat16 model's weights: each step copies the bfloat16
    gradients up, updates the float32 weights and copies them back down."""

    def __init__(self, model):
        self.weights = [p for p in model.parameters() if p.requires_grad]
        self.master = nn.ParameterList(nn.Parameter(w.detach().float()) for w in self.weights)
        self.adam = make_optimizer(self.master)

    def step(self):
        for weight, master in zip(self.weights, self.master):
            master.grad = weight.grad.float()
        self.adam.step()
        with torch.no_grad():
            for weight, master in zip(self.weights, self.master):
                weight.copy_(master)

    def zero_grad(self, set_to_none=True):
        for weight, master in zip(self.weights, self.master):
            weight.grad = master.grad = None


def step_task(model, optimizer, batch, bf16: bool, variant: str):
    """One training step; "bf16_bf16_attention" with the attention of before (bfloat16 SDPA under
    autocast), the bfloat16-weight variants attending in float32."""
    replacement = {
        "bf16_bf16_attention": plain_sdpa,
        "bf16_weights": float32_sdpa,
        "bf16_master": float32_sdpa,
    }.get(variant)

    def task():
        if replacement is None:
            return training_step(model, optimizer, batch, "cpu", bf16=bf16)
        saved, building_blocks.sdpa = building_blocks.sdpa, replacement
        try:
            return training_step(model, optimizer, batch, "cpu", bf16=bf16)
        finally:
            building_blocks.sdpa = saved

    return task


def setup(member: str, compiled: bool, variant: str = "fp32"):
    torch.manual_seed(0)
    model = build_model(member, "base")
    if variant in ("bf16_weights", "bf16_master"):
        model = model.to(torch.bfloat16)
    optimizer = MasterWeightsAdam(model) if variant == "bf16_master" else make_optimizer(model)
    # the whole model, as the Trainer's torch_compile does (accelerate: torch.compile(model))
    if compiled:
        model = torch.compile(model)
    return model, optimizer


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--members", nargs="+", default=["dwlstm", "residual-prenorm", "marian"])
    parser.add_argument(
        "--variants", nargs="+", default=["fp32", "bf16", "bf16_compiled"], choices=list(VARIANTS)
    )
    parser.add_argument(
        "--profile", help="profile one member's bf16 step (--variants' first bf16 one) instead"
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(
        f"# {args}\n# threads {args.threads}, torch {torch.__version__}, "
        f"{cpu_features().describe()}\n# {cpu_identity()}"
    )
    length = 64
    batch = random_batch(batch_size_for(length, 4096), length, length, 32000)
    if args.profile:
        variant = next(
            name for name in args.variants if VARIANTS[name][0] or name.startswith("bf16")
        )
        bf16, compiled = VARIANTS[variant]
        model, optimizer = setup(args.profile, compiled, variant)
        task = step_task(model, optimizer, batch, bf16, variant)
        for _ in range(2):
            task()
        with profile(activities=[ProfilerActivity.CPU]) as profiler:
            task()
        print(f"# {args.profile} {variant}")
        print(
            profiler.key_averages().table(
                sort_by="self_cpu_time_total", row_limit=30, max_name_column_width=50
            )
        )
        return
    tasks, flops = {}, {}
    for member in args.members:
        for variant in args.variants:
            bf16, compiled = VARIANTS[variant]
            model, optimizer = setup(member, compiled, variant)
            tasks[member, variant] = step_task(model, optimizer, batch, bf16, variant)
            started = time.perf_counter()
            tasks[member, variant]()  # warm-up (compiles)
            print(
                f"# {member} {variant}: first step {time.perf_counter() - started:.1f} s",
                flush=True,
            )
            flops[member] = training_flops(
                build_model(member, "base"), len(batch["input_ids"]), length, length
            )
    times = interleaved_times(tasks, args.repeats, "cpu", log=lambda line: print(line, flush=True))
    settings = BenchmarkSettings(threads=args.threads)
    rates = step_matmul_rates("base", settings)
    peak = matmul_peak_flops("cpu", torch.float32)
    print(
        f"matmul at the step's shapes: float32 {rates['float32_flops_per_s'] / 1e9:.0f} GFLOP/s, "
        f"bfloat16 {rates['bfloat16_flops_per_s'] / 1e9:.0f} GFLOP/s, ratio "
        f"{rates['bfloat16_over_float32']:.2f}x; square float32 peak {peak / 1e9:.0f} GFLOP/s"
    )
    print(
        f"{'member':18} {'variant':14} {'median s':>9} {'min s':>7} {'x fp32':>7} {'GFLOP/s':>8} "
        f"{'of fp32 peak':>12}"
    )
    for (member, variant), values in times.items():
        median = statistics.median(values)
        base = (
            statistics.median(times[member, "fp32"]) if (member, "fp32") in times else float("nan")
        )
        rate = flops[member] / median
        print(
            f"{member:18} {variant:14} {median:9.3f} {min(values):7.3f} {base / median:7.2f} "
            f"{rate / 1e9:8.0f} {rate / peak:12.0%}"
        )


if __name__ == "__main__":
    main()
