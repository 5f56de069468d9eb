"""Why the benchmark runs CTranslate2 in a child process: the depth-wise LSTM's int8 beam-4 decoding (base, random
weights, 32 sources of 20 tokens, 24 forced new tokens, 2 threads, medians of 3) timed in one process before and after
each step of setting up CTranslate2 there, with the page faults and system time of each decode.

    PYTHONPATH=. python experiments/benchmark/ct2_interference.py     # output in ct2_interference.txt
"""

import resource
import statistics
import tempfile
import time

import torch

from nmt_toolkit.lab.benchmark import (
    BenchmarkSettings,
    build_model,
    ctranslate2_models,
    ctranslate2_translators,
    generate_forced,
    inference_copy,
    random_batch,
    translate_forced,
)


def report(label: str, model, source, repeats: int = 3):
    generate_forced(model, source, 4, 24, "cpu")
    seconds, before = [], resource.getrusage(resource.RUSAGE_SELF)
    for _ in range(repeats):
        start = time.perf_counter()
        generate_forced(model, source, 4, 24, "cpu")
        seconds.append(time.perf_counter() - start)
    after = resource.getrusage(resource.RUSAGE_SELF)
    print(f"{label}: {32 / statistics.median(seconds):.1f} sent/s, minor page faults per decode "
          f"{(after.ru_minflt - before.ru_minflt) / repeats:.0f}, system s per decode "
          f"{(after.ru_stime - before.ru_stime) / repeats:.2f}", flush=True)


def main():
    torch.set_num_threads(2)
    torch.manual_seed(0)
    model = inference_copy(build_model("dwlstm", "base").eval(), "int8")
    source = random_batch(32, 20, 1, 35603, seed=1)
    report("alone", model, source)
    torch.manual_seed(0)
    marian = build_model("marian", "base")
    report("after building Marian", model, source)
    with tempfile.TemporaryDirectory() as directory:
        translators = ctranslate2_translators(ctranslate2_models({"marian": marian}, BenchmarkSettings(), directory), 2)
        report("after converting Marian and loading CTranslate2 translators", model, source)
        translate_forced(translators["marian", "int8"], [[f"w{i}" for i in row] for row in source["input_ids"].tolist()], 4, 24)
        report("after one CTranslate2 translation", model, source)


if __name__ == "__main__":
    main()
