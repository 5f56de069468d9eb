"""The output projection of each eager decoding step written into one reused (rows, vocabulary)
tensor (`generation_translation.ReusedLogits`, "now") against the model's own forward, a new tensor
per step ("before": `decoding_step_projection` answering None, as for a hooked projection);
interleaved in one process, base dwlstm, SENTENCES sources of 20 tokens, 24 forced new tokens,
beam 4 and greedy, 2 threads; the tokens of both compared first.

    PYTHONPATH=. python experiments/speed/round-four/logits_buffer_ab.py SENTENCES REPEATS PRECISION
"""

import sys

import torch

from nmt_toolkit.lab.speed import compare_decoding_variants, decoding_comparison_inputs

torch.set_num_threads(2)
sentences, repeats, precision = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
copy, batch = decoding_comparison_inputs(precision, sentences)
own_projection = copy.decoding_step_projection


def use(variant: str) -> None:
    copy.decoding_step_projection = own_projection if variant == "now" else lambda: None


compare_decoding_variants(
    copy, batch, use, ("before", "now"), repeats, label=f"{precision} {sentences}"
)
