"""What a vocabulary shortlist gains on each side at base size (random weights, so speed only): the depth-wise LSTM
through generate(..., use_shortlist=True) in float32 and int8, and CTranslate2 int8 running Marian with
`use_vmap=True`, both from the benchmark's synthetic table (benchmark.synthetic_shortlist), beam 4 and greedy,
forced length. CPU time of the process (steadier than the wall clock on a shared machine), medians, with and
without the shortlist interleaved; CTranslate2 runs in a process of its own (in PyTorch's process it slows PyTorch's
int8 decoding, experiments/benchmark/ct2_interference.txt).

    PYTHONPATH=. python experiments/benchmark/shortlist_speed.py [threads] [sources] [repeats]  # shortlist_speed.txt
"""

import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch

from modeling_dwlstm.precision import cpu_features, int8_route
from nmt_toolkit.lab.benchmark import (
    MARIAN,
    BenchmarkSettings,
    build_model,
    ctranslate2_models,
    ctranslate2_translators,
    generate_forced,
    inference_copy,
    random_batch,
    synthetic_shortlist,
    translate_forced,
)

NEW_TOKENS = 24
VOCABULARY = 35603


def interleaved(tasks: dict, repeats: int) -> dict:
    """{name: median CPU seconds}, the order alternating."""
    times = {name: [] for name in tasks}
    for repeat in range(repeats):
        for name in list(tasks)[::1 if repeat % 2 == 0 else -1]:
            start = time.process_time()
            tasks[name]()
            times[name].append(time.process_time() - start)
    return {name: statistics.median(values) for name, values in times.items()}


def report(side: str, seconds: dict) -> None:
    for task in ("beam4", "greedy"):
        full, restricted = seconds[task, False], seconds[task, True]
        print(f"{side} {task}: {full:.2f} s without, {restricted:.2f} s with the shortlist: {full / restricted:.2f}x "
              "the speed", flush=True)


def ours(threads: int, sources: int, repeats: int) -> None:
    torch.set_num_threads(threads)
    source = random_batch(sources, 20, 1, VOCABULARY, seed=1)
    torch.manual_seed(0)
    base = build_model("dwlstm", "base").eval()
    base.shortlist = synthetic_shortlist(VOCABULARY)
    print(f"shortlist: {len(base.shortlist.candidates(source['input_ids']))} of {VOCABULARY} words allowed for the batch",
          flush=True)
    for precision in ("float32", "int8"):
        model = inference_copy(base, precision)
        tasks = {(task, restricted): (lambda m=model, b=beams, r=restricted: generate_forced(
                     m, source, b, NEW_TOKENS, "cpu", **({"use_shortlist": True} if r else {})))
                 for task, beams in (("beam4", 4), ("greedy", 1)) for restricted in (False, True)}
        for task in tasks.values():
            task()
        report(f"dwlstm {precision}", interleaved(tasks, repeats))


def engine(threads: int, sources: int, repeats: int) -> None:
    source = random_batch(sources, 20, 1, VOCABULARY, seed=1)
    torch.manual_seed(0)
    marian = build_model(MARIAN, "base").eval()
    settings = BenchmarkSettings(vocab_size=VOCABULARY, threads=threads, shortlist=True)
    with tempfile.TemporaryDirectory() as directory:
        translator = ctranslate2_translators(ctranslate2_models({MARIAN: marian}, settings, directory), threads)[
            MARIAN, "int8"]
        tokens = [[f"w{i}" for i in row] for row in source["input_ids"].tolist()]
        tasks = {(task, restricted): (lambda b=beams, r=restricted: translate_forced(translator, tokens, b, NEW_TOKENS, r))
                 for task, beams in (("beam4", 4), ("greedy", 1)) for restricted in (False, True)}
        for task in tasks.values():
            task()
        report("Marian CTranslate2 int8", interleaved(tasks, repeats))


def main(threads: int = 1, sources: int = 16, repeats: int = 5, side: str = ""):
    if side:
        return (ours if side == "ours" else engine)(threads, sources, repeats)
    print(f"# {cpu_features().describe()}, int8 route {int8_route()}, {threads} thread(s), {sources} sources of 20 "
          f"tokens, {NEW_TOKENS} new tokens, CPU-time medians of {repeats}; load average before: {os.getloadavg()}",
          flush=True)
    for part in ("ours", "engine"):
        subprocess.run([sys.executable, __file__, str(threads), str(sources), str(repeats), part], check=True)
    print(f"# load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main(*(int(arg) for arg in sys.argv[1:4]), *sys.argv[4:5])
