"""Beams sharing one copy of their sentence's encoder output (the default since 2026-11-27) against a copy per beam
(transformers' own expansion), int8 base models, 32 sources of 20 tokens, 24 forced new tokens, beam 4: the two
interleaved in one process (`interleaved_times`: the order rotating), medians; with --profile, torch.profiler's top operators of one
decode of each instead.

    PYTHONPATH=. python experiments/benchmark/shared_encoder_ab.py THREADS REPEATS [--profile]
    # record: shared_encoder_ab.txt
"""

import functools
import statistics
import sys

import torch
from torch.profiler import ProfilerActivity, profile
from transformers import GenerationMixin

from modeling_dwlstm.modeling_translation import TranslationTransformerForConditionalGeneration as Model
from nmt_toolkit.lab.benchmark import build_model, generate_forced, inference_copy, interleaved_times, random_batch

SHARED = Model._expand_inputs_for_generation
VARIANTS = {"copies": GenerationMixin._expand_inputs_for_generation, "shared": SHARED}
MEMBERS = ("residual-prenorm", "dwlstm")


def use(variant: str):
    Model._expand_inputs_for_generation = VARIANTS[variant]


def decode(model, source: dict, variant: str):
    use(variant)
    generate_forced(model, source, 4, 24, "cpu")


def main(threads: int, repeats: int, profiled: bool):
    torch.set_num_threads(threads)
    source = random_batch(32, 20, 1, 35603, seed=1)
    models = {}
    for member in MEMBERS:
        torch.manual_seed(0)
        models[member] = inference_copy(build_model(member, "base").eval(), "int8")
    outputs = {}
    for member, model in models.items():
        for variant in VARIANTS:  # warm-up, and the outputs to compare
            use(variant)
            outputs[member, variant] = generate_forced(model, source, 4, 24, "cpu")
            if profiled:
                with profile(activities=[ProfilerActivity.CPU]) as profiler:
                    generate_forced(model, source, 4, 24, "cpu")
                events = profiler.key_averages()
                print(f"{member}, {variant}: {sum(event.self_cpu_time_total for event in events) / 1e6:.2f} s of operator time")
                print(events.table(sort_by="self_cpu_time_total", row_limit=6, max_name_column_width=40))
    tasks = {(member, variant): functools.partial(decode, model, source, variant)
             for member, model in models.items() for variant in VARIANTS}
    times = interleaved_times(tasks, 0 if profiled else repeats, "cpu")
    use("shared")
    for member in MEMBERS:
        same = torch.equal(outputs[member, "copies"], outputs[member, "shared"])
        if profiled:
            print(f"{member}: the same tokens {same}")
            continue
        copies, shared = (statistics.median(times[member, variant]) for variant in VARIANTS)
        print(f"{member} int8 beam 4, {threads} thread(s): copies {copies:.3f} s, shared {shared:.3f} s "
              f"({copies / shared:.3f}x); the same tokens {same}; runs copies "
              f"{[round(t, 3) for t in times[member, 'copies']]}, shared {[round(t, 3) for t in times[member, 'shared']]}")


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), "--profile" in sys.argv)
