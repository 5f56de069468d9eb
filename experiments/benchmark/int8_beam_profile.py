"""Where a member's int8 beam-4 decode spends its time (base, random weights, 32 sources of 20 tokens, 24 forced
new tokens, after a warm-up), by the int8 route this CPU uses: torch.profiler's operators, grouped.

    PYTHONPATH=. python experiments/benchmark/int8_beam_profile.py dwlstm [threads]
    # records: int8_beam_profile.txt (a VNNI CPU, torch._int_mm), int8_beam_profile_avx2.txt (AVX2, fbgemm)
"""

import sys
from collections import defaultdict

import torch
from torch.profiler import ProfilerActivity, profile

from modeling_dwlstm.precision import cpu_features, int8_route
from nmt_toolkit.lab.benchmark import build_model, generate_forced, inference_copy, random_batch

GROUPS = {  # operator -> what it is here (aten::_int_mm: the VNNI route; quantized::linear_dynamic: fbgemm's)
    "aten::_int_mm": "int8 products", "quantized::linear_dynamic": "int8 products",
    "aten::mm": "float products", "aten::addmm": "float products",
    "aten::bmm": "float products", "aten::_scaled_dot_product_flash_attention_for_cpu": "attention (SDPA)",
    "aten::_log_softmax": "beam search over the vocabulary", "aten::topk": "beam search over the vocabulary",
    "aten::index_select": "cache reordering", "aten::native_layer_norm": "LayerNorm",
}


def main(member: str, threads: int = 2):
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = inference_copy(build_model(member, "base").eval(), "int8")
    source = random_batch(32, 20, 1, 35603, seed=1)
    generate_forced(model, source, 4, 24, "cpu")
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as profiler:
        generate_forced(model, source, 4, 24, "cpu")
    events = profiler.key_averages(group_by_input_shape=True)
    total = sum(event.self_cpu_time_total for event in events)
    groups = defaultdict(float)
    for event in events:
        vocabulary_wide = any(35603 in shape for shape in event.input_shapes if shape)
        group = GROUPS.get(event.key) or ("other passes over (rows, vocabulary) tensors" if vocabulary_wide
                                          else "other operators")
        groups[group] += event.self_cpu_time_total
    print(f"{member} int8 beam 4 ({int8_route()} route; {cpu_features().describe()}; {threads} thread(s)): "
          f"{total / 1e6:.2f} s of operator time")
    for group, microseconds in sorted(groups.items(), key=lambda item: -item[1]):
        print(f"  {group}: {microseconds / total:.1%}")
    print(events.table(sort_by="self_cpu_time_total", row_limit=15, max_name_column_width=36, max_shapes_column_width=50))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "dwlstm", int(sys.argv[2]) if len(sys.argv) > 2 else 2)
