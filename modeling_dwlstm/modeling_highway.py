"""Highway Transformer (Chai et al. 2020): the post-norm residual Transformer with self-gating.

The residual baseline's layers (`modeling_residual`) with a gated connection around each sub-layer F
(self-dependency units and two highway variants; their equations: `HighwayTransformerConfig`).
"""

from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn

from .configuration_translation import (
    FamilyMember,
    TranslationTransformerConfig,
    check_choice,
    check_int,
)
from .modeling_residual import (
    VASWANI_2017,
    PostNormResidual,
    ResidualDecoderLayer,
    ResidualEncoderLayer,
)
from .modeling_translation import (
    TranslationTransformerForConditionalGeneration,
    TranslationTransformerModel,
)

# transformers 5.4 to 5.9 copy into the remote-code cache of a local folder only the files that
# a model's own file imports (later releases follow the imports further): the files that
# modeling_translation.py needs are named here too.
if TYPE_CHECKING:
    from .building_blocks import MultiHeadAttention  # noqa: F401
    from .generation_translation import Shortlist  # noqa: F401
    from .language_aware import TargetLanguage  # noqa: F401
    from .lora import LoraReachCheck  # noqa: F401
    from .loss import IGNORE_INDEX  # noqa: F401
    from .pipeline_translation import TranslationPipeline  # noqa: F401
    from .precision import linear_modules  # noqa: F401

GATE_ACTIVATIONS = {"sigmoid": torch.sigmoid, "tanh": torch.tanh}


class HighwayTransformerConfig(TranslationTransformerConfig):
    r"""
    Highway Transformer (Chai et al. 2020): the post-norm residual Transformer with a
    self-gated branch on the sub-layers (self-attention, cross-attention, FFN) of both stacks. With
    T(X) = Psi(X W_1 + b_1) and f(X) = X W_2 + b_2 (one pair of d x d projections per gated sub-layer
    F, the gate reading the sub-layer's input X):

        "sdu"           U = LN(X + F(X) + T(X) * f(X))                       (Chai et al. 2020, Eqs. 21-24)
        "highway_gate"  U = LN((1 - T(X)) * X + T(X) * f(X) + F(X))           (Chai et al. 2020, Eqs. 26-29)
        "gated_mhdpa"   U = LN(X + (1 - T(X)) * F(X) + T(X) * f(X))           (Chai et al. 2020, Eqs. 30-31)

    Args: sdu_gate (`str`, defaults to "sigmoid"): Psi of the "sdu" variant, "sigmoid" or "tanh"
        (Chai et al. 2020, Eq. 21).
            The two highway variants use the sigmoid transform gate of Chai et al. 2020, Eq. 26
            (their carry gate is 1 - T), so they accept only "sigmoid".
        highway_variant (`str`, defaults to "sdu"): "sdu", "highway_gate" or "gated_mhdpa" (above).
        sdu_layers (`int` or `None`, defaults to None): None gates every layer of both stacks (the
            30 gated sub-layers at 6+6); an integer k gates only layers 1..k of each stack (Chai et
            al. 2020, Tables 5-6, e.g. "L1-2"), the layers above are plain post-norm residual
            layers. A stack with fewer than k layers is gated throughout; k must be between 1 and
            the deeper stack's depth.
        sdu_ffn (`bool`, defaults to True): gate the FFN sub-layers too; False gates only the
            attention sub-layers (self- and cross-attention), Chai et al. 2020, Table 5's "\\FFN"
            setting (18 gated sub-layers at 6+6).

    Dropout (our choice): `dropout` on F(X) and on the gated branch T(X) * f(X), as on every
    sub-layer output of the residual model; nothing is dropped from the carried input X.
    """  # noqa: E501

    model_type = "dwlstm-highway"

    sdu_gate: str = "sigmoid"
    highway_variant: str = "sdu"
    sdu_layers: int | None = None
    sdu_ffn: bool = True

    def check_values(self):
        super().check_values()
        check_choice("sdu_gate", self.sdu_gate, ("sigmoid", "tanh"))
        check_choice(
            "highway_variant", self.highway_variant, ("sdu", "highway_gate", "gated_mhdpa")
        )
        if self.highway_variant != "sdu" and self.sdu_gate != "sigmoid":
            raise ValueError(
                f"`sdu_gate={self.sdu_gate!r}` applies to highway_variant='sdu' only: "
                f"{self.highway_variant!r} uses "
                "the sigmoid transform gate T of Chai et al. 2020, Eq. 26 (its carry gate is 1 - "
                "T). Set sdu_gate='sigmoid'."
            )
        deepest = max(self.encoder_layers, self.decoder_layers)
        if not isinstance(self.sdu_ffn, bool):
            raise ValueError(f"`sdu_ffn` must be True or False, got {self.sdu_ffn!r}.")
        if self.sdu_layers is not None:
            check_int("sdu_layers", self.sdu_layers, 1)
            if self.sdu_layers > deepest:
                raise ValueError(
                    "`sdu_layers` gates layers 1..k and must be at most the deeper stack's "
                    f"{deepest} layers, got {self.sdu_layers}; use sdu_layers=None to gate every "
                    "layer."
                )

    def is_gated(self, layer_idx: int, sublayer: str) -> bool:
        """Whether sub-layer `sublayer` ("self_attn", "cross_attn", "ffn") of layer `layer_idx`
        (0-based, either stack) has the gated branch."""
        return (self.sdu_layers is None or layer_idx < self.sdu_layers) and (
            self.sdu_ffn or sublayer != "ffn"
        )


class SelfDependencyConnection(PostNormResidual):
    """U = LN(X + dropout(F(X)) + dropout(SDU(X))), SDU(X) = Psi(X W_1 + b_1) * (X W_2 + b_2)   (Chai et al. 2020, Eqs. 21-24).

    Each SDU costs 2 d (d + 1) parameters: 30 of them turn the 62.37M 6+6 base model into 78.13M (Xu
    et al. 2024, Table 6)."""  # noqa: E501

    def __init__(self, config: HighwayTransformerConfig):
        super().__init__(config)
        self.gate = nn.Linear(config.d_model, config.d_model)  # W_1, b_1
        self.transform = nn.Linear(config.d_model, config.d_model)  # W_2, b_2
        self.gate_activation = GATE_ACTIVATIONS[config.sdu_gate]

    def transform_gate(self, x: torch.Tensor) -> torch.Tensor:
        """T(X) = Psi(X W_1 + b_1), (B, T, d)."""
        return self.gate_activation(self.gate(x))

    def combine(self, x: torch.Tensor, sublayer_output: torch.Tensor) -> torch.Tensor:
        sdu = self.transform_gate(x) * self.transform(x)  # (B, T, d)
        branches = F.dropout(sublayer_output, self.dropout, self.training) + F.dropout(
            sdu, self.dropout, self.training
        )
        return self.norm(x + branches)


class HighwayGateConnection(SelfDependencyConnection):
    """o(X) = (1 - T(X)) * X + T(X) * f(X);  U = LN(o(X) + dropout(F(X)))   (Chai et al. 2020, Eqs. 26-29).
    T carries the gated transform, 1 - T the input itself, as in highway networks."""  # noqa: E501

    def combine(self, x: torch.Tensor, sublayer_output: torch.Tensor) -> torch.Tensor:
        transform_gate = self.transform_gate(x)  # (B, T, d)
        transformed = F.dropout(transform_gate * self.transform(x), self.dropout, self.training)
        return self.norm(
            (1 - transform_gate) * x
            + transformed
            + F.dropout(sublayer_output, self.dropout, self.training)
        )


class GatedSublayerConnection(SelfDependencyConnection):
    """o(X) = (1 - T(X)) * F(X) + T(X) * f(X);  U = LN(X + dropout(o(X)))   (Chai et al. 2020, Eqs. 30-31, "gated MHDPA").
    The gate trades the sub-layer's output against the gated transform; the residual path stays."""  # noqa: E501

    def combine(self, x: torch.Tensor, sublayer_output: torch.Tensor) -> torch.Tensor:
        transform_gate = self.transform_gate(x)  # (B, T, d)
        gated = (1 - transform_gate) * sublayer_output + transform_gate * self.transform(x)
        return self.norm(x + F.dropout(gated, self.dropout, self.training))


HIGHWAY_CONNECTIONS = {
    "sdu": SelfDependencyConnection,
    "highway_gate": HighwayGateConnection,
    "gated_mhdpa": GatedSublayerConnection,
}


class HighwayEncoderLayer(ResidualEncoderLayer):
    """The post-norm residual encoder layer with `highway_variant`'s connection on layers
    1..`sdu_layers`."""

    def connection(
        self, config: HighwayTransformerConfig, layer_idx: int, sublayer: str
    ) -> nn.Module:
        if config.is_gated(layer_idx, sublayer):
            return HIGHWAY_CONNECTIONS[config.highway_variant](config)
        return PostNormResidual(config)


class HighwayDecoderLayer(ResidualDecoderLayer):
    """The post-norm residual decoder layer; the gated connection also wraps its cross-attention."""

    connection = HighwayEncoderLayer.connection


class HighwayTransformerModel(TranslationTransformerModel):
    config_class = HighwayTransformerConfig
    encoder_layer_class, decoder_layer_class = HighwayEncoderLayer, HighwayDecoderLayer


class HighwayTransformerForConditionalGeneration(TranslationTransformerForConditionalGeneration):
    config_class = HighwayTransformerConfig
    base_model_class = HighwayTransformerModel


CHAI_2020 = """@inproceedings{chai2020highway,
  title     = {Highway Transformer: Self-Gating Enhanced Self-Attentive Networks},
  author    = {Chai, Yekun and Jin, Shuo and Hou, Xinwen},
  booktitle = {Proceedings of the 58th Annual Meeting of the Association for Computational Linguistics},
  year      = {2020}
}"""  # noqa: E501

MEMBER = FamilyMember(
    config_class=HighwayTransformerConfig,
    model_class=HighwayTransformerModel,
    generation_class=HighwayTransformerForConditionalGeneration,
    name="highway Transformer with self-dependency units (Chai et al. 2020)",
    citations=(CHAI_2020, VASWANI_2017),
    card_fields=("highway_variant", "sdu_gate", "sdu_layers", "sdu_ffn"),
    projections=("gate", "transform", "fc1", "fc2"),  # the gated units (gate, transform); the FFN
    presets={
        "highway-sdu": {"highway_variant": "sdu", "sdu_gate": "sigmoid"},
        "highway-sdu-attention": {
            "highway_variant": "sdu",
            "sdu_gate": "sigmoid",
            "sdu_ffn": False,
        },
    },
    # Chai et al. 2020, Table 5's "\FFN" ablation (SDUs on the attention sub-layers only) at the
    # base size.
    hub_depths={"highway-sdu-attention": [("base", 6, 6)]},
)

__all__ = [
    "HighwayTransformerConfig",
    "HighwayTransformerModel",
    "HighwayTransformerForConditionalGeneration",
]
