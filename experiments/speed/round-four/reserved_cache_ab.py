"""A variant measured and not built: the self-attention cache of the eager decode kept in tensors
reserved for twice the positions filled (a step writes its keys and values in place, no `cat`), the
beams' reordering written into a second pair of such tensors (`torch.index_select(..., out=)`, no
new tensor), and the layer's keys and values views of the filled positions. Patched in
(transformers' `DynamicLayer.update` and the loop's `reorder_cache`), not in the package;
interleaved with the plain cache in one process, base dwlstm, SENTENCES sources of 20 tokens, 24
forced new tokens, beam 4 and greedy, 2 threads; the tokens of both compared first.

    PYTHONPATH=. python experiments/speed/round-four/reserved_cache_ab.py SENTENCES REPEATS PRECISION
"""  # noqa: E501

import sys

import torch
from transformers.cache_utils import DynamicLayer

from modeling_dwlstm import generation_translation
from nmt_toolkit.lab.speed import (
    compare_decoding_variants,
    decoding_comparison_inputs,
)

ORIGINAL = {"update": DynamicLayer.update, "reorder_cache": generation_translation.reorder_cache}


def reserved_tensors(key_states: torch.Tensor, filled: int, old=None) -> dict:
    """Keys and values tensors for twice the positions (at least 32), the old ones copied in."""
    shape = list(key_states.shape)
    shape[2] = max(2 * (filled + key_states.shape[2]), 32)
    reserved = {name: key_states.new_empty(shape) for name in ("keys", "values")}
    for name, tensor in zip(("keys", "values"), old or ()):
        reserved[name][:, :, :filled].copy_(tensor)
    return reserved


def reserved_update(self, key_states, value_states, *args, **kwargs):
    reserved = self.__dict__.get("reserved")
    if not self.is_initialized:
        self.lazy_initialization(key_states, value_states)
    filled = self.keys.shape[2] if self.keys.dim() == 4 else 0
    own = reserved is not None and self.keys is reserved["view"]  # else: set from outside
    if not own or filled + key_states.shape[2] > reserved["keys"].shape[2]:
        reserved = reserved_tensors(key_states, filled, (self.keys, self.values) if filled else ())
    end = filled + key_states.shape[2]
    reserved["keys"][:, :, filled:end].copy_(key_states)
    reserved["values"][:, :, filled:end].copy_(value_states)
    self.keys, self.values = reserved["keys"][:, :, :end], reserved["values"][:, :, :end]
    reserved["view"], self.reserved = self.keys, reserved
    return self.keys, self.values


def reserved_reorder(cache, beam_idx):
    if torch.equal(beam_idx, torch.arange(len(beam_idx), dtype=beam_idx.dtype)):
        return
    for layer in cache.self_attention_cache.layers:
        reserved = layer.__dict__.get("reserved")
        if reserved is None or layer.keys is not reserved["view"]:
            layer.reorder_cache(beam_idx)
            continue
        filled = layer.keys.shape[2]
        spare = reserved.setdefault("spare", {})
        for name in ("keys", "values"):
            spare.setdefault(name, torch.empty_like(reserved[name]))
            torch.index_select(getattr(layer, name), 0, beam_idx, out=spare[name][:, :, :filled])
            reserved[name], spare[name] = spare[name], reserved[name]
        layer.keys = reserved["keys"][:, :, :filled]
        layer.values = reserved["values"][:, :, :filled]
        reserved["view"] = layer.keys


def use(variant: str) -> None:
    reserved = variant == "reserved"
    DynamicLayer.update = reserved_update if reserved else ORIGINAL["update"]
    generation_translation.reorder_cache = (
        reserved_reorder if reserved else ORIGINAL["reorder_cache"]
    )


def main():
    torch.set_num_threads(2)
    sentences, repeats, precision = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    copy, batch = decoding_comparison_inputs(precision, sentences)
    compare_decoding_variants(
        copy, batch, use, ("plain", "reserved"), repeats, label=f"{precision} {sentences}"
    )


if __name__ == "__main__":
    main()
