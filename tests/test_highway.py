"""The highway Transformer (Chai et al. 2020) against its equations and against the post-norm
residual model."""

from pathlib import Path

import pytest
import torch
from conftest import TINY, random_ids, tiny_model
from test_depthwise_lstm_equations import layer_norm, randomize_
from torch.nn.functional import relu, sigmoid, tanh
from transformers import AutoConfig, AutoModelForSeq2SeqLM

from modeling_dwlstm import HighwayTransformerConfig, ResidualTransformerConfig
from modeling_dwlstm.modeling_highway import HIGHWAY_CONNECTIONS, SelfDependencyConnection
from modeling_dwlstm.modeling_residual import PostNormResidual
from modeling_dwlstm.paper_configs import paper_config

VARIANTS = [
    "highway-sdu-sigmoid-all-layers",
    "highway-sdu-tanh-all-layers",
    "highway-highway-gate-all-layers",
    "highway-gated-mhdpa-all-layers",
]


def spec_connection(config, connection, X, FX):
    """The sub-layer output U written from Chai et al. 2020's equations; FX = F(X), the sub-layer's
    own output."""
    psi = tanh if config.sdu_gate == "tanh" else sigmoid
    T = psi(X @ connection.gate.weight.T + connection.gate.bias)  # Eq. 21 / 26
    f = X @ connection.transform.weight.T + connection.transform.bias  # Eq. 27
    if config.highway_variant == "sdu":
        U = X + FX + T * f  # Eqs. 22-24
    elif config.highway_variant == "highway_gate":
        U = (1 - T) * X + T * f + FX  # Eqs. 28-29
    else:
        U = (1 - T) * FX + T * f + X  # gated MHDPA, Eqs. 30-31
    return layer_norm(U, connection.norm.weight, connection.norm.bias)


def spec_ffn(layer, U):
    return layer.ffn.fc2(relu(layer.ffn.fc1(U)))  # FFN(U) = W_2 ReLU(W_1 U + b_1) + b_2


OPTIONS = [
    {},
    {"sdu_gate": "tanh"},
    {"highway_variant": "highway_gate"},
    {"highway_variant": "gated_mhdpa"},
]


@pytest.mark.parametrize("options", OPTIONS)
def test_each_connection_follows_its_equation(options):
    config = HighwayTransformerConfig(**{**TINY, **options})
    connection = HIGHWAY_CONNECTIONS[config.highway_variant](config).eval()
    randomize_(connection)
    X, FX = torch.randn(2, 3, TINY["d_model"]), torch.randn(2, 3, TINY["d_model"])
    torch.testing.assert_close(
        connection.combine(X, FX), spec_connection(config, connection, X, FX)
    )


@pytest.mark.parametrize("case", VARIANTS)
def test_first_layers_follow_the_gated_sublayer_equations(case):
    """Encoder: U = C_a(X, SelfAttn(X)), O = C_f(U, FFN(U)); decoder adds C_c(., CrossAttn(., enc)) between them."""  # noqa: E501
    model = tiny_model(case)
    randomize_(model.model)  # gates and LayerNorms away from their initial values
    config = model.config
    with torch.no_grad():
        out = model(
            input_ids=random_ids(2, 6),
            decoder_input_ids=random_ids(2, 4, seed=2),
            output_hidden_states=True,
        )
        layer, X = model.model.encoder.layers[0], out.encoder_hidden_states[0]
        U = spec_connection(config, layer.self_attn_residual, X, layer.self_attn(X)[0])
        output = spec_connection(config, layer.ffn_residual, U, spec_ffn(layer, U))
        torch.testing.assert_close(out.encoder_hidden_states[1], output, rtol=1e-4, atol=1e-4)

        layer, X = model.model.decoder.layers[0], out.decoder_hidden_states[0]
        encoder_output = out.encoder_last_hidden_state
        U = spec_connection(
            config,
            layer.self_attn_residual,
            X,
            layer.self_attn(X, torch.ones(4, 4).tril().bool())[0],
        )
        V = spec_connection(
            config,
            layer.cross_attn_residual,
            U,
            layer.cross_attn(U, key_value_states=encoder_output)[0],
        )
        output = spec_connection(config, layer.ffn_residual, V, spec_ffn(layer, V))
        torch.testing.assert_close(out.decoder_hidden_states[1], output, rtol=1e-4, atol=1e-4)


def close_every_gate_(model):
    """T(X) = 0 for every input: W_1 = 0 and b_1 = 0 (tanh) or a bias so negative that sigmoid is
    exactly 0."""
    with torch.no_grad():
        for connection in model.modules():
            if isinstance(connection, SelfDependencyConnection):
                connection.gate.weight.zero_()
                connection.gate.bias.fill_(0.0 if model.config.sdu_gate == "tanh" else -1e4)


@pytest.mark.parametrize("case", VARIANTS)
def test_closed_gate_leaves_the_post_norm_residual_model(case):
    """With T = 0 each variant reduces to U = LN(X + F(X)): the highway model, with its transforms f
    still random, computes exactly what the post-norm residual model with the remaining parameters
    computes."""
    highway = tiny_model(case)
    randomize_(highway.model)
    residual = AutoModelForSeq2SeqLM.from_config(
        ResidualTransformerConfig(**TINY, norm_position="post")
    ).eval()
    keys = residual.load_state_dict(highway.state_dict(), strict=False)
    assert not keys.missing_keys
    assert keys.unexpected_keys and all(
        ".gate." in k or ".transform." in k for k in keys.unexpected_keys
    )
    inputs = dict(input_ids=random_ids(2, 6), decoder_input_ids=random_ids(2, 5, seed=2))
    with torch.no_grad():
        # open gates do matter
        assert not torch.allclose(highway(**inputs).logits, residual(**inputs).logits, atol=1e-3)
        close_every_gate_(highway)
        torch.testing.assert_close(
            highway(**inputs).logits, residual(**inputs).logits, rtol=1e-6, atol=1e-6
        )


@pytest.mark.parametrize("sdu_ffn", [True, False])
@pytest.mark.parametrize("sdu_layers", [None, 1, 2, 3])
def test_sdu_layers_gates_exactly_layers_one_to_k(sdu_layers, sdu_ffn):
    """TINY has 2 encoder and 3 decoder layers; a gated sub-layer costs 2 d (d + 1) parameters (Chai
    et al. 2020, §4.4). Without `sdu_ffn` only the attention sub-layers are gated (Chai et al. 2020,
    Table 5's "\\FFN")."""
    highway = tiny_model("highway-sdu-sigmoid-all-layers", sdu_layers=sdu_layers, sdu_ffn=sdu_ffn)
    residual = tiny_model("residual-post")
    k = sdu_layers or 3
    stacks = (
        (highway.model.encoder, ("self_attn", "ffn")),
        (highway.model.decoder, ("self_attn", "cross_attn", "ffn")),
    )
    for stack, sublayers in stacks:
        for i, layer in enumerate(stack.layers):
            for name in sublayers:
                connection = getattr(layer, f"{name}_residual")
                gated = i < k and (sdu_ffn or name != "ffn")
                assert isinstance(connection, SelfDependencyConnection) == gated, (stack, i, name)
                assert isinstance(connection, PostNormResidual)
    gated_sublayers = (2 if sdu_ffn else 1) * min(k, 2) + (3 if sdu_ffn else 2) * min(k, 3)
    d = TINY["d_model"]
    assert highway.num_parameters() - residual.num_parameters() == gated_sublayers * 2 * d * (d + 1)


@pytest.mark.parametrize(
    "options", [{}, {"highway_variant": "highway_gate"}, {"highway_variant": "gated_mhdpa"}]
)
def test_dropout_never_touches_the_carried_input(options):
    """Training mode, T = 0 and F(X) = 0: every variant must give LN(X), whatever the dropout
    masks."""
    config = HighwayTransformerConfig(**{**TINY, **options, "dropout": 0.5})
    connection = HIGHWAY_CONNECTIONS[config.highway_variant](config).train()
    with torch.no_grad():
        connection.gate.bias.fill_(-1e4)
    X = torch.randn(2, 3, TINY["d_model"])
    torch.testing.assert_close(connection.combine(X, torch.zeros_like(X)), connection.norm(X))


def test_sdu_on_attention_only_at_base_size_adds_eighteen_sdus():
    """hub_configs/highway-sdu-attention-base-6l.json: 6 encoder self-attentions + 6 decoder self-
    and cross-attentions gated, 18 x 2 d (d + 1) parameters over the 62.37M post-norm base model."""

    config = AutoConfig.from_pretrained(
        Path(__file__).resolve().parents[1] / "hub_configs" / "highway-sdu-attention-base-6l.json"
    )
    with torch.device("meta"):
        highway = AutoModelForSeq2SeqLM.from_config(config)
        residual = AutoModelForSeq2SeqLM.from_config(paper_config("residual-postnorm", "base", 6))
    # 71.83M in all
    assert highway.num_parameters() - residual.num_parameters() == 18 * 2 * 512 * 513
