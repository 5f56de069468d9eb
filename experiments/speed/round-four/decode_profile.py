"""Where the depth-wise LSTM's decode spends its time at each precision given on the command line:
a base-size random model, 32 sources of 20 tokens, 24 forced new tokens, 2 threads; the top
operators by self CPU time (torch.profiler), after one warm-up decode. `--beams 1` profiles greedy
decoding; `--top_level` lists the operators called from Python (each with its calls per step and
the time under it) instead of self times; `--shapes OPERATOR` also lists that operator's calls
grouped by input shapes. `--compile_decoding` profiles compiled steps (after their compile, whose
time it prints), each of inductor's generated kernels named in the table (`graph_0_cpp_fused_...`).

    PYTHONPATH=. python experiments/speed/round-four/decode_profile.py int8 bfloat16
    PYTHONPATH=. python experiments/speed/round-four/decode_profile.py int8 --beams 1 --top_level --shapes aten::_int_mm
    PYTHONPATH=. python experiments/speed/round-four/decode_profile.py int8 --compile_decoding
"""  # noqa: E501

import argparse
import time
from collections import Counter

import torch
import torch._inductor.config as inductor_config
from torch.profiler import ProfilerActivity, profile

from nmt_toolkit.lab.speed import build_model, generate_forced, inference_copy, random_batch

STEPS = 24


def print_self_times(prof) -> None:
    events = prof.key_averages()
    total = sum(e.self_cpu_time_total for e in events)
    print(f"total self CPU {total / 1e6:.2f} s")
    for e in sorted(events, key=lambda e: -e.self_cpu_time_total)[:22]:
        print(
            f"{e.key[:45]:45s} {e.self_cpu_time_total / 1e3:9.1f} ms "
            f"{100 * e.self_cpu_time_total / total:5.1f}% calls {e.count}"
        )


def print_top_level(prof) -> None:
    calls, microseconds = Counter(), Counter()
    for event in prof.events():
        if event.cpu_parent is None and event.key.startswith("aten::"):
            calls[event.key] += 1
            microseconds[event.key] += event.cpu_time_total
    total = sum(microseconds.values())
    print(f"operators called from Python: {total / 1e6:.2f} s under them")
    for key, count in calls.most_common(30):
        print(
            f"{key:40s} {count / STEPS:7.1f}/step {microseconds[key] / 1e3:8.1f} ms "
            f"{100 * microseconds[key] / total:5.1f}%"
        )


def print_shapes(prof, operator: str) -> None:
    events = [e for e in prof.key_averages(group_by_input_shape=True) if e.key == operator]
    for e in sorted(events, key=lambda e: -e.self_cpu_time_total):
        print(
            f"{str(e.input_shapes)[:60]:60s} calls {e.count:5d} "
            f"{e.self_cpu_time_total / 1e3:8.1f} ms {e.self_cpu_time_total / e.count:8.1f} us/call"
        )


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("precisions", nargs="+")
    parser.add_argument("--beams", type=int, default=4)
    parser.add_argument("--top_level", action="store_true")
    parser.add_argument("--shapes", metavar="OPERATOR")
    parser.add_argument("--compile_decoding", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(2)
    # each generated kernel a profiler event of its own
    inductor_config.cpp.enable_kernel_profile = args.compile_decoding
    options = {"compile_decoding": True} if args.compile_decoding else {}
    model = build_model("dwlstm", "base").eval()
    batch = random_batch(32, 20, STEPS, model.config.vocab_size)
    for precision in args.precisions:
        copy = inference_copy(model, precision)
        started = time.perf_counter()
        generate_forced(copy, batch, args.beams, STEPS, "cpu", **options)  # warm-up (compile)
        warm_up = time.perf_counter() - started
        with profile(activities=[ProfilerActivity.CPU], record_shapes=bool(args.shapes)) as prof:
            generate_forced(copy, batch, args.beams, STEPS, "cpu", **options)
        print(f"== {precision}, beams {args.beams}{', compiled steps' if options else ''}")
        print(f"first decode (warm-up) {warm_up:.1f} s")
        print_top_level(prof) if args.top_level else print_self_times(prof)
        if args.shapes:
            print_shapes(prof, args.shapes)


if __name__ == "__main__":
    main()
