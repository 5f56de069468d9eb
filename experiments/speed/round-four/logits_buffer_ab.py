"""The output projection of each eager decoding step written into one reused (rows, vocabulary)
tensor (`generation_translation.ReusedLogits`, "now") against the model's own forward, a new tensor
per step ("before": `decoding_step_projection` answering None, as for a hooked projection);
interleaved in one process, base dwlstm, SENTENCES sources of 20 tokens, 24 forced new tokens,
beam 4 and greedy, 2 threads; the tokens of both compared first.

    PYTHONPATH=. python experiments/speed/round-four/logits_buffer_ab.py SENTENCES REPEATS PRECISION
"""

import statistics
import sys
import time

import torch

from nmt_toolkit.lab.speed import build_model, generate_forced, inference_copy, random_batch

torch.set_num_threads(2)
sentences, repeats, precision = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
model = build_model("dwlstm", "base").eval()
batch = random_batch(sentences, 20, 24, model.config.vocab_size)
copy = inference_copy(model, precision)
own_projection = copy.decoding_step_projection


def use(variant: str) -> None:
    copy.decoding_step_projection = own_projection if variant == "now" else lambda: None


for beams in (4, 1):
    tokens = {}
    for name in ("before", "now"):
        use(name)
        tokens[name] = generate_forced(copy, batch, beams, 24, "cpu")
    print("beams", beams, "same", torch.equal(tokens["before"], tokens["now"]), flush=True)
times = {}
for repeat in range(repeats):
    for name in ("before", "now") if repeat % 2 == 0 else ("now", "before"):
        use(name)
        for beams in (4, 1):
            start = time.perf_counter()
            generate_forced(copy, batch, beams, 24, "cpu")
            times.setdefault((beams, name), []).append(time.perf_counter() - start)
for (beams, name), seconds in sorted(times.items()):
    rounded = [round(second, 3) for second in seconds]
    print(precision, sentences, (beams, name), f"median {statistics.median(seconds):.3f}", rounded)
for beams in (4, 1):
    ratio = statistics.median(times[beams, "before"]) / statistics.median(times[beams, "now"])
    print(precision, sentences, "beams", beams, "before/now", round(ratio, 3), flush=True)
