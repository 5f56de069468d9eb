"""The residual Transformer baseline (Vaswani et al.), post-norm and pre-norm (Wang et al.
2019, §2).

The skeleton (embeddings, attention, stacks, loss, generation) is `modeling_translation`'s; this
file is the config, the layers and the record. Each sub-layer F (attention or FFN) is wrapped by
a residual connection chosen by `norm_position`:

    post-norm   x = LN(x + dropout(F(x)))        Wang et al. 2019, Eq. 3
    pre-norm    x = x + dropout(F(LN(x)))        Wang et al. 2019, Eq. 4
"""

from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn

from .building_blocks import MultiHeadAttention
from .configuration_translation import FamilyMember, TranslationTransformerConfig, check_choice
from .language_aware import make_layer_norm
from .modeling_translation import (
    ACTIVATIONS,
    LayerOutput,
    SharedModules,
    TranslationLayer,
    TranslationTransformerForConditionalGeneration,
    TranslationTransformerModel,
)

# transformers 5.4 to 5.9 copy into the remote-code cache of a local folder only the files that
# a model's own file imports (later releases follow the imports further): the files that
# modeling_translation.py needs are named here too.
if TYPE_CHECKING:
    from .generation_translation import Shortlist  # noqa: F401
    from .lora import LoraReachCheck  # noqa: F401
    from .loss import IGNORE_INDEX  # noqa: F401
    from .pipeline_translation import TranslationPipeline  # noqa: F401
    from .precision import linear_modules  # noqa: F401


class ResidualTransformerConfig(TranslationTransformerConfig):
    r"""
    The residual Transformer baseline (Vaswani et al.; Wang et al. 2019, §2, Eqs. 3-4).

    Args:
        norm_position (`str`, defaults to "post"):
            "post"  x = LN(x + F(x)) after every sub-layer (Wang et al. 2019, Eq. 3);
            "pre"   x = x + F(LN(x)) (Wang et al. 2019, Eq. 4), with the stack's final LayerNorm on its output.
            Both end each stack with a LayerNorm, as the skeleton does for every member
            (docs/members.md); for post-norm that final LayerNorm follows the last sub-layer's own,
            which Wang et al. 2019, Eq. 3 does not have (it adds 2 x 2d parameters and an
            affine map).
    """  # noqa: E501

    model_type = "dwlstm-residual"

    norm_position: str = "post"

    def check_values(self):
        super().check_values()
        check_choice("norm_position", self.norm_position, ("post", "pre"))


class FeedForward(nn.Module):
    """FFN(x) = W_2 act(W_1 x + b_1) + b_2, d -> d_ff -> d."""

    def __init__(self, config: TranslationTransformerConfig):
        super().__init__()
        self.fc1 = nn.Linear(config.d_model, config.ffn_dim)
        self.activation = ACTIVATIONS[config.activation_function]()
        self.fc2 = nn.Linear(config.ffn_dim, config.d_model)
        self.activation_dropout = config.activation_dropout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # (B, T, d_ff)
        inner = F.dropout(self.activation(self.fc1(x)), self.activation_dropout, self.training)
        return self.fc2(inner)


class PostNormResidual(nn.Module):
    """x = LN(x + dropout(F(x))): the sub-layer reads x as is, the sum is normalised."""

    def __init__(self, config: TranslationTransformerConfig):
        super().__init__()
        self.norm = make_layer_norm(config, config.d_model)
        self.dropout = config.dropout

    def sublayer_input(self, x: torch.Tensor) -> torch.Tensor:
        return x

    def combine(self, x: torch.Tensor, sublayer_output: torch.Tensor) -> torch.Tensor:
        return self.norm(x + F.dropout(sublayer_output, self.dropout, self.training))


class PreNormResidual(PostNormResidual):
    """x = x + dropout(F(LN(x))): the sub-layer reads a normalised x, the residual path stays
    untouched."""

    def sublayer_input(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x)

    def combine(self, x: torch.Tensor, sublayer_output: torch.Tensor) -> torch.Tensor:
        return x + F.dropout(sublayer_output, self.dropout, self.training)


class ResidualEncoderLayer(TranslationLayer):
    """x = R_attn(x, SelfAttn);  x = R_ffn(x, FFN), R the residual connection of `residual_class`."""  # noqa: E501

    residual_class = PostNormResidual

    def __init__(
        self, config: TranslationTransformerConfig, layer_idx: int, shared_modules: SharedModules
    ):
        super().__init__()
        self.self_attn = MultiHeadAttention(config, config.encoder_attention_heads, layer_idx)
        self.self_attn_residual = self.connection(config, layer_idx, "self_attn")
        self.ffn = FeedForward(config)
        self.ffn_residual = self.connection(config, layer_idx, "ffn")

    def connection(
        self, config: TranslationTransformerConfig, layer_idx: int, sublayer: str
    ) -> nn.Module:
        """The connection around sub-layer `sublayer` ("self_attn", "cross_attn" or "ffn") of this
        layer (the highway model varies it with depth and sub-layer)."""
        return self.residual_class(config)

    def forward(self, hidden_states, cell=None, *, attention_mask=None, output_attentions=False):
        x = hidden_states  # (B, S, d)
        attended, weights = self.self_attn(
            self.self_attn_residual.sublayer_input(x),
            attention_mask=attention_mask,
            output_attentions=output_attentions,
        )
        x = self.self_attn_residual.combine(x, attended)
        x = self.ffn_residual.combine(x, self.ffn(self.ffn_residual.sublayer_input(x)))
        return LayerOutput(x, cell=None, self_attention=weights)


class ResidualDecoderLayer(TranslationLayer):
    """x = R(x, MaskedSelfAttn);  x = R(x, CrossAttn(., enc));  x = R(x, FFN)."""

    residual_class = PostNormResidual

    def __init__(
        self, config: TranslationTransformerConfig, layer_idx: int, shared_modules: SharedModules
    ):
        super().__init__()
        heads = config.decoder_attention_heads
        self.self_attn = MultiHeadAttention(config, heads, layer_idx)
        self.self_attn_residual = self.connection(config, layer_idx, "self_attn")
        self.cross_attn = MultiHeadAttention(config, heads, layer_idx, is_cross_attention=True)
        self.cross_attn_residual = self.connection(config, layer_idx, "cross_attn")
        self.ffn = FeedForward(config)
        self.ffn_residual = self.connection(config, layer_idx, "ffn")

    connection = ResidualEncoderLayer.connection

    def forward(
        self,
        hidden_states,
        cell=None,
        encoder_hidden_states=None,
        *,
        attention_mask=None,
        encoder_attention_mask=None,
        past_key_values=None,
        output_attentions=False,
    ):
        x = hidden_states  # (B, T, d)
        s, self_weights = self.self_attn(
            self.self_attn_residual.sublayer_input(x),
            attention_mask=attention_mask,
            past_key_values=past_key_values,
            output_attentions=output_attentions,
        )
        x = self.self_attn_residual.combine(x, s)
        c, cross_weights = self.cross_attn(
            self.cross_attn_residual.sublayer_input(x),
            attention_mask=encoder_attention_mask,
            key_value_states=encoder_hidden_states,
            past_key_values=past_key_values,
            output_attentions=output_attentions,
        )
        x = self.cross_attn_residual.combine(x, c)
        x = self.ffn_residual.combine(x, self.ffn(self.ffn_residual.sublayer_input(x)))
        return LayerOutput(x, None, self_weights, cross_weights)


class PreNormEncoderLayer(ResidualEncoderLayer):
    residual_class = PreNormResidual


class PreNormDecoderLayer(ResidualDecoderLayer):
    residual_class = PreNormResidual


class ResidualTransformerModel(TranslationTransformerModel):
    config_class = ResidualTransformerConfig

    @classmethod
    def layer_classes(cls, config: ResidualTransformerConfig) -> tuple[type, type]:
        if config.norm_position == "pre":
            return PreNormEncoderLayer, PreNormDecoderLayer
        return ResidualEncoderLayer, ResidualDecoderLayer


class ResidualTransformerForConditionalGeneration(TranslationTransformerForConditionalGeneration):
    config_class = ResidualTransformerConfig
    base_model_class = ResidualTransformerModel


VASWANI_2017 = """@inproceedings{vaswani2017attention,
  title     = {Attention Is All You Need},
  author    = {Vaswani, Ashish and Shazeer, Noam and Parmar, Niki and Uszkoreit, Jakob and Jones, Llion and
               Gomez, Aidan N. and Kaiser, {\\L}ukasz and Polosukhin, Illia},
  booktitle = {Advances in Neural Information Processing Systems},
  year      = {2017}
}"""  # noqa: E501
WANG_2019 = """@inproceedings{wang2019learning,
  title     = {Learning Deep Transformer Models for Machine Translation},
  author    = {Wang, Qiang and Li, Bei and Xiao, Tong and Zhu, Jingbo and Li, Changliang and Wong, Derek F. and
               Chao, Lidia S.},
  booktitle = {Proceedings of the 57th Annual Meeting of the Association for Computational Linguistics},
  year      = {2019}
}"""  # noqa: E501


MEMBER = FamilyMember(
    config_class=ResidualTransformerConfig,
    model_class=ResidualTransformerModel,
    generation_class=ResidualTransformerForConditionalGeneration,
    name="residual Transformer (Vaswani et al. 2017; Wang et al. 2019)",
    citations=(VASWANI_2017, WANG_2019),
    card_fields=("norm_position",),
    projections=("fc1", "fc2"),  # the FFN
    presets={
        "residual-postnorm": {"norm_position": "post"},
        "residual-prenorm": {"norm_position": "pre"},
    },
)

__all__ = [
    "ResidualTransformerConfig",
    "ResidualTransformerModel",
    "ResidualTransformerForConditionalGeneration",
]
