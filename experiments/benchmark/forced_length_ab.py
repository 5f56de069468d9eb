"""What forcing the output length costs generate(): `min_new_tokens = max_new_tokens` (the benchmark's forcing until
the deployment run's second round) against `benchmark.ForbidEndOfSentence` (EOS's score set to -inf in place),
interleaved, medians of 3; base, random weights, 32 sources of 20 tokens, 24 new tokens, 2 threads.

    PYTHONPATH=. python experiments/benchmark/forced_length_ab.py     # output in forced_length_ab.txt
"""

import statistics
import time

import torch

from nmt_toolkit.lab.benchmark import build_model, generate_forced, inference_copy, random_batch


def generate_min_new_tokens(model, batch, num_beams: int, new_tokens: int):
    with torch.inference_mode():
        return model.generate(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], num_beams=num_beams,
                              do_sample=False, min_new_tokens=new_tokens, max_new_tokens=new_tokens)


def main():
    torch.set_num_threads(2)
    source = random_batch(32, 20, 1, 35603, seed=1)
    for member in ("residual-prenorm", "dwlstm"):
        torch.manual_seed(0)
        base = build_model(member, "base").eval()
        for precision in ("float32", "bfloat16"):
            model = inference_copy(base, precision)
            for beams in (4, 1):
                tasks = {"min_new_tokens": lambda m=model, b=beams: generate_min_new_tokens(m, source, b, 24),
                         "ForbidEndOfSentence": lambda m=model, b=beams: generate_forced(m, source, b, 24, "cpu")}
                same = torch.equal(tasks["min_new_tokens"](), tasks["ForbidEndOfSentence"]())
                times = {name: [] for name in tasks}
                for repeat in range(3):
                    for name in list(tasks)[::1 if repeat % 2 == 0 else -1]:
                        start = time.perf_counter()
                        tasks[name]()
                        times[name].append(time.perf_counter() - start)
                old, new = (statistics.median(times[name]) for name in tasks)
                print(f"{member} {precision} beam{beams}: min_new_tokens {old:.3f} s, ForbidEndOfSentence {new:.3f} s "
                      f"({new / old:.2f}x the time; same tokens: {same})", flush=True)


if __name__ == "__main__":
    main()
