"""The depth-wise RNN (Xu et al. 2024, Table 2): the depth-wise LSTM without gates or cell.

Each layer replaces the LSTM step by its hidden computation alone,

    o_l = hidden([x ; o_{l-1}])          o_0 = the embedded input,

with the depth-wise LSTM's hidden modules (`LSTM_HIDDEN_CLASSES`) and its wiring: the encoder's x is
the self-attention result, the decoder's x merges the masked self-attention result s and the
cross-attention result, whose query is s + o_{l-1} (as in the depth-wise LSTM). Like the depth-wise
LSTM there is no residual connection and no FFN sub-layer; what carries information up the stack
is o only.
"""

from typing import TYPE_CHECKING

import torch
from torch import nn

from .building_blocks import attach_shared
from .configuration_translation import FamilyMember
from .modeling_dwlstm import (
    LSTM_HIDDEN_CLASSES,
    XU_2020,
    XU_2024,
    DepthWiseConfig,
    DepthWiseLstmDecoderLayer,
    DepthWiseLstmEncoderLayer,
)
from .modeling_translation import (
    LayerState,
    SharedModules,
    TranslationTransformerForConditionalGeneration,
    TranslationTransformerModel,
)

# transformers 5.4 to 5.9 copy into the remote-code cache of a local folder only the files that
# a model's own file imports (later releases follow the imports further): the files that
# modeling_translation.py needs are named here too.
if TYPE_CHECKING:
    from .generation_translation import Shortlist  # noqa: F401
    from .language_aware import TargetLanguage  # noqa: F401
    from .lora import LoraReachCheck  # noqa: F401
    from .loss import IGNORE_INDEX  # noqa: F401
    from .pipeline_translation import TranslationPipeline  # noqa: F401
    from .precision import linear_modules  # noqa: F401


class DepthWiseRnnConfig(DepthWiseConfig):
    r"""
    The depth-wise RNN ablation of Xu et al. 2024 (Table 2): the depth-wise LSTM without
    gates or cell. Layer l turns its attention result x and the previous layer's output into

        o_l = hidden([x ; o_{l-1}])          o_0 = the embedded input

    with the depth-wise LSTM's hidden module (`DwLstmConfig`'s field names and variants) and
    the same
    wiring: encoder x = SelfAttn(o_{l-1}); decoder s = MaskedSelfAttn(o_{l-1}),
    x' = CrossAttn(s + o_{l-1}, enc), x = merge(s, x'). Defaults reproduce Xu et al. 2024, Table 2's
    68.67M parameters (6+6 base, glu hidden with d_ff 2048, one hidden module per layer).

    Args: lstm_hidden (`str`, defaults to "glu"): "linear" (Xu et al. 2024, Eq. 5), "ffn" (Xu et al.
        2020, Eq. 8)
            or "glu" (Xu et al. 2024, Eq. 6).
        lstm_activation (`str`, defaults to "gelu"): `act` of "linear" and "ffn" ("gelu" or "tanh").
        share_hidden (`bool`, defaults to False): one hidden module per stack instead of per layer.
        decoder_merge (`str`, defaults to "add"): s + x' ("add") or [s; x'] ("concat", a 3d input).
    """

    model_type = "dwlstm-rnn"


class DepthWiseRnn(nn.Module):
    """One step over depth: (x, o_{l-1}) -> o_l = hidden([x ; o_{l-1}]). The hidden module is one
    per layer, or one per stack with `share_hidden`; `scope` = (stack, layer index, ...) names this
    step's place."""

    def __init__(
        self,
        config: DepthWiseRnnConfig,
        input_dim: int,
        shared_modules: SharedModules,
        scope: tuple,
    ):
        super().__init__()
        hidden_scope = scope[:1] if config.share_hidden else scope
        hidden, owns_hidden = shared_modules.get(
            ("hidden", input_dim, *hidden_scope),
            lambda: LSTM_HIDDEN_CLASSES[config.lstm_hidden](input_dim, config),
        )
        attach_shared(self, "hidden", hidden, owns_hidden)

    @staticmethod
    def initial_state(embeddings: torch.Tensor) -> LayerState:
        return LayerState(output=embeddings)  # o_0 = embeddings, no cell

    def forward(self, x: torch.Tensor, state: LayerState) -> LayerState:
        return LayerState(output=self.hidden(torch.cat([x, state.output], dim=-1)))  # (B, T, d)


class DepthWiseRnnEncoderLayer(DepthWiseLstmEncoderLayer):
    """a = SelfAttn(o_{l-1});  o_l = hidden([a ; o_{l-1}]): the depth-wise LSTM encoder layer with this step."""  # noqa: E501

    step_class, step_name = DepthWiseRnn, "depthwise_rnn"


class DepthWiseRnnDecoderLayer(DepthWiseLstmDecoderLayer):
    """s = MaskedSelfAttn(o_{l-1});  x = CrossAttn(s + o_{l-1}, enc);  o_l = hidden([merge(s, x) ; o_{l-1}])
    with merge = s + x ("add") or [s; x] ("concat"): the depth-wise LSTM decoder layer with this step."""  # noqa: E501

    step_class, step_name = DepthWiseRnn, "depthwise_rnn"


class DepthWiseRnnModel(TranslationTransformerModel):
    config_class = DepthWiseRnnConfig
    encoder_layer_class, decoder_layer_class = DepthWiseRnnEncoderLayer, DepthWiseRnnDecoderLayer


class DepthWiseRnnForConditionalGeneration(TranslationTransformerForConditionalGeneration):
    config_class = DepthWiseRnnConfig
    base_model_class = DepthWiseRnnModel


MEMBER = FamilyMember(
    config_class=DepthWiseRnnConfig,
    model_class=DepthWiseRnnModel,
    generation_class=DepthWiseRnnForConditionalGeneration,
    name="depth-wise RNN Transformer (Xu et al., the depth-wise LSTM without gates or cell)",
    citations=(XU_2024, XU_2020),
    card_fields=("lstm_hidden", "lstm_activation", "share_hidden", "decoder_merge"),
    # the hidden computation: fc1, fc2 (ffn, glu) or projection (linear)
    projections=("fc1", "fc2", "projection"),
    presets={"depthwise-rnn": {}},
)

__all__ = ["DepthWiseRnnConfig", "DepthWiseRnnModel", "DepthWiseRnnForConditionalGeneration"]
