"""Fused attention projections (for speed): one matmul for Q/K/V (self) and K/V (cross), initialised
as separate Xavier matrices would be (docs/members.md), so fusing changes the speed and
nothing else."""

import math

from conftest import tiny_model


def test_each_fused_block_is_initialised_as_its_own_xavier_matrix():
    model = tiny_model(
        "residual-pre", d_model=64, encoder_attention_heads=4, decoder_attention_heads=4
    )
    attention = model.model.decoder.layers[0]
    d = model.config.d_model
    bound = math.sqrt(6 / (d + d))  # Xavier-uniform of a d x d matrix
    for projection in (attention.self_attn.qkv_proj, attention.cross_attn.kv_proj):
        for block in projection.weight.chunk(projection.blocks):
            # Xavier over the whole fused matrix would bound every block by sqrt(6 / (d + blocks *
            # d)) < 0.82 bound.
            assert 0.9 * bound < block.abs().max() <= bound
