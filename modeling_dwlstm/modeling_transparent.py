"""Transparent attention (Bapna et al. 2018), the TA baseline of Xu et al. 2024, Table 6.

The residual Transformer (`modeling_residual`, post-norm by default) whose decoder layers each
cross-attend over their own learned, softmax-weighted combination of all encoder layer outputs:

    memory_i = sum_j softmax(s_i)_j e_j,     e_0 = embeddings, e_1 .. e_{L-1} layer outputs, e_L = encoder output

The encoder returns the stacked e_j as `layer_outputs` of its `TranslationEncoderOutput` (a
top-level tensor, so `generate()` expands it for beams); each decoder layer mixes them only while
its cross-attention keys/values are not yet cached, i.e. once per generation.
"""  # noqa: E501

from typing import TYPE_CHECKING

import torch
from torch import nn

from .configuration_translation import FamilyMember
from .modeling_residual import (
    VASWANI_2017,
    ResidualTransformerConfig,
    ResidualTransformerForConditionalGeneration,
    ResidualTransformerModel,
)
from .modeling_translation import LayerCombination

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


class TransparentAttentionConfig(ResidualTransformerConfig):
    r"""
    Transparent attention (Bapna et al. 2018, "Training Deeper Neural Machine Translation Models
    with Transparent Attention"; the TA baseline of Xu et al. 2024, Table 6) on the residual layers.

    Decoder layer i cross-attends over its own softmax-weighted combination of all encoder layer
    outputs instead of the top one only:

        memory_i = sum_j softmax(s_i)_j e_j,   j = 0 .. L_enc

    with e_0 the embeddings, e_1 .. e_{L-1} the layer outputs and e_L the encoder's final output
    (after its LayerNorm), and s a learned (decoder_layers, encoder_layers + 1) matrix initialised
    to zero (every layer weighted equally at the start).

    Args:
        norm_position (`str`, defaults to "post"): the residual layers' normalisation. Post-norm by
            default: transparent attention was proposed to train deep post-norm encoders, and Wang
            et al. 2019 (Table 2) compare it among the post-norm systems.
    """

    model_type = "dwlstm-ta"


class TransparentAttention(LayerCombination):
    """Cross-attention source: `weights` (decoder_layers, encoder_layers + 1) are the scores s_i."""

    reads_all_encoder_layers = True

    def __init__(self, config: TransparentAttentionConfig):
        super().__init__()
        self.shape = (config.decoder_layers, config.encoder_layers + 1)
        self.weights = nn.Parameter(self.initial_weights())

    def initial_weights(self) -> torch.Tensor:
        return torch.zeros(self.shape)  # softmax: every encoder layer weighted 1/(L+1)

    def encoder_states(self, encoder_outputs) -> torch.Tensor:
        layer_outputs = getattr(encoder_outputs, "layer_outputs", None)
        if layer_outputs is None:
            raise ValueError(
                "Transparent attention reads every encoder layer: pass `encoder_outputs` as "
                "returned by this model's encoder (`model.get_encoder()(...)`, a "
                "TranslationEncoderOutput with `layer_outputs`)."
            )
        return layer_outputs  # (B, S, L_enc+1, d)

    def forward(
        self, encoder_states: torch.Tensor, layer_idx: int, past_key_values=None
    ) -> torch.Tensor | None:
        if past_key_values is not None and past_key_values.is_updated.get(layer_idx):
            # this layer's cross-attention keys/values are cached: the memory is not read again
            return None
        if encoder_states.dim() != 4 or encoder_states.shape[2] != self.shape[1]:
            raise ValueError(
                "Transparent attention's decoder reads every encoder layer: pass "
                "encoder_hidden_states = encoder(...).layer_outputs, shape (batch, source "
                f"length, {self.shape[1]}, d_model), got {tuple(encoder_states.shape)}."
            )
        # (L+1,) @ (B, S, L+1, d) -> (B, S, d)
        return self.weights[layer_idx].softmax(-1) @ encoder_states


class TransparentAttentionModel(ResidualTransformerModel):
    config_class = TransparentAttentionConfig
    cross_attention_source_class = TransparentAttention


class TransparentAttentionForConditionalGeneration(ResidualTransformerForConditionalGeneration):
    config_class = TransparentAttentionConfig
    base_model_class = TransparentAttentionModel


BAPNA_2018 = """@inproceedings{bapna2018training,
  title     = {Training Deeper Neural Machine Translation Models with Transparent Attention},
  author    = {Bapna, Ankur and Chen, Mia Xu and Firat, Orhan and Cao, Yuan and Wu, Yonghui},
  booktitle = {Proceedings of the 2018 Conference on Empirical Methods in Natural Language Processing},
  year      = {2018}
}"""  # noqa: E501

# Bapna et al.'s 16-layer encoder (Xu et al. 2024, Table 6), beside the 6-layer base.
MEMBER = FamilyMember(
    config_class=TransparentAttentionConfig,
    model_class=TransparentAttentionModel,
    generation_class=TransparentAttentionForConditionalGeneration,
    name="Transformer with transparent attention (Bapna et al. 2018)",
    citations=(BAPNA_2018, VASWANI_2017),
    card_fields=("norm_position",),
    projections=("fc1", "fc2"),  # the FFN
    presets={"transparent-attention": {}},
    hub_depths={"transparent-attention": [("base", 6, 6), ("base", 16, 6)]},
)

__all__ = [
    "TransparentAttentionConfig",
    "TransparentAttention",
    "TransparentAttentionModel",
    "TransparentAttentionForConditionalGeneration",
]
