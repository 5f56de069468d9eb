"""ReZero (Bachlechner et al. 2020, "ReZero is All You Need: Fast Convergence at Large Depth").

The residual Transformer without LayerNorm in its sub-layer connections: each sub-layer F (attention
or FFN) is added to the residual path scaled by its own learned scalar, which starts at 0,

    x = x + a * dropout(F(x)),    a initialised to 0        (Bachlechner et al. Eq. 2)

so at initialisation every layer is the identity and the stack passes its embeddings through
unchanged. As every member, each stack still ends with the skeleton's final LayerNorm.

The whole member is this file: config, connection, layers, models.
"""

from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn
from transformers import initialization as init

from .configuration_translation import FamilyMember, TranslationTransformerConfig
from .modeling_residual import VASWANI_2017, ResidualDecoderLayer, ResidualEncoderLayer
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


class ReZeroTransformerConfig(TranslationTransformerConfig):
    r"""
    ReZero Transformer (Bachlechner et al. 2020): residual sub-layers x + a * F(x) with one learned
    scalar a per sub-layer, initialised to 0, and no LayerNorm around the sub-layers. No fields of
    its own.
    """

    model_type = "dwlstm-rezero"


class ReZeroResidual(nn.Module):
    """x = x + a * dropout(F(x)); the sub-layer reads x as is. `residual_weight` is a, starting at 0."""  # noqa: E501

    def __init__(self, config: TranslationTransformerConfig):
        super().__init__()
        self.residual_weight = nn.Parameter(torch.zeros(()))
        self.dropout = config.dropout

    def init_parameters(self):
        init.zeros_(self.residual_weight)  # every layer starts as the identity

    def sublayer_input(self, x: torch.Tensor) -> torch.Tensor:
        return x

    def combine(self, x: torch.Tensor, sublayer_output: torch.Tensor) -> torch.Tensor:
        return x + self.residual_weight * F.dropout(sublayer_output, self.dropout, self.training)


class ReZeroEncoderLayer(ResidualEncoderLayer):
    residual_class = ReZeroResidual


class ReZeroDecoderLayer(ResidualDecoderLayer):
    residual_class = ReZeroResidual


class ReZeroTransformerModel(TranslationTransformerModel):
    config_class = ReZeroTransformerConfig
    encoder_layer_class, decoder_layer_class = ReZeroEncoderLayer, ReZeroDecoderLayer


class ReZeroTransformerForConditionalGeneration(TranslationTransformerForConditionalGeneration):
    config_class = ReZeroTransformerConfig
    base_model_class = ReZeroTransformerModel


BACHLECHNER_2020 = """@article{bachlechner2020rezero,
  title   = {{ReZero} is All You Need: Fast Convergence at Large Depth},
  author  = {Bachlechner, Thomas and Majumder, Bodhisattwa Prasad and Mao, Huanru Henry and Cottrell, Garrison W.
             and McAuley, Julian},
  journal = {arXiv preprint arXiv:2003.04887},
  year    = {2020}
}"""  # noqa: E501

MEMBER = FamilyMember(
    config_class=ReZeroTransformerConfig,
    model_class=ReZeroTransformerModel,
    generation_class=ReZeroTransformerForConditionalGeneration,
    name="ReZero Transformer (Bachlechner et al. 2020)",
    citations=(BACHLECHNER_2020, VASWANI_2017),
    projections=("fc1", "fc2"),  # the FFN
    presets={"rezero": {}},
)

__all__ = [
    "ReZeroTransformerConfig",
    "ReZeroTransformerModel",
    "ReZeroTransformerForConditionalGeneration",
]
