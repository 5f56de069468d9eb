"""Where the depth-wise LSTM's beam-4 decode spends its time at each precision given on the command
line: a base-size random model, 32 sources of 20 tokens, 24 forced new tokens, 2 threads; the top
operators by self CPU time (torch.profiler), after one warm-up decode.

    PYTHONPATH=. python experiments/speed/round-four/decode_profile.py int8 bfloat16
"""

import sys

import torch
from torch.profiler import ProfilerActivity, profile

from nmt_toolkit.lab.speed import build_model, generate_forced, inference_copy, random_batch

torch.set_num_threads(2)
model = build_model("dwlstm", "base").eval()
batch = random_batch(32, 20, 24, model.config.vocab_size)
for precision in sys.argv[1:]:
    copy = inference_copy(model, precision)
    generate_forced(copy, batch, 4, 24, "cpu")  # warm-up
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        generate_forced(copy, batch, 4, 24, "cpu")
    events = prof.key_averages()
    total = sum(e.self_cpu_time_total for e in events)
    print(f"== {precision}: total self CPU {total / 1e6:.2f} s")
    for e in sorted(events, key=lambda e: -e.self_cpu_time_total)[:22]:
        print(
            f"{e.key[:45]:45s} {e.self_cpu_time_total / 1e3:9.1f} ms "
            f"{100 * e.self_cpu_time_total / total:5.1f}% calls {e.count}"
        )
