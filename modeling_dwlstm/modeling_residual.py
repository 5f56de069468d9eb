"""The residual Transformer baseline (Vaswani et al.), post-norm and pre-norm (Wang et al. 003 §2).

Same skeleton as the depth-wise LSTM model (embeddings, attention, stacks, loss, generation come
from `modeling_dwlstm`); only the layers differ. Each sub-layer F (attention or FFN) is wrapped by
a residual connection chosen by `norm_position`:

    post-norm   x = LN(x + dropout(F(x)))        003 Eq. 3
    pre-norm    x = x + dropout(F(LN(x)))        003 Eq. 4
"""

import torch
import torch.nn.functional as F
from torch import nn

from .configuration_dwlstm import FamilyMember, ResidualTransformerConfig, TranslationTransformerConfig
from .modeling_dwlstm import (
    ACTIVATIONS,
    DwLstmForConditionalGeneration,
    DwLstmModel,
    LayerState,
    MultiHeadAttention,
    SharedModules,
    register_layers,
)


class FeedForward(nn.Module):
    """FFN(x) = W_2 act(W_1 x + b_1) + b_2, d -> d_ff -> d."""

    def __init__(self, config: TranslationTransformerConfig):
        super().__init__()
        self.fc1 = nn.Linear(config.d_model, config.ffn_dim)
        self.activation = ACTIVATIONS[config.activation_function]()
        self.fc2 = nn.Linear(config.ffn_dim, config.d_model)
        self.activation_dropout = config.activation_dropout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        inner = F.dropout(self.activation(self.fc1(x)), self.activation_dropout, self.training)  # (B, T, d_ff)
        return self.fc2(inner)


class PostNormResidual(nn.Module):
    """x = LN(x + dropout(F(x))): the sub-layer reads x as is, the sum is normalised."""

    def __init__(self, config: TranslationTransformerConfig):
        super().__init__()
        self.norm = nn.LayerNorm(config.d_model)
        self.dropout = config.dropout

    def sublayer_input(self, x: torch.Tensor) -> torch.Tensor:
        return x

    def combine(self, x: torch.Tensor, sublayer_output: torch.Tensor) -> torch.Tensor:
        return self.norm(x + F.dropout(sublayer_output, self.dropout, self.training))


class PreNormResidual(PostNormResidual):
    """x = x + dropout(F(LN(x))): the sub-layer reads a normalised x, the residual path stays untouched."""

    def sublayer_input(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x)

    def combine(self, x: torch.Tensor, sublayer_output: torch.Tensor) -> torch.Tensor:
        return x + F.dropout(sublayer_output, self.dropout, self.training)


class ResidualEncoderLayer(nn.Module):
    """x = R_attn(x, SelfAttn);  x = R_ffn(x, FFN), R the residual connection of `residual_class`."""

    residual_class = PostNormResidual

    def __init__(self, config: TranslationTransformerConfig, layer_idx: int, shared_modules: SharedModules):
        super().__init__()
        self.self_attn = MultiHeadAttention(config.d_model, config.encoder_attention_heads, config.attention_dropout, layer_idx)
        self.self_attn_residual = self.connection(config, layer_idx)
        self.ffn = FeedForward(config)
        self.ffn_residual = self.connection(config, layer_idx)

    def connection(self, config: TranslationTransformerConfig, layer_idx: int) -> nn.Module:
        """The connection around each sub-layer of this layer (the highway model varies it with depth)."""
        return self.residual_class(config)

    @staticmethod
    def initial_state(embeddings: torch.Tensor) -> LayerState:
        return LayerState(output=embeddings)

    def forward(self, state: LayerState, attention_mask=None, output_attentions=False):
        x = state.output  # (B, S, d)
        attended, weights = self.self_attn(self.self_attn_residual.sublayer_input(x), attention_mask, output_attentions=output_attentions)
        x = self.self_attn_residual.combine(x, attended)
        x = self.ffn_residual.combine(x, self.ffn(self.ffn_residual.sublayer_input(x)))
        return LayerState(output=x), (weights,)


class ResidualDecoderLayer(nn.Module):
    """x = R(x, MaskedSelfAttn);  x = R(x, CrossAttn(., enc));  x = R(x, FFN)."""

    residual_class = PostNormResidual

    def __init__(self, config: TranslationTransformerConfig, layer_idx: int, shared_modules: SharedModules):
        super().__init__()
        d, heads = config.d_model, config.decoder_attention_heads
        self.self_attn = MultiHeadAttention(d, heads, config.attention_dropout, layer_idx)
        self.self_attn_residual = self.connection(config, layer_idx)
        self.cross_attn = MultiHeadAttention(d, heads, config.attention_dropout, layer_idx, is_cross_attention=True)
        self.cross_attn_residual = self.connection(config, layer_idx)
        self.ffn = FeedForward(config)
        self.ffn_residual = self.connection(config, layer_idx)

    connection = ResidualEncoderLayer.connection
    initial_state = staticmethod(ResidualEncoderLayer.initial_state)

    def forward(self, state, encoder_hidden_states, encoder_mask=None, self_mask=None, past_key_values=None, output_attentions=False):
        x = state.output  # (B, T, d)
        s, self_weights = self.self_attn(
            self.self_attn_residual.sublayer_input(x), self_mask,
            past_key_values=past_key_values, output_attentions=output_attentions,
        )
        x = self.self_attn_residual.combine(x, s)
        c, cross_weights = self.cross_attn(
            self.cross_attn_residual.sublayer_input(x), encoder_mask, encoder_hidden_states, past_key_values, output_attentions
        )
        x = self.cross_attn_residual.combine(x, c)
        x = self.ffn_residual.combine(x, self.ffn(self.ffn_residual.sublayer_input(x)))
        return LayerState(output=x), (self_weights, cross_weights)


class PreNormEncoderLayer(ResidualEncoderLayer):
    residual_class = PreNormResidual


class PreNormDecoderLayer(ResidualDecoderLayer):
    residual_class = PreNormResidual


register_layers("post_norm", ResidualEncoderLayer, ResidualDecoderLayer)
register_layers("pre_norm", PreNormEncoderLayer, PreNormDecoderLayer)


class ResidualTransformerModel(DwLstmModel):
    config_class = ResidualTransformerConfig
    _no_split_modules = ["ResidualEncoderLayer", "ResidualDecoderLayer", "PreNormEncoderLayer", "PreNormDecoderLayer"]


class ResidualTransformerForConditionalGeneration(DwLstmForConditionalGeneration):
    config_class = ResidualTransformerConfig
    base_model_class = ResidualTransformerModel
    _no_split_modules = ResidualTransformerModel._no_split_modules



VASWANI_2017 = """@inproceedings{vaswani2017attention,
  title     = {Attention Is All You Need},
  author    = {Vaswani, Ashish and Shazeer, Noam and Parmar, Niki and Uszkoreit, Jakob and Jones, Llion and
               Gomez, Aidan N. and Kaiser, {\\L}ukasz and Polosukhin, Illia},
  booktitle = {Advances in Neural Information Processing Systems},
  year      = {2017}
}"""
WANG_2019 = """@inproceedings{wang2019learning,
  title     = {Learning Deep Transformer Models for Machine Translation},
  author    = {Wang, Qiang and Li, Bei and Xiao, Tong and Zhu, Jingbo and Li, Changliang and Wong, Derek F. and
               Chao, Lidia S.},
  booktitle = {Proceedings of the 57th Annual Meeting of the Association for Computational Linguistics},
  year      = {2019}
}"""


MEMBER = FamilyMember(
    config_class=ResidualTransformerConfig,
    model_class=ResidualTransformerModel,
    generation_class=ResidualTransformerForConditionalGeneration,
    name="residual Transformer (Vaswani et al. 2017; Wang et al. 2019)",
    citations=(VASWANI_2017, WANG_2019),
    card_fields=("norm_position",),
    presets={"residual-postnorm": {"norm_position": "post"}, "residual-prenorm": {"norm_position": "pre"}},
)

__all__ = ["ResidualTransformerModel", "ResidualTransformerForConditionalGeneration"]
