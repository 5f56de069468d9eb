"""Where the depth-wise LSTM's beam-4 decode spends its time in transformers' loop and in this package's
(generation_translation), base size, random weights, forced length: torch.profiler's operators, grouped, the
(rows x vocabulary) passes apart. The profiler times operators by the wall clock: on a busy machine read the shares,
not the seconds.

    PYTHONPATH=. python experiments/benchmark/decode_loop_profile.py [precision] [sources] [threads]  # decode_loop_profile.txt
"""

import os
import sys
from collections import defaultdict

import torch
from torch.profiler import ProfilerActivity, profile

from modeling_dwlstm.precision import cpu_features, int8_route
from nmt_toolkit.lab.benchmark import build_model, generate_forced, inference_copy, random_batch

VOCABULARY = 35603
PRODUCTS = {"aten::mm", "aten::addmm", "aten::bmm", "aten::_int_mm", "quantized::linear_dynamic"}


def groups(events, beams: int) -> dict:
    """{group: share of operator time}: the output projection, the other products, the passes over scores."""
    total = sum(event.self_cpu_time_total for event in events)
    shares = defaultdict(float)
    for event in events:
        shapes = [shape for shape in event.input_shapes if shape]
        scores = any(VOCABULARY in shape or VOCABULARY * beams in shape for shape in shapes)
        if event.key in PRODUCTS:
            group = "output projection" if event.key == "aten::mm" and scores else "products"
            if event.key == "quantized::linear_dynamic":  # its weight is packed: the input shape does not tell
                group = "int8 products (the output projection among them)"
        elif scores:
            group = f"passes over the scores: {event.key}"
        elif event.key == "aten::_scaled_dot_product_flash_attention_for_cpu":
            group = "attention (SDPA)"
        else:
            group = "other operators"
        shares[group] += event.self_cpu_time_total / total
    return dict(sorted(shares.items(), key=lambda item: -item[1]))


def main(precision: str = "int8", sources: int = 16, threads: int = 1):
    torch.set_num_threads(int(threads))
    sources = int(sources)
    print(f"# {cpu_features().describe()}, int8 route {int8_route()}, {threads} thread(s), {sources} sources of 20 "
          f"tokens, 24 new tokens, {precision}, beam 4; load average before: {os.getloadavg()}")
    torch.manual_seed(0)
    model = inference_copy(build_model("dwlstm", "base").eval(), precision)
    source = random_batch(sources, 20, 1, VOCABULARY, seed=1)
    for name, options in (("transformers' loop", {"lean_decoding": False}), ("this loop", {})):
        generate_forced(model, source, 4, 24, "cpu", **options)
        with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as profiler:
            generate_forced(model, source, 4, 24, "cpu", **options)
        events = profiler.key_averages(group_by_input_shape=True)
        shares = groups(events, 4)
        passes = sum(share for group, share in shares.items() if group.startswith("passes"))
        print(f"\n{name}: {sum(e.self_cpu_time_total for e in events) / 1e6:.2f} s of operator time; passes over the "
              f"scores {passes:.1%}")
        for group, share in shares.items():
            print(f"  {group}: {share:.1%}")
    print(f"# load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main(*sys.argv[1:])
