"""modeling_dwlstm: the Transformer with depth-wise LSTMs and its baselines, native in Hugging Face Transformers.

Importing the package registers every member with `AutoConfig`, `AutoModel` and
`AutoModelForSeq2SeqLM`, marks the classes so that `save_pretrained` writes `auto_map` and copies the
code (remote-code loading), and registers the `translation` pipeline that transformers 5 removed.
"""

from transformers import AutoConfig, AutoModel, AutoModelForSeq2SeqLM

from .configuration_dwlstm import (
    DepthWiseRnnConfig,
    DlclConfig,
    DwLstmConfig,
    HighwayTransformerConfig,
    ResidualTransformerConfig,
    TranslationTransformerConfig,
    TransparentAttentionConfig,
)
from .modeling_dlcl import DlclForConditionalGeneration, DlclModel, plot_dlcl_weights
from .modeling_dwlstm import DwLstmForConditionalGeneration, DwLstmModel, DwLstmPreTrainedModel, LayerState
from .modeling_highway import HighwayTransformerForConditionalGeneration, HighwayTransformerModel
from .modeling_residual import ResidualTransformerForConditionalGeneration, ResidualTransformerModel
from .modeling_rnn import DepthWiseRnnForConditionalGeneration, DepthWiseRnnModel
from .modeling_transparent import TransparentAttentionForConditionalGeneration, TransparentAttentionModel
from .pipeline_translation import TranslationPipeline, register_translation_pipeline

# (config, bare model, translation model) of every family member.
FAMILY = [
    (DwLstmConfig, DwLstmModel, DwLstmForConditionalGeneration),
    (ResidualTransformerConfig, ResidualTransformerModel, ResidualTransformerForConditionalGeneration),
    (HighwayTransformerConfig, HighwayTransformerModel, HighwayTransformerForConditionalGeneration),
    (DepthWiseRnnConfig, DepthWiseRnnModel, DepthWiseRnnForConditionalGeneration),
    (DlclConfig, DlclModel, DlclForConditionalGeneration),
    (TransparentAttentionConfig, TransparentAttentionModel, TransparentAttentionForConditionalGeneration),
]

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
    "TranslationTransformerConfig",
    "DwLstmConfig",
    "DwLstmPreTrainedModel",
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
    "plot_dlcl_weights",
    "TransparentAttentionConfig",
    "TransparentAttentionModel",
    "TransparentAttentionForConditionalGeneration",
]
