"""This package's decoding loop against transformers' own (lean_decoding=False): a base-size random
depth-wise LSTM and residual pre-norm, 32 sources of 24 tokens, 24 new tokens (EOS suppressed),
greedy and beam 4, interleaved, median of --repeats, one process. Prints each ratio lean /
transformers' loop."""

import argparse
import statistics
import time

import torch

from nmt_toolkit.lab.speed import EOS, build_model

parser = argparse.ArgumentParser()
parser.add_argument("--repeats", type=int, default=5)
parser.add_argument("--threads", type=int, default=1)
args = parser.parse_args()
torch.set_num_threads(args.threads)
torch.manual_seed(0)
source = torch.randint(10, 30000, (32, 24))
for member in ("dwlstm", "residual-prenorm"):
    model = build_model(member, "base").eval()
    for beams in (1, 4):
        settings = dict(
            num_beams=beams,
            max_new_tokens=24,
            min_new_tokens=24,
            suppress_tokens=[EOS],
            do_sample=False,
        )
        tasks = {"lean": dict(settings), "transformers": dict(settings, lean_decoding=False)}
        times = {key: [] for key in tasks}
        outputs = {}
        with torch.inference_mode():
            for key, options in tasks.items():  # warm-up
                outputs[key] = model.generate(source, **options)
            assert torch.equal(outputs["lean"], outputs["transformers"])
            for repeat in range(args.repeats):
                for key in list(tasks) if repeat % 2 == 0 else list(tasks)[::-1]:
                    start = time.perf_counter()
                    model.generate(source, **tasks[key])
                    times[key].append(time.perf_counter() - start)
        lean, stock = statistics.median(times["lean"]), statistics.median(times["transformers"])
        print(
            f"{member} beam {beams}: lean {lean:.3f} s, transformers' loop {stock:.3f} s, ratio "
            f"{lean / stock:.3f}"
        )
