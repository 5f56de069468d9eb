"""Dynamic linear combination of layers, DLCL (Wang et al. 2019, §3, Eqs. 7-9).

The residual layers of `modeling_residual`, each fed a weighted sum of all earlier layer outputs by
`DlclConnection` (the equations: `DlclConfig`). `model.dlcl_weight_matrices()` reads the weights
out; `nmt_toolkit.lab.plotting_analysis.plot_dlcl_weights` draws them like Wang et al. 2019, Fig. 5.
"""

from typing import TYPE_CHECKING

import torch
from torch import nn

from .configuration_translation import FamilyMember, check_choice
from .language_aware import make_layer_norm
from .modeling_residual import (
    WANG_2019,
    ResidualTransformerConfig,
    ResidualTransformerForConditionalGeneration,
    ResidualTransformerModel,
)
from .modeling_translation import LayerCombination, LayerState

# transformers 5.4 to 5.9 copy into the remote-code cache of a local folder only the files that
# a model's own file imports (later releases follow the imports further): the files that
# modeling_translation.py needs are named here too.
if TYPE_CHECKING:
    from .building_blocks import MultiHeadAttention  # noqa: F401
    from .generation_translation import Shortlist  # noqa: F401
    from .lora import LoraReachCheck  # noqa: F401
    from .loss import IGNORE_INDEX  # noqa: F401
    from .pipeline_translation import TranslationPipeline  # noqa: F401
    from .precision import linear_modules  # noqa: F401


class DlclConfig(ResidualTransformerConfig):
    r"""
    Dynamic linear combination of layers, DLCL (Wang et al. 2019, §3, Eqs. 7-9), on the
    residual layers.

    Both stacks keep every layer output y_0 .. y_l (y_0 = the embeddings) and feed layer l+1 a
    weighted sum of them, with one scalar W^{(l+1)}_k per (consumer, earlier layer) pair, separately
    for encoder and decoder; the stack output (before the final LayerNorm) is one more consumer, so
    each stack has an (L+1) x (L+1) lower-triangular weight matrix (Wang et al. 2019, Fig. 5):

        pre-norm    x_{l+1} = sum_k W_k LN_k(y_k)       (Eq. 8; one LayerNorm per stored output)
        post-norm   x_{l+1} = LN_{l+1}(sum_k W_k y_k)   (Eq. 9; one LayerNorm per consumer; for the
                                                          stack output the stack's final LayerNorm is it)

    Only complete layers are combined (Wang et al. 2019, §5: "we only combine the output of a
    complete layer"), so cached decoding works position by position as for the residual model.

    Args: norm_position (`str`, defaults to "pre"): "pre" or "post", as for the residual model; Wang
        et al. 2019's
            DLCL systems (DLCL-30L, Fig. 5, the ablations of Table 6) are pre-norm.
        dlcl_weights (`str`, defaults to "learned"): "learned" (initialised to the average 1/(l+1)),
            or the fixed ablations of Wang et al. 2019, Table 6: "one" (W = 1) and "average" (W =
            1/(l+1)).
        dlcl_layer_norm (`bool`, defaults to True): the LayerNorms of Eqs. 8/9; False is Table 6's
            "- layer norm." ablation (then DLCL with one-hot weights on the previous layer is
            exactly the residual model).
    """  # noqa: E501

    model_type = "dwlstm-dlcl"

    norm_position: str = "pre"
    dlcl_weights: str = "learned"
    dlcl_layer_norm: bool = True

    def check_values(self):
        super().check_values()
        check_choice("dlcl_weights", self.dlcl_weights, ("learned", "one", "average"))
        if not isinstance(self.dlcl_layer_norm, bool):
            raise ValueError(
                f"`dlcl_layer_norm` must be True or False, got {self.dlcl_layer_norm!r}."
            )


class DlclConnection(LayerCombination):
    """The depth connection of one DLCL stack of `num_layers` layers.

    Consumers c = 0 .. L (c < L: the input of layer c+1; c = L: the stack output, before the final
    LayerNorm) read y_0 .. y_c with weights W[c, 0..c]. The lower triangle of W is stored row by row
    in `weights`, a vector of (L+1)(L+2)/2 scalars: a parameter for `dlcl_weights="learned"`, a
    buffer for the fixed ablations. Pre-norm normalises each y_k once, when it enters the history.
    """

    def __init__(self, config: DlclConfig, num_layers: int):
        super().__init__()
        self.num_consumers = num_layers + 1
        self.weighting = config.dlcl_weights
        self.pre_norm = config.norm_position == "pre"
        if self.weighting == "learned":
            self.weights = nn.Parameter(self.initial_weights())
        else:
            self.register_buffer("weights", self.initial_weights(), persistent=False)
        # Pre-norm: LN_k for k = 0..L. Post-norm: LN_c for c = 0..L-1; the stack output's is the
        # final LayerNorm.
        num_norms = (
            (self.num_consumers if self.pre_norm else num_layers) if config.dlcl_layer_norm else 0
        )
        self.layer_norms = nn.ModuleList(
            make_layer_norm(config, config.d_model) for _ in range(num_norms)
        )

    def initial_weights(self) -> torch.Tensor:
        """Row c holds 1/(c+1) (the average: "learned" starts there, "average" stays there) or 1
        ("one")."""
        rows = [
            torch.full((c + 1,), 1.0 if self.weighting == "one" else 1.0 / (c + 1))
            for c in range(self.num_consumers)
        ]
        return torch.cat(rows)

    def row(self, consumer: int) -> torch.Tensor:  # W[c, 0..c]
        start = consumer * (consumer + 1) // 2
        return self.weights[start : start + consumer + 1]

    def weight_matrix(self) -> torch.Tensor:
        """W as an (L+1) x (L+1) lower-triangular matrix: row = consumer, column = earlier layer."""
        matrix = self.weights.new_zeros(self.num_consumers, self.num_consumers)
        rows, columns = torch.tril_indices(
            self.num_consumers, self.num_consumers, device=self.weights.device
        )
        matrix[rows, columns] = self.weights
        return matrix

    def remember(self, history: list[LayerState], state: LayerState) -> list[LayerState]:
        if self.pre_norm and self.layer_norms:
            # LN_k(y_k), computed once
            state = LayerState(output=self.layer_norms[len(history)](state.output))
        return [*history, state]

    def forward(self, history: list[LayerState], consumer: int) -> LayerState:
        # A running sum rather than stack-and-matmul: autograd then keeps no (c+1)-fold copy per
        # consumer.
        combined = sum(
            weight * entry.output for weight, entry in zip(self.row(consumer), history, strict=True)
        )  # (B, T, d)
        if not self.pre_norm and consumer < len(self.layer_norms):
            combined = self.layer_norms[consumer](combined)
        return LayerState(output=combined)


class DlclWeightsMixin:
    """`dlcl_weight_matrices()` for both DLCL model classes."""

    def dlcl_weight_matrices(self) -> dict[str, torch.Tensor]:
        """{"encoder": (L_enc+1) x (L_enc+1), "decoder": (L_dec+1) x (L_dec+1)} lower-triangular
        weight matrices (row = consumer: layer 1 .. L, then the stack output; column = y_0 .. y_L),
        on the CPU."""
        stacks = {"encoder": self.get_encoder(), "decoder": self.get_decoder()}
        return {
            name: stack.depth_connection.weight_matrix().detach().float().cpu()
            for name, stack in stacks.items()
        }


class DlclModel(DlclWeightsMixin, ResidualTransformerModel):
    config_class = DlclConfig
    depth_connection_class = DlclConnection


class DlclForConditionalGeneration(DlclWeightsMixin, ResidualTransformerForConditionalGeneration):
    config_class = DlclConfig
    base_model_class = DlclModel


# Wang et al. 2019's pre-norm DLCL-30L and post-norm 20-layer DLCL (§5.1), beside the 6-layer base.
MEMBER = FamilyMember(
    config_class=DlclConfig,
    model_class=DlclModel,
    generation_class=DlclForConditionalGeneration,
    name="Transformer with dynamic linear combination of layers (DLCL; Wang et al. 2019)",
    citations=(WANG_2019,),
    card_fields=("norm_position", "dlcl_weights", "dlcl_layer_norm"),
    projections=("fc1", "fc2"),  # the FFN
    presets={"dlcl-prenorm": {"norm_position": "pre"}, "dlcl-postnorm": {"norm_position": "post"}},
    hub_depths={
        "dlcl-prenorm": [("base", 6, 6), ("base", 30, 6)],
        "dlcl-postnorm": [("base", 6, 6), ("base", 20, 6)],
    },
)

__all__ = ["DlclConfig", "DlclConnection", "DlclModel", "DlclForConditionalGeneration"]
