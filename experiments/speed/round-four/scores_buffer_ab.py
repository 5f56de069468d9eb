"""A bfloat16 decode's float32 scores written into one tensor reused at every step
(`generation_translation.ScoresBuffer`, "now") against a new tensor per step ("before", what
`logits.float()` allocates), interleaved in one process: base depth-wise LSTM (random weights),
SENTENCES sources of 20 tokens, 24 forced new tokens, beam 4 and greedy, 2 threads; the tokens of
both are compared first.

    PYTHONPATH=. python experiments/speed/round-four/scores_buffer_ab.py SENTENCES REPEATS
"""

import statistics
import sys
import time

import torch

from modeling_dwlstm import generation_translation
from nmt_toolkit.lab.speed import build_model, generate_forced, inference_copy, random_batch

torch.set_num_threads(2)
sentences, repeats = int(sys.argv[1]), int(sys.argv[2])
reused = generation_translation.ScoresBuffer.float32


def fresh(self, logits):
    return logits.float()


variants = {"before": fresh, "now": reused}
model = build_model("dwlstm", "base").eval()
batch = random_batch(sentences, 20, 24, model.config.vocab_size)
copy = inference_copy(model, "bfloat16")
for beams in (4, 1):
    tokens = {}
    for name, method in variants.items():
        generation_translation.ScoresBuffer.float32 = method
        tokens[name] = generate_forced(copy, batch, beams, 24, "cpu")
    print("beams", beams, "same tokens", torch.equal(tokens["before"], tokens["now"]), flush=True)
times = {}
for repeat in range(repeats):
    for name in ("before", "now") if repeat % 2 == 0 else ("now", "before"):
        generation_translation.ScoresBuffer.float32 = variants[name]
        for beams in (4, 1):
            start = time.perf_counter()
            generate_forced(copy, batch, beams, 24, "cpu")
            times.setdefault((beams, name), []).append(time.perf_counter() - start)
for (beams, name), seconds in sorted(times.items()):
    print(
        sentences,
        (beams, name),
        f"median {statistics.median(seconds):.3f}",
        [round(s, 3) for s in seconds],
    )
for beams in (4, 1):
    ratio = statistics.median(times[beams, "before"]) / statistics.median(times[beams, "now"])
    print(sentences, "sentences, beams", beams, "before/now", round(ratio, 3), flush=True)
