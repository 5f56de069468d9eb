"""What a second thread gains: CTranslate2 int8 Marian (in child processes, as the benchmark runs it) against our
int8 `generate()` of the residual pre-norm model and the depth-wise LSTM, base size, random weights, 32 sources
of 20 tokens, 24 forced new tokens, beam 4 and greedy, at 1 and 2 threads, all interleaved (`interleaved_times`,
the order rotating), medians.

    PYTHONPATH=. python experiments/benchmark/thread_scaling.py REPEATS
    # record: thread_scaling.txt
"""

import statistics
import sys
import tempfile

import torch

from nmt_toolkit.lab.benchmark import (
    BenchmarkSettings,
    EngineProcess,
    build_model,
    ctranslate2_models,
    generate_forced,
    inference_copy,
    interleaved_times,
    random_batch,
)

OURS = ("residual-prenorm", "dwlstm")
ENGINE = "ct2 marian"


def our_decode(model, source: dict, threads: int, beams: int):
    torch.set_num_threads(threads)
    generate_forced(model, source, beams, 24, "cpu")


def main(repeats: int):
    settings = BenchmarkSettings(members=("marian", *OURS), sizes=("base",), ctranslate2=True)
    torch.manual_seed(0)
    models = {member: build_model(member, "base").eval() for member in settings.members}
    source = random_batch(32, 20, 1, 35603, seed=1)
    tokens = [[f"w{i}" for i in row] for row in source["input_ids"].tolist()]
    int8 = {member: inference_copy(models[member], "int8") for member in OURS}
    with tempfile.TemporaryDirectory() as directory:
        paths = ctranslate2_models({"marian": models["marian"]}, settings, directory)
        engines = {threads: EngineProcess(paths, threads, tokens) for threads in (1, 2)}
        tasks = {}
        for threads in (1, 2):
            for beams in (4, 1):
                tasks[ENGINE, threads, beams] = (
                    lambda t=threads, b=beams: engines[t].request((("marian", "int8"), b, 24)))
                for member in OURS:
                    tasks[member, threads, beams] = (
                        lambda m=int8[member], t=threads, b=beams: our_decode(m, source, t, b))
        for task in tasks.values():
            task()
        times = interleaved_times(tasks, repeats, "cpu")
        for engine in engines.values():
            engine.close()
    median = {key: statistics.median(values) for key, values in times.items()}
    for (name, threads, beams), seconds in median.items():
        runs = sorted(round(t, 3) for t in times[name, threads, beams])
        print(f"{name} int8, {threads} thread(s), beam {beams}: {seconds:.3f} s, runs {runs}")
    for beams in (4, 1):
        for threads in (1, 2):
            engine = median[ENGINE, threads, beams]
            print(f"beam {beams}, {threads} thread(s): " + ", ".join(
                f"{member} {engine / median[member, threads, beams]:.2f}x CTranslate2" for member in OURS))
        print(f"beam {beams}, the second thread's speed-up: " + ", ".join(
            f"{name} {median[name, 1, beams] / median[name, 2, beams]:.2f}x" for name in (ENGINE, *OURS)))


if __name__ == "__main__":
    main(int(sys.argv[1]))
