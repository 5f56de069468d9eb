"""A variant measured and not built: the beams' reordering of the self-attention cache deferred to
the next step's append and done in the same copy (`torch.index_select(..., out=)` into the grown
tensor: one copy of the cache per step instead of `index_select`, then `cat`). Patched in
(transformers' `DynamicLayer.update` and the loop's `reorder_cache`), not in the package.

    # interleaved in one process: base dwlstm, SENTENCES sources of 20 tokens, beam 4, 24 new tokens
    PYTHONPATH=. python experiments/speed/round-four/deferred_reorder_ab.py steps SENTENCES REPEATS PRECISION
    # the 1,000-line evaluation of compiled_decoding.py, patched ("deferred") or not ("plain")
    PYTHONPATH=. python experiments/speed/round-four/deferred_reorder_ab.py evaluation deferred|plain
"""  # noqa: E501

import runpy
import sys

import torch
from transformers.cache_utils import DynamicLayer

from modeling_dwlstm import generation_translation
from nmt_toolkit.lab.speed import (
    compare_decoding_variants,
    decoding_comparison_inputs,
    generate_forced,
)

ORIGINAL = {"update": DynamicLayer.update, "reorder_cache": generation_translation.reorder_cache}


def deferred_update(self, key_states, value_states, *args, **kwargs):
    pending = self.__dict__.pop("pending", None)
    if pending is None or not self.is_initialized or self.keys.numel() == 0:
        return ORIGINAL["update"](self, key_states, value_states, *args, **kwargs)
    grown = []
    for old, new in ((self.keys, key_states), (self.values, value_states)):
        rows, heads, length, size = old.shape
        states = old.new_empty(rows, heads, length + new.shape[2], size)
        torch.index_select(old, 0, pending, out=states[:, :, :length])
        states[:, :, length:] = new
        grown.append(states)
    self.keys, self.values = grown
    return self.keys, self.values


def deferred_reorder(cache, beam_idx):
    if torch.equal(beam_idx, torch.arange(len(beam_idx), dtype=beam_idx.dtype)):
        return
    for layer in cache.self_attention_cache.layers:
        pending = layer.__dict__.get("pending")
        layer.pending = beam_idx if pending is None else pending[beam_idx]


def use(variant: str) -> None:
    deferred = variant == "deferred"
    DynamicLayer.update = deferred_update if deferred else ORIGINAL["update"]
    generation_translation.reorder_cache = (
        deferred_reorder if deferred else ORIGINAL["reorder_cache"]
    )


def steps(sentences: int, repeats: int, precision: str) -> None:
    torch.set_num_threads(2)
    copy, batch = decoding_comparison_inputs(precision, sentences)
    outputs = {}
    for variant in ("plain", "deferred"):
        use(variant)
        outputs[variant] = generate_forced(
            copy, batch, 4, 24, "cpu", return_dict_in_generate=True, output_scores=True
        )
    plain, deferred = outputs["plain"], outputs["deferred"]
    print(
        "same tokens",
        torch.equal(plain.sequences, deferred.sequences),
        "same scores",
        torch.equal(plain.sequences_scores, deferred.sequences_scores),
        flush=True,
    )
    compare_decoding_variants(
        copy,
        batch,
        use,
        ("plain", "deferred"),
        repeats,
        beams=(4,),
        label=f"{precision} {sentences}",
    )


if __name__ == "__main__":
    if sys.argv[1] == "steps":
        steps(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
    else:
        use(sys.argv[2])
        sys.argv = ["compiled_decoding.py", "evaluation", "--precisions", "bfloat16"]
        runpy.run_path("experiments/speed/round-four/compiled_decoding.py", run_name="__main__")
