"""The depth-wise RNN (Xu et al. 001 Table 2; SPEC §2.4): the depth-wise LSTM without gates or cell.

Each layer replaces the LSTM step by its hidden computation alone,

    o_l = hidden([x ; o_{l-1}])          o_0 = the embedded input,

with the depth-wise LSTM's hidden modules (`LSTM_HIDDEN_CLASSES`) and its wiring: the encoder's x is
the self-attention result, the decoder's x merges the masked self-attention result s and the
cross-attention result, whose query is s + o_{l-1} (SPEC §2.3). Like the depth-wise LSTM there is no
residual connection and no FFN sub-layer; what carries information up the stack is o only.
"""

import torch
import torch.nn.functional as F
from torch import nn

from .configuration_dwlstm import DepthWiseRnnConfig, FamilyMember
from .modeling_dwlstm import (
    LSTM_HIDDEN_CLASSES,
    XU_2020,
    XU_REWIRING,
    DwLstmForConditionalGeneration,
    DwLstmModel,
    LayerState,
    MultiHeadAttention,
    SharedModules,
    attach_shared,
    register_layers,
)
from .modeling_residual import ResidualEncoderLayer


class DepthwiseRnn(nn.Module):
    """One step over depth: (x, o_{l-1}) -> o_l = hidden([x ; o_{l-1}]). The hidden module is one per
    layer, or one per stack with `share_hidden`; `scope` = (stack, layer index) names this step's place."""

    def __init__(self, config: DepthWiseRnnConfig, input_dim: int, shared_modules: SharedModules, scope: tuple):
        super().__init__()
        hidden_scope = scope[:1] if config.share_hidden else scope
        hidden, owns_hidden = shared_modules.get(
            ("hidden", input_dim, *hidden_scope), lambda: LSTM_HIDDEN_CLASSES[config.lstm_hidden](input_dim, config)
        )
        attach_shared(self, "hidden", hidden, owns_hidden)

    def forward(self, x: torch.Tensor, state: LayerState) -> LayerState:
        return LayerState(output=self.hidden(torch.cat([x, state.output], dim=-1)))  # (B, T, d)


class DepthwiseRnnEncoderLayer(nn.Module):
    """a = SelfAttn(o_{l-1});  o_l = hidden([a ; o_{l-1}])."""

    def __init__(self, config: DepthWiseRnnConfig, layer_idx: int, shared_modules: SharedModules):
        super().__init__()
        d = config.d_model
        self.self_attn = MultiHeadAttention(d, config.encoder_attention_heads, config.attention_dropout, layer_idx)
        self.depthwise_rnn = DepthwiseRnn(config, 2 * d, shared_modules, ("encoder", layer_idx))
        self.dropout = config.dropout

    initial_state = staticmethod(ResidualEncoderLayer.initial_state)  # o_0 = embeddings, no cell

    def forward(self, state: LayerState, attention_mask=None, output_attentions=False):
        attended, weights = self.self_attn(state.output, attention_mask, output_attentions=output_attentions)
        attended = F.dropout(attended, self.dropout, self.training)  # (B, S, d)
        return self.depthwise_rnn(attended, state), (weights,)


class DepthwiseRnnDecoderLayer(nn.Module):
    """s = MaskedSelfAttn(o_{l-1});  x = CrossAttn(s + o_{l-1}, enc);  o_l = hidden([merge(s, x) ; o_{l-1}])
    with merge = s + x ("add") or [s; x] ("concat"), as in the depth-wise LSTM decoder (SPEC §2.3)."""

    def __init__(self, config: DepthWiseRnnConfig, layer_idx: int, shared_modules: SharedModules):
        super().__init__()
        d, heads = config.d_model, config.decoder_attention_heads
        self.self_attn = MultiHeadAttention(d, heads, config.attention_dropout, layer_idx)
        self.cross_attn = MultiHeadAttention(d, heads, config.attention_dropout, layer_idx, is_cross_attention=True)
        self.concat = config.decoder_merge == "concat"
        self.depthwise_rnn = DepthwiseRnn(config, (3 if self.concat else 2) * d, shared_modules, ("decoder", layer_idx))
        self.dropout = config.dropout

    initial_state = staticmethod(ResidualEncoderLayer.initial_state)

    def forward(self, state, encoder_hidden_states, encoder_mask=None, self_mask=None, past_key_values=None, output_attentions=False):
        s, self_weights = self.self_attn(state.output, self_mask, past_key_values=past_key_values, output_attentions=output_attentions)
        s = F.dropout(s, self.dropout, self.training)  # (B, T, d)
        x, cross_weights = self.cross_attn(s + state.output, encoder_mask, encoder_hidden_states, past_key_values, output_attentions)
        x = F.dropout(x, self.dropout, self.training)  # (B, T, d)
        merged = torch.cat([s, x], dim=-1) if self.concat else s + x
        return self.depthwise_rnn(merged, state), (self_weights, cross_weights)


register_layers("depthwise_rnn", DepthwiseRnnEncoderLayer, DepthwiseRnnDecoderLayer)


class DepthWiseRnnModel(DwLstmModel):
    config_class = DepthWiseRnnConfig
    _no_split_modules = ["DepthwiseRnnEncoderLayer", "DepthwiseRnnDecoderLayer"]


class DepthWiseRnnForConditionalGeneration(DwLstmForConditionalGeneration):
    config_class = DepthWiseRnnConfig
    base_model_class = DepthWiseRnnModel
    _no_split_modules = DepthWiseRnnModel._no_split_modules



MEMBER = FamilyMember(
    config_class=DepthWiseRnnConfig,
    model_class=DepthWiseRnnModel,
    generation_class=DepthWiseRnnForConditionalGeneration,
    name="depth-wise RNN Transformer (Xu et al., the depth-wise LSTM without gates or cell)",
    citations=(XU_REWIRING, XU_2020),
    card_fields=("lstm_hidden", "lstm_activation", "share_hidden", "decoder_merge"),
    presets={"depthwise-rnn": {}},
)

__all__ = ["DepthWiseRnnModel", "DepthWiseRnnForConditionalGeneration"]
