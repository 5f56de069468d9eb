"""ReZero (Bachlechner et al. 2020): x + a * F(x) with a learned scalar a starting at 0."""

import torch
from conftest import random_ids, tiny_config, tiny_model

from modeling_dwlstm import LayerState
from modeling_dwlstm.modeling_rezero import ReZeroDecoderLayer, ReZeroEncoderLayer, ReZeroResidual


def test_every_sublayer_has_its_own_scalar_starting_at_zero():
    model = tiny_model("rezero")
    config = model.config
    weights = [m.residual_weight for m in model.modules() if isinstance(m, ReZeroResidual)]
    assert len(weights) == 2 * config.encoder_layers + 3 * config.decoder_layers
    assert all(w.shape == () and w.item() == 0.0 and w.requires_grad for w in weights)
    assert not any(
        isinstance(m, torch.nn.LayerNorm)
        for layer in model.model.encoder.layers
        for m in layer.modules()
    )


def test_with_a_zero_every_layer_is_the_identity():
    config = tiny_config("rezero", dropout=0.3)  # dropout on F(x) is still multiplied by a = 0
    torch.manual_seed(0)
    encoder_layer, decoder_layer = (
        ReZeroEncoderLayer(config, 0, None).train(),
        ReZeroDecoderLayer(config, 0, None).train(),
    )
    x, memory = torch.randn(2, 5, config.d_model), torch.randn(2, 7, config.d_model)
    encoded = encoder_layer(*LayerState(output=x))
    decoded = decoder_layer(*LayerState(output=x), memory)
    torch.testing.assert_close(encoded.output, x, rtol=0, atol=0)
    torch.testing.assert_close(decoded.output, x, rtol=0, atol=0)
    with torch.no_grad():
        encoder_layer.ffn_residual.residual_weight.fill_(0.5)
    assert not torch.allclose(encoder_layer(*LayerState(output=x)).output, x)


def test_at_initialisation_the_encoder_output_is_the_normalised_embedding():
    model = tiny_model("rezero")
    ids = random_ids(2, 6)
    encoder = model.get_encoder()
    with torch.no_grad():
        expected = encoder.final_layer_norm(encoder.embeddings(ids))
        torch.testing.assert_close(encoder(ids).last_hidden_state, expected)


def test_the_decoder_scalars_learn_first():
    """At a = 0 the loss sees the encoder only through the decoder's cross-attention scalars, so the
    decoder's scalars get gradients and the encoder's none until a cross-attention scalar moves."""
    model = tiny_model("rezero").train()
    ids = random_ids(2, 6)
    model(input_ids=ids, labels=random_ids(2, 4, seed=2)).loss.backward()
    decoder_layer, encoder_layer = model.model.decoder.layers[0], model.model.encoder.layers[0]
    for residual in (
        decoder_layer.self_attn_residual,
        decoder_layer.cross_attn_residual,
        decoder_layer.ffn_residual,
    ):
        assert residual.residual_weight.grad.abs() > 0
    assert encoder_layer.ffn_residual.residual_weight.grad == 0
