"""The depth-wise LSTM against a direct transcription of its equations (Xu et al. 2024, §2.1;
docs/members.md)."""

import pytest
import torch
from conftest import random_ids, tiny_model
from torch.nn.functional import gelu, sigmoid

from modeling_dwlstm import DwLstmConfig, LayerState
from modeling_dwlstm.modeling_dwlstm import DepthWiseLstm
from modeling_dwlstm.modeling_translation import SharedModules


def layer_norm(z, weight, bias, eps=1e-5):
    mean = z.mean(-1, keepdim=True)
    variance = ((z - mean) ** 2).mean(-1, keepdim=True)
    return (z - mean) / torch.sqrt(variance + eps) * weight + bias


def spec_hidden(kind, module, c):
    """h = hidden(c), the `lstm_hidden` variants, written from the equations."""
    if kind == "linear":  # h = act(LN(W_h c + b_h))
        return gelu(
            layer_norm(
                c @ module.projection.weight.T + module.projection.bias,
                module.norm.weight,
                module.norm.bias,
            )
        )
    z = layer_norm(c @ module.fc1.weight.T + module.fc1.bias, module.norm.weight, module.norm.bias)
    if kind == "ffn":  # h = W_2 act(LN(W_1 c + b_1)) + b_2
        inner = gelu(z)
    else:  # glu: h = W_2 GLU(LN(W_1 c + b_1)) + b_2, GLU = value * sigmoid(gate), halving d_ff
        value, gate = z.chunk(2, dim=-1)
        inner = value * sigmoid(gate)
    return inner @ module.fc2.weight.T + module.fc2.bias


def spec_step(kind, lstm, x, o_prev, c_prev):
    c = torch.cat([x, o_prev], dim=-1)  # c = [x ; o_{l-1}]
    W_i, W_f, W_o = lstm.gates.weight.chunk(3)
    b_i, b_f, b_o = lstm.gates.bias.chunk(3)
    (ln_i, ln_f, ln_o), (lb_i, lb_f, lb_o) = lstm.gates.norm_weight, lstm.gates.norm_bias
    i = sigmoid(layer_norm(c @ W_i.T + b_i, ln_i, lb_i))
    f = sigmoid(layer_norm(c @ W_f.T + b_f, ln_f, lb_f))
    g = sigmoid(layer_norm(c @ W_o.T + b_o, ln_o, lb_o))
    h = spec_hidden(kind, lstm.hidden, c)
    c_l = f * c_prev + i * h
    o_l = g * c_l  # no tanh on the cell
    return o_l, c_l


def randomize_(module):
    """Random values everywhere, so per-gate LayerNorm weights and biases differ from 1 and 0."""
    torch.manual_seed(0)
    with torch.no_grad():
        for parameter in module.parameters():
            parameter.normal_()


@pytest.mark.parametrize("kind", ["linear", "ffn", "glu"])
# x of width d (encoder, add) or 2d (decoder concat)
@pytest.mark.parametrize("input_width", [1, 2])
def test_one_step_matches_the_equations(kind, input_width):
    config = DwLstmConfig(
        d_model=8,
        ffn_dim=12,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        lstm_hidden=kind,
    )
    lstm = DepthWiseLstm(config, (input_width + 1) * 8, SharedModules(), ("encoder", 0, 0))
    randomize_(lstm)
    x, o_prev, c_prev = (
        torch.randn(2, 3, 8 * input_width),
        torch.randn(2, 3, 8),
        torch.randn(2, 3, 8),
    )
    state = lstm(x, LayerState(o_prev, c_prev))
    o_l, c_l = spec_step(kind, lstm, x, o_prev, c_prev)
    torch.testing.assert_close(state.output, o_l, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(state.cell, c_l, rtol=1e-5, atol=1e-5)


def test_first_encoder_and_decoder_layers_follow_spec_wiring():
    """Encoder: a = SelfAttn(o_0), o_0 = c_0 = embeddings. Decoder: x = CrossAttn(s + o_0, enc), m = s + x."""  # noqa: E501
    model = tiny_model("dwlstm")
    randomize_(model.model.encoder.layers[0].depthwise_lstm.gates)
    input_ids, decoder_input_ids = random_ids(2, 6), random_ids(2, 4, seed=2)
    with torch.no_grad():
        out = model(
            input_ids=input_ids, decoder_input_ids=decoder_input_ids, output_hidden_states=True
        )
        embeddings = out.encoder_hidden_states[0]
        layer = model.model.encoder.layers[0]
        a, _ = layer.self_attn(embeddings)
        o_1, _ = spec_step("glu", layer.depthwise_lstm, a, embeddings, embeddings)
        torch.testing.assert_close(out.encoder_hidden_states[1], o_1, rtol=1e-5, atol=1e-5)

        o_0 = out.decoder_hidden_states[0]
        layer = model.model.decoder.layers[0]
        s, _ = layer.self_attn(o_0, attention_mask=torch.ones(4, 4).tril().bool())
        x, _ = layer.cross_attn(s + o_0, key_value_states=out.encoder_last_hidden_state)
        o_1, _ = spec_step("glu", layer.depthwise_lstm, s + x, o_0, o_0)
        torch.testing.assert_close(out.decoder_hidden_states[1], o_1, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "share_gates,share_hidden,merge,distinct_gates,distinct_hidden",
    [
        ("global", False, "add", 1, 5),
        ("per_stack", False, "add", 2, 5),
        ("none", False, "add", 5, 5),
        ("global", True, "add", 1, 2),
        ("global", False, "concat", 2, 5),  # the decoder's 3d-input gates cannot be the encoder's
        ("per_stack", False, "two_lstm", 2, 8),
    ],
)
def test_sharing_modes_share_exactly_what_they_say(
    share_gates, share_hidden, merge, distinct_gates, distinct_hidden
):
    model = tiny_model(
        "dwlstm", share_gates=share_gates, share_hidden=share_hidden, decoder_merge=merge
    )
    lstms = [m for m in model.modules() if isinstance(m, DepthWiseLstm)]
    assert len({id(lstm.gates) for lstm in lstms}) == distinct_gates
    assert len({id(lstm.hidden) for lstm in lstms}) == distinct_hidden
    # every shared parameter is stored once in the checkpoint
    pointers = [t.data_ptr() for t in model.state_dict().values() if t is not model.lm_head.weight]
    tied = model.lm_head.weight.data_ptr()
    assert len([p for p in pointers if p != tied]) == len(set(p for p in pointers if p != tied))


@pytest.mark.parametrize("language_aware", [False, True])
def test_forget_gate_bias_starts_only_the_forget_gates_open(language_aware):
    """`forget_gate_bias` b: every forget gate's LayerNorm bias starts at b (sigmoid(b) of the cell
    kept per layer), the input and output gates' at 0 as in the papers; b = 0 is the papers'
    initialisation. It is initialisation only: a saved model loads with the values it was
    saved with."""
    languages = (
        dict(
            language_pairs=["en-de", "en-fr"],
            language_tag_ids={"de": 4, "fr": 5},
            language_aware_norm=True,
        )
        if language_aware
        else {}
    )
    opened = tiny_model("dwlstm", forget_gate_bias=1.5, **languages)
    papers = tiny_model("dwlstm", **languages)
    gates = [module for module in opened.modules() if hasattr(module, "forget_bias")]
    assert len(gates) == 2  # one per stack (share_gates="per_stack")
    for module in gates:
        input_bias, forget_bias, output_bias = module.norm_bias.unbind(-2)
        assert torch.equal(forget_bias, torch.full_like(forget_bias, 1.5))
        assert not input_bias.any() and not output_bias.any()
    assert not any(
        module.norm_bias.any() for module in papers.modules() if hasattr(module, "forget_bias")
    )
    # The same seed draws the same weights: only the forget gates' starting bias differs.
    differing = {
        name
        for name, value in opened.state_dict().items()
        if not torch.equal(value, papers.state_dict()[name])
    }
    assert differing and all(name.endswith("gates.norm_bias") for name in differing)
