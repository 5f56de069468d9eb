"""Beam search's tie fallback per sentence (`generation_translation.best_continuations` as it is,
"now": torch.topk over the row of each sentence whose k + 1 best tie) against the whole batch's
torch.topk at any tie ("before"), interleaved in one process: base depth-wise LSTM (random
weights) in bfloat16, SENTENCES sources of 20 tokens, 24 forced new tokens, beam 4, 2 threads. The
tokens of both are compared first, and the share of a step's sentences that tie is printed. With
a trained model's folder (DIR, its tokenizer beside it), that model in bfloat16 translates the
first SENTENCES lines of Multi30k's English validation set instead (beam 4, up to 40 new tokens).

    PYTHONPATH=. python experiments/speed/round-four/tie_fallback_ab.py SENTENCES REPEATS [DIR]
"""

import gzip
import statistics
import sys
import time

import torch
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

from modeling_dwlstm import generation_translation
from nmt_toolkit.lab.speed import build_model, generate_forced, inference_copy, random_batch

torch.set_num_threads(2)
sentences, repeats = int(sys.argv[1]), int(sys.argv[2])
per_sentence = generation_translation.best_continuations
tied_shares = []


def whole_batch(log_probs, beam_scores, k):
    """best_continuations before: any tie in the batch sends every sentence to torch.topk."""
    sentences, beams = beam_scores.shape
    columns = log_probs.shape[-1]
    values, indices = generation_translation.row_topk(log_probs, k + 1)
    totals = (values.view(sentences, beams, k + 1) + beam_scores[:, :, None]).view(sentences, -1)
    best, positions = torch.topk(totals, k + 1)
    tied = ~(best[:, :-1] > best[:, 1:]).all(1)
    tied_shares.append(float(tied.float().mean()))
    if not bool(tied.any()):
        offsets = torch.arange(beams)[:, None] * columns
        flat = (indices.view(sentences, beams, k + 1) + offsets).view(sentences, -1)
        return best[:, :k], flat.gather(1, positions)[:, :k]
    log_probs.view(sentences, beams, columns).add_(beam_scores[:, :, None])
    return torch.topk(log_probs.view(sentences, -1), k)


variants = {"before": whole_batch, "now": per_sentence}
if len(sys.argv) > 3:
    model = AutoModelForSeq2SeqLM.from_pretrained(sys.argv[3]).to(torch.bfloat16).eval()
    with gzip.open("../shared/data/multi30k/val.en.gz", "rt") as lines:
        sources = lines.read().splitlines()[:sentences]
    inputs = AutoTokenizer.from_pretrained(sys.argv[3])(sources, return_tensors="pt", padding=True)

    def decode():
        with torch.no_grad():
            return model.generate(**inputs, num_beams=4, max_new_tokens=40)

else:
    model = inference_copy(build_model("dwlstm", "base").eval(), "bfloat16")
    batch = random_batch(sentences, 20, 24, model.config.vocab_size)

    def decode():
        return generate_forced(model, batch, 4, 24, "cpu")


tokens = {}
for name, function in variants.items():
    generation_translation.best_continuations = function
    tokens[name] = decode()
print(
    "same tokens",
    torch.equal(tokens["before"], tokens["now"]),
    f"sentences tied per step: median {statistics.median(tied_shares):.2f}, "
    f"range {min(tied_shares):.2f}-{max(tied_shares):.2f}",
    flush=True,
)
times = {}
for repeat in range(repeats):
    for name in ("before", "now") if repeat % 2 == 0 else ("now", "before"):
        generation_translation.best_continuations = variants[name]
        start = time.perf_counter()
        decode()
        times.setdefault(name, []).append(time.perf_counter() - start)
for name, seconds in sorted(times.items()):
    rounded = [round(s, 3) for s in seconds]
    print(sentences, name, f"median {statistics.median(seconds):.3f}", rounded)
ratio = statistics.median(times["before"]) / statistics.median(times["now"])
print(sentences, "sentences, beam 4, before/now", round(ratio, 3), flush=True)
