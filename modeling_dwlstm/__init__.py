"""modeling_dwlstm: the Transformer with depth-wise LSTMs and its baselines, native in Transformers.

Importing the package registers every member with `AutoConfig`, `AutoModel` and
`AutoModelForSeq2SeqLM`, marks the classes so that `save_pretrained` copies their code beside the
weights (remote code), and registers the `translation` pipeline that transformers 5 removed.

When `trust_remote_code=True` is needed:

- in a process that has imported `modeling_dwlstm`: never (the Auto classes and `pipeline()` resolve
  to the registered classes, and the flag, if given, changes nothing);
- in a process that has not (a fresh notebook, transformers' own example scripts): for every Auto
  class and `pipeline()`, which then run the copy of the code saved beside the weights. Without it
  they raise transformers' ValueError, and `AutoTokenizer` asks "Do you wish to run the custom
  code?" about the config's code (waiting 15 s); `trust_remote_code=False` skips the question: the
  tokenizer runs none.
"""

from transformers import AutoConfig, AutoModel, AutoModelForSeq2SeqLM

from . import (
    _import_noise,  # noqa: F401  (first: transformers' model code imported without torchao's noise)
    modeling_dlcl,
    modeling_dwlstm,
    modeling_highway,
    modeling_residual,
    modeling_rezero,
    modeling_rnn,
    modeling_transparent,
)
from .configuration_translation import FamilyMember, TranslationTransformerConfig
from .modeling_dlcl import DlclConfig, DlclForConditionalGeneration, DlclModel
from .modeling_dwlstm import DwLstmConfig, DwLstmForConditionalGeneration, DwLstmModel
from .modeling_highway import (
    HighwayTransformerConfig,
    HighwayTransformerForConditionalGeneration,
    HighwayTransformerModel,
)
from .modeling_residual import (
    ResidualTransformerConfig,
    ResidualTransformerForConditionalGeneration,
    ResidualTransformerModel,
)
from .modeling_rezero import (
    ReZeroTransformerConfig,
    ReZeroTransformerForConditionalGeneration,
    ReZeroTransformerModel,
)
from .modeling_rnn import (
    DepthWiseRnnConfig,
    DepthWiseRnnForConditionalGeneration,
    DepthWiseRnnModel,
)
from .modeling_translation import (
    LayerState,
    TranslationTransformerForConditionalGeneration,
    TranslationTransformerModel,
    TranslationTransformerPreTrainedModel,
)
from .modeling_transparent import (
    TransparentAttentionConfig,
    TransparentAttentionForConditionalGeneration,
    TransparentAttentionModel,
)
from .pipeline_translation import TranslationPipeline, register_translation_pipeline

# One record per member (`MEMBER` in its modeling file): a new member adds its module here.
MEMBERS = [
    module.MEMBER
    for module in (
        modeling_dwlstm,
        modeling_residual,
        modeling_highway,
        modeling_rnn,
        modeling_dlcl,
        modeling_transparent,
        modeling_rezero,
    )
]
# (config, bare model, translation model) of every family member.
FAMILY = [(member.config_class, member.model_class, member.generation_class) for member in MEMBERS]

for _config_class, _model_class, _generation_class in FAMILY:
    AutoConfig.register(_config_class.model_type, _config_class, exist_ok=True)
    AutoModel.register(_config_class, _model_class, exist_ok=True)
    AutoModelForSeq2SeqLM.register(_config_class, _generation_class, exist_ok=True)
    _config_class.register_for_auto_class()
    _model_class.register_for_auto_class("AutoModel")
    _generation_class.register_for_auto_class("AutoModelForSeq2SeqLM")

register_translation_pipeline()

__all__ = [
    "FAMILY",
    "MEMBERS",
    "FamilyMember",
    "TranslationTransformerConfig",
    "TranslationTransformerPreTrainedModel",
    "TranslationTransformerModel",
    "TranslationTransformerForConditionalGeneration",
    "DwLstmConfig",
    "DwLstmModel",
    "DwLstmForConditionalGeneration",
    "ResidualTransformerConfig",
    "ResidualTransformerModel",
    "ResidualTransformerForConditionalGeneration",
    "HighwayTransformerConfig",
    "HighwayTransformerModel",
    "HighwayTransformerForConditionalGeneration",
    "DepthWiseRnnConfig",
    "DepthWiseRnnModel",
    "DepthWiseRnnForConditionalGeneration",
    "LayerState",
    "TranslationPipeline",
    "DlclConfig",
    "DlclModel",
    "DlclForConditionalGeneration",
    "TransparentAttentionConfig",
    "TransparentAttentionModel",
    "TransparentAttentionForConditionalGeneration",
    "ReZeroTransformerConfig",
    "ReZeroTransformerModel",
    "ReZeroTransformerForConditionalGeneration",
]
