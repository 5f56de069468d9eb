"""A/B of one base training step (residual pre-norm, 32 pairs of 64 tokens, fused Adam): the plain loss path
(logits materialised, F.cross_entropy) against the fused loss of modeling_dwlstm/loss.py, interleaved, medians of 5.

    PYTHONPATH=. python experiments/benchmark/fused_loss_ab.py 2     # threads; output in fused_loss_ab.txt
"""

import statistics
import sys
import time

import torch
from torch import nn

from nmt_toolkit.lab.benchmark import (
    batch_size_for,
    build_model,
    make_optimizer,
    matmul_peak_flops,
    random_batch,
    training_flops,
)


class PlainHead(nn.Linear):
    """An output projection that is not exactly nn.Linear: the model then takes the plain loss path."""


def main(threads: int):
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = build_model("residual-prenorm", "base")
    length = 64
    batch = random_batch(batch_size_for(length, 4096), length, length, model.config.vocab_size)
    optimizer = make_optimizer(model)

    def step(plain: bool) -> float:
        model.lm_head.__class__ = PlainHead if plain else nn.Linear
        start = time.perf_counter()
        model(**batch).loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return time.perf_counter() - start

    for plain in (True, False):  # warm-up
        step(plain)
    times = {True: [], False: []}
    for repeat in range(5):
        for plain in (True, False) if repeat % 2 == 0 else (False, True):
            times[plain].append(step(plain))
    peak = matmul_peak_flops("cpu", torch.float32)
    flops = training_flops(model, batch["input_ids"].shape[0], length, length)
    for plain in (True, False):
        median = statistics.median(times[plain])
        print(f"{'plain' if plain else 'fused'} loss: step {median:.3f} s (runs {[round(t, 3) for t in times[plain]]}), "
              f"{flops / median / 1e9:.0f} GFLOP/s = {flops / median / peak:.1%} of the {peak / 1e9:.0f} GFLOP/s matmul peak")
    print(f"fused / plain step-time ratio {statistics.median(times[False]) / statistics.median(times[True]):.3f}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 2)
