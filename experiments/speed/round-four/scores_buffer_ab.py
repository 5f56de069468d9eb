"""A bfloat16 decode's float32 scores written into one tensor reused at every step
(`generation_translation.ScoresBuffer`, "now") against a new tensor per step ("before", what
`logits.float()` allocates), interleaved in one process: base depth-wise LSTM (random weights),
SENTENCES sources of 20 tokens, 24 forced new tokens, beam 4 and greedy, 2 threads; the tokens of
both are compared first.

    PYTHONPATH=. python experiments/speed/round-four/scores_buffer_ab.py SENTENCES REPEATS
"""

import sys

import torch

from modeling_dwlstm import generation_translation
from nmt_toolkit.lab.speed import compare_decoding_variants, decoding_comparison_inputs

torch.set_num_threads(2)
sentences, repeats = int(sys.argv[1]), int(sys.argv[2])
reused = generation_translation.ScoresBuffer.float32


def fresh(self, logits):
    return logits.float()


def use(variant: str) -> None:
    generation_translation.ScoresBuffer.float32 = reused if variant == "now" else fresh


copy, batch = decoding_comparison_inputs("bfloat16", sentences)
compare_decoding_variants(copy, batch, use, ("before", "now"), repeats, label=f"{sentences}")
