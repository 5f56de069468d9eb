"""Allowed tokens per decoding batch when the batches are those of scripts/evaluate_translation.py (length-sorted,
at most MAX_TOKENS source tokens, padding included), and the share of the references inside each batch's union.

    PYTHONPATH=. python experiments/benchmark/shortlist-multi30k/union_sizes.py MODEL DATA SPLIT MAX_TOKENS
"""

import statistics
import sys

import torch

from modeling_dwlstm.generation_translation import Shortlist
from nmt_toolkit.checkpoints import load_saved_tokenizer
from nmt_toolkit.data import load_parallel_corpus
from nmt_toolkit.evaluation import length_sorted_batches


def main(model: str, data: str, split: str, max_tokens: int):
    shortlist = Shortlist.load(f"{model}/shortlist.safetensors")
    tokenizer = load_saved_tokenizer(model)
    pairs = load_parallel_corpus(data, "en", "de", split)["translation"]
    sources = tokenizer([pair["en"] for pair in pairs])["input_ids"]
    targets = tokenizer([pair["de"] for pair in pairs])["input_ids"]
    batches = length_sorted_batches([len(ids) for ids in sources], max_tokens)
    sizes, kept, total, whole = [], 0, 0, 0
    for batch in batches:
        allowed = shortlist.candidates(torch.tensor([token for i in batch for token in sources[i]])[None])
        sizes.append(len(allowed))
        for i in batch:
            inside = torch.isin(torch.tensor(targets[i]), allowed)
            kept, total, whole = kept + int(inside.sum()), total + len(inside), whole + bool(inside.all())
    print(f"{split}, max_tokens {max_tokens}: {len(batches)} batches (mean {len(pairs) / len(batches):.1f} sentences), "
          f"{statistics.mean(sizes):.0f} of {shortlist.vocab_size} tokens allowed per batch on average (min "
          f"{min(sizes)}, max {max(sizes)}); {kept / total:.1%} of reference tokens and {whole / len(pairs):.1%} of "
          f"references inside; shortlist {dict(sorted(shortlist.metadata.items()))}")


if __name__ == "__main__":
    main(*sys.argv[1:4], int(sys.argv[4]))
