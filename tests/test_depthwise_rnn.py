"""The depth-wise RNN (Xu et al. 2024, Table 2; docs/members.md) against its equation and against
the depth-wise LSTM."""

import pytest
import torch
from conftest import TINY, random_ids, tiny_model
from test_depthwise_lstm_equations import randomize_, spec_hidden
from torch import nn

from modeling_dwlstm import DepthWiseRnnConfig, LayerState
from modeling_dwlstm.modeling_dwlstm import DepthWiseLstm
from modeling_dwlstm.modeling_rnn import DepthWiseRnn
from modeling_dwlstm.modeling_translation import SharedModules


@pytest.mark.parametrize("kind", ["linear", "ffn", "glu"])
# x of width d (encoder, add) or 2d (decoder concat)
@pytest.mark.parametrize("input_width", [1, 2])
def test_one_step_is_the_hidden_module_of_x_and_the_previous_output(kind, input_width):
    config = DepthWiseRnnConfig(
        d_model=8,
        ffn_dim=12,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        lstm_hidden=kind,
    )
    rnn = DepthWiseRnn(config, (input_width + 1) * 8, SharedModules(), ("encoder", 0))
    randomize_(rnn)
    x, o_prev = torch.randn(2, 3, 8 * input_width), torch.randn(2, 3, 8)
    state = rnn(x, LayerState(o_prev))
    # o_l = hidden([x ; o_{l-1}])
    o_l = spec_hidden(kind, rnn.hidden, torch.cat([x, o_prev], dim=-1))
    torch.testing.assert_close(state.output, o_l)
    assert state.cell is None


@pytest.mark.parametrize("merge", ["add", "concat"])
def test_first_encoder_and_decoder_layers_follow_the_depthwise_lstm_wiring(merge):
    """Encoder: o_1 = hidden([SelfAttn(o_0) ; o_0]). Decoder: x = CrossAttn(s + o_0, enc), o_1 = hidden([merge(s, x) ; o_0])."""  # noqa: E501
    model = tiny_model(f"rnn-glu-own-hidden-{merge}")
    randomize_(model.model.decoder.layers[0].depthwise_rnn.hidden)
    with torch.no_grad():
        out = model(
            input_ids=random_ids(2, 6),
            decoder_input_ids=random_ids(2, 4, seed=2),
            output_hidden_states=True,
        )
        layer, o_0 = model.model.encoder.layers[0], out.encoder_hidden_states[0]
        a, _ = layer.self_attn(o_0)
        expected = spec_hidden("glu", layer.depthwise_rnn.hidden, torch.cat([a, o_0], dim=-1))
        torch.testing.assert_close(out.encoder_hidden_states[1], expected, rtol=1e-5, atol=1e-5)

        layer, o_0 = model.model.decoder.layers[0], out.decoder_hidden_states[0]
        s, _ = layer.self_attn(o_0, attention_mask=torch.ones(4, 4).tril().bool())
        x, _ = layer.cross_attn(s + o_0, key_value_states=out.encoder_last_hidden_state)
        merged = torch.cat([s, x], dim=-1) if merge == "concat" else s + x
        expected = spec_hidden("glu", layer.depthwise_rnn.hidden, torch.cat([merged, o_0], dim=-1))
        torch.testing.assert_close(out.decoder_hidden_states[1], expected, rtol=1e-5, atol=1e-5)


class OpenGates(nn.Module):
    """i = 1, f = 0, g = 1: c_l = h and o_l = h, the depth-wise LSTM step reduced to its hidden module. In the
    place of `DepthWiseLstmGates`: a projection that passes its input on, and activations that
    ignore it."""  # noqa: E501

    def forward(self, concatenated):
        return concatenated

    def activations(self, projected):
        ones = projected.new_ones(*projected.shape[:-1], 1)
        return ones, torch.zeros_like(ones), ones


@pytest.mark.parametrize("hidden,merge", [("glu", "add"), ("linear", "concat"), ("ffn", "add")])
def test_equals_the_depthwise_lstm_with_input_and_output_gates_open_and_forget_gate_shut(
    hidden, merge
):
    """The same weights in a depth-wise LSTM whose gates are fixed to i = g = 1, f = 0 give the same
    translation model: the RNN is exactly "the depth-wise LSTM without gates or cell", and nothing
    else differs."""
    options = dict(lstm_hidden=hidden, decoder_merge=merge)
    rnn = tiny_model(f"rnn-{hidden}-own-hidden-{merge}")
    randomize_(rnn.model)
    lstm = tiny_model("dwlstm", share_gates="none", **options)
    for module in lstm.modules():
        if isinstance(module, DepthWiseLstm):
            # with share_gates="none" every step owns its gates: no parameters remain
            module.gates = OpenGates()
            # which the step applies
            object.__setattr__(module, "gate_activations", module.gates.activations)
    renamed = {
        k.replace("depthwise_rnn.", "depthwise_lstm."): v for k, v in rnn.state_dict().items()
    }
    lstm.load_state_dict(renamed, strict=True)
    inputs = dict(input_ids=random_ids(2, 6), decoder_input_ids=random_ids(2, 5, seed=2))
    with torch.no_grad():
        torch.testing.assert_close(
            lstm(**inputs).logits, rnn(**inputs).logits, rtol=1e-5, atol=1e-5
        )


@pytest.mark.parametrize("share_hidden,distinct", [(False, 5), (True, 2)])
def test_share_hidden_keeps_one_hidden_module_per_stack(share_hidden, distinct):
    model = tiny_model("rnn-glu-own-hidden-add", share_hidden=share_hidden)
    steps = [m for m in model.modules() if isinstance(m, DepthWiseRnn)]
    assert len(steps) == TINY["encoder_layers"] + TINY["decoder_layers"]
    assert len({id(step.hidden) for step in steps}) == distinct
    assert len({id(step.hidden) for step in steps[: TINY["encoder_layers"]]}) == (
        1 if share_hidden else 2
    )
    pointers = [t.data_ptr() for name, t in model.state_dict().items() if name != "lm_head.weight"]
    assert len(pointers) == len(set(pointers))  # every shared hidden module is stored once


def test_parameters_are_the_depthwise_lstm_minus_its_gates():
    """Xu et al. 2024, Table 2: 70.25M (global gates) vs 68.67M, the difference being the one
    gate module."""
    rnn, lstm = tiny_model("rnn-glu-own-hidden-add"), tiny_model("dwlstm", share_gates="global")
    gates = next(m for m in lstm.modules() if isinstance(m, DepthWiseLstm)).gates
    assert rnn.num_parameters() == lstm.num_parameters() - sum(
        p.numel() for p in gates.parameters()
    )
