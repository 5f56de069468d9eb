"""torch.profiler of one base residual pre-norm training step under bfloat16 autocast (what --bf16 does on a CPU):
32 pairs of 64 tokens, fused loss and fused Adam, 1 thread, after one warm-up step.

    PYTHONPATH=. python experiments/benchmark/bf16_training_profile.py    # output in bf16_training_profile.txt
"""

import torch
from torch.profiler import ProfilerActivity, profile

from nmt_toolkit.lab.benchmark import batch_size_for, build_model, make_optimizer, random_batch, training_step


def main():
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = build_model("residual-prenorm", "base")
    batch = random_batch(batch_size_for(64, 4096), 64, 64, model.config.vocab_size)
    optimizer = make_optimizer(model)
    training_step(model, optimizer, batch, "cpu", bf16=True)
    with profile(activities=[ProfilerActivity.CPU]) as profiler:
        training_step(model, optimizer, batch, "cpu", bf16=True)
    print(profiler.key_averages().table(sort_by="self_cpu_time_total", row_limit=22, max_name_column_width=45))


if __name__ == "__main__":
    main()
