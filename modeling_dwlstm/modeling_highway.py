"""Highway Transformer (Chai et al., paper 004): the post-norm residual Transformer with self-gating.

Same skeleton and layers as the residual baseline (`modeling_residual`); only the connection around
each sub-layer F (self-attention, cross-attention, FFN) changes. With the transform gate
T(X) = Psi(X W_1 + b_1) and the transform f(X) = X W_2 + b_2, both reading the sub-layer's input X:

    sdu            U = LN(X + F(X) + SDU(X)),  SDU(X) = T(X) * f(X)       004 Eqs. 21-24
    highway_gate   U = LN((1 - T(X)) * X + T(X) * f(X) + F(X))             004 Eqs. 26-29
    gated_mhdpa    U = LN(X + (1 - T(X)) * F(X) + T(X) * f(X))             004 Eqs. 30-31

Layers 1..`sdu_layers` of each stack get the gated connection (all layers by default), the layers
above the plain post-norm one, LN(X + F(X)).
"""

import torch
import torch.nn.functional as F
from torch import nn

from .configuration_dwlstm import FamilyMember, HighwayTransformerConfig
from .modeling_dwlstm import DwLstmForConditionalGeneration, DwLstmModel, register_layers
from .modeling_residual import VASWANI_2017, PostNormResidual, ResidualDecoderLayer, ResidualEncoderLayer

GATE_ACTIVATIONS = {"sigmoid": torch.sigmoid, "tanh": torch.tanh}


class SelfDependencyConnection(PostNormResidual):
    """U = LN(X + dropout(F(X)) + dropout(SDU(X))), SDU(X) = Psi(X W_1 + b_1) * (X W_2 + b_2)   (004 Eqs. 21-24).

    Each SDU costs 2 d (d + 1) parameters: 30 of them turn the 62.37M 6+6 base model into 78.13M (SPEC §4)."""

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
        branches = F.dropout(sublayer_output, self.dropout, self.training) + F.dropout(sdu, self.dropout, self.training)
        return self.norm(x + branches)


class HighwayGateConnection(SelfDependencyConnection):
    """o(X) = (1 - T(X)) * X + T(X) * f(X);  U = LN(o(X) + dropout(F(X)))   (004 Eqs. 26-29).
    T carries the gated transform, 1 - T the input itself, as in highway networks."""

    def combine(self, x: torch.Tensor, sublayer_output: torch.Tensor) -> torch.Tensor:
        transform_gate = self.transform_gate(x)  # (B, T, d)
        transformed = F.dropout(transform_gate * self.transform(x), self.dropout, self.training)
        return self.norm((1 - transform_gate) * x + transformed + F.dropout(sublayer_output, self.dropout, self.training))


class GatedSublayerConnection(SelfDependencyConnection):
    """o(X) = (1 - T(X)) * F(X) + T(X) * f(X);  U = LN(X + dropout(o(X)))   (004 Eqs. 30-31, "gated MHDPA").
    The gate trades the sub-layer's output against the gated transform; the residual path stays."""

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
    """The post-norm residual encoder layer with `highway_variant`'s connection on layers 1..`sdu_layers`."""

    def connection(self, config: HighwayTransformerConfig, layer_idx: int) -> nn.Module:
        if config.is_gated(layer_idx):
            return HIGHWAY_CONNECTIONS[config.highway_variant](config)
        return PostNormResidual(config)


class HighwayDecoderLayer(ResidualDecoderLayer):
    """The post-norm residual decoder layer; the gated connection also wraps its cross-attention."""

    connection = HighwayEncoderLayer.connection


register_layers("highway", HighwayEncoderLayer, HighwayDecoderLayer)


class HighwayTransformerModel(DwLstmModel):
    config_class = HighwayTransformerConfig
    _no_split_modules = ["HighwayEncoderLayer", "HighwayDecoderLayer"]


class HighwayTransformerForConditionalGeneration(DwLstmForConditionalGeneration):
    config_class = HighwayTransformerConfig
    base_model_class = HighwayTransformerModel
    _no_split_modules = HighwayTransformerModel._no_split_modules



CHAI_2020 = """@inproceedings{chai2020highway,
  title     = {Highway Transformer: Self-Gating Enhanced Self-Attentive Networks},
  author    = {Chai, Yekun and Jin, Shuo and Hou, Xinwen},
  booktitle = {Proceedings of the 58th Annual Meeting of the Association for Computational Linguistics},
  year      = {2020}
}"""

MEMBER = FamilyMember(
    config_class=HighwayTransformerConfig,
    model_class=HighwayTransformerModel,
    generation_class=HighwayTransformerForConditionalGeneration,
    name="highway Transformer with self-dependency units (Chai et al. 2020)",
    citations=(CHAI_2020, VASWANI_2017),
    card_fields=("highway_variant", "sdu_gate", "sdu_layers"),
    presets={"highway-sdu": {"highway_variant": "sdu", "sdu_gate": "sigmoid"}},
)

__all__ = ["HighwayTransformerModel", "HighwayTransformerForConditionalGeneration"]
