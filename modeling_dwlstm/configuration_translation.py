"""The configuration every member of the modeling_dwlstm family shares, and the record of a member.

Every member is the same encoder-decoder NMT Transformer skeleton (``TranslationTransformerConfig``:
tied joint-BPE embeddings scaled by sqrt(d_model), sinusoidal or learned positions, multi-head
attention, a final LayerNorm on each stack, label-smoothed cross-entropy; the modeling side is
``modeling_translation``). Members differ only in how layers are connected; each adds its own fields
in a small config subclass that lives in its own ``modeling_*.py`` file, beside its layers and its
``FamilyMember`` record.

Field names follow Marian's config. Defaults are the Transformer-base setting of the papers (d_model
512, ffn_dim 2048, 8 heads, 6+6 layers, dropout 0.1) with the joint vocabulary of Xu et al. 2024's
WMT14 En-De setup (35,603 tokens). Invalid values raise ``ValueError`` naming the field.
"""

import difflib
import re
import sys
from dataclasses import dataclass, field, fields

from transformers import PreTrainedConfig
from transformers.utils import logging

logger = logging.get_logger(__name__)

# The special token ids of every family tokenizer (`tokenization_dwlstm.SPECIAL_TOKENS` is in this
# order) and the config defaults; the decoder starts from the pad id, as in Marian.
BOS_ID, PAD_ID, EOS_ID, UNK_ID = 0, 1, 2, 3
# translation_en_to_de: the pipeline reads the languages from it
DIRECTION_TASK = re.compile(r"translation_.+_to_.+")


def check_choice(name: str, value, allowed: tuple):
    if value not in allowed:
        raise ValueError(f"`{name}` must be one of {list(allowed)}, got {value!r}.")


def check_int(name: str, value, minimum: int):
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"`{name}` must be an integer >= {minimum}, got {value!r}.")


def check_probability(name: str, value):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
        raise ValueError(f"`{name}` must be a number in [0, 1), got {value!r}.")


@dataclass(frozen=True)
class FamilyMember:
    """Everything the package says about one member, declared once, as `MEMBER` in its modeling
    file. `FAMILY` (Auto registration), `paper_configs` (hub_configs/) and the model card read
    it."""

    config_class: type
    model_class: type
    generation_class: type
    name: str  # the card's "A {name} translation model"
    citations: tuple[str, ...]  # BibTeX entries
    card_fields: tuple[str, ...] = ()  # the member's own config fields, shown after the shared ones
    # Its projections beyond the attention's (lora.ATTENTION_PROJECTIONS), by the names PEFT's LoRA
    # `target_modules` matches; which of them a model has can depend on its options.
    projections: tuple[str, ...] = ()
    # hub_configs/ name -> config fields (paper_configs)
    presets: dict = field(default_factory=dict)
    # preset -> [(size, encoder, decoder layers)]; default every size x depth
    hub_depths: dict = field(default_factory=dict)


class TranslationTransformerConfig(PreTrainedConfig):
    r"""
    The part every family member shares: an encoder-decoder Transformer for translation.

    Args:
        vocab_size (`int`, defaults to 35603): size of the joint (source + target) vocabulary.
        d_model (`int`, defaults to 512): width of every layer.
        encoder_layers / decoder_layers (`int`, defaults to 6): depth of each stack.
        encoder_attention_heads / decoder_attention_heads (`int`, defaults to 8).
        ffn_dim (`int`, defaults to 2048): d_ff, the inner width of the residual FFN and of the
            depth-wise LSTM's hidden computation.
        activation_function (`str`, defaults to "relu"): activation of the residual FFN. dropout
        (`float`, defaults to 0.1): on embeddings and on every sub-layer output. attention_dropout
        (`float`, defaults to 0.0): on attention probabilities. activation_dropout (`float`,
        defaults to 0.0): after the activation inside FFN / LSTM hidden. max_position_embeddings
        (`int`, defaults to 1024): longest sequence the positions cover. position_embedding_type
        (`str`, defaults to "sinusoidal"): "sinusoidal" (Vaswani et al.) or "learned".
        scale_embedding (`bool`, defaults to True): multiply token embeddings by sqrt(d_model).
        label_smoothing (`float`, defaults to 0.1): of the training cross-entropy (papers: 0.1).
        language_pairs (`list[str]`, defaults to []): translation directions the model was
        trained for,
            e.g. ["en-de"]; each becomes a `translation_en_to_de` task of the saved model's
            pipeline. Their target languages, sorted, are `target_languages`: the rows of the
            language-aware parameters.
        language_aware_norm (`bool`, defaults to False): LaLN (Zhang et al. 2020): every LayerNorm
            of the model, the depth-wise LSTM's gate and hidden ones included, gets one gain and
            bias per target language,
            LN_t(x) = g_t * (x - mean) / std + b_t, selected by the sentence's target language.
        language_aware_transform (`bool`, defaults to False): LaLT (Zhang et al. 2020): the encoder
            output H becomes H W_t, one d_model x d_model matrix per target language t (no bias),
            before the decoder attends to it.
        language_tag_ids (`dict[str, int]`, defaults to {}): the token id of each language's tag
            `<2xx>` in the tokenizer (`tokenization_dwlstm.tokenizer_model_kwargs` fills it). A
            language-aware model reads each sentence's target language from the tag its source
            starts with.
        pad_token_id / bos_token_id / eos_token_id / decoder_start_token_id: special token ids; the
            decoder starts from `decoder_start_token_id` (defaults to the pad id, as in Marian).
        tie_word_embeddings (`bool`, defaults to True): share the output projection with the
        embeddings.
    """

    model_type = "translation-transformer"  # the skeleton; each member has its own (modeling_*.py)
    # Output keys Trainer leaves out of evaluation logits: the cache, named `cache` from
    # transformers 5.24 on.
    keys_to_ignore_at_inference = ["past_key_values", "cache"]
    attribute_map = {
        "hidden_size": "d_model",
        "num_attention_heads": "encoder_attention_heads",
        "num_hidden_layers": "encoder_layers",
    }

    vocab_size: int = 35603
    d_model: int = 512
    encoder_layers: int = 6
    decoder_layers: int = 6
    encoder_attention_heads: int = 8
    decoder_attention_heads: int = 8
    ffn_dim: int = 2048
    activation_function: str = "relu"
    dropout: float = 0.1
    attention_dropout: float = 0.0
    activation_dropout: float = 0.0
    max_position_embeddings: int = 1024
    position_embedding_type: str = "sinusoidal"
    scale_embedding: bool = True
    label_smoothing: float = 0.1
    language_pairs: list[str] | None = None
    language_aware_norm: bool = False
    language_aware_transform: bool = False
    language_tag_ids: dict[str, int] | None = None
    pad_token_id: int | None = PAD_ID
    bos_token_id: int | None = BOS_ID
    eos_token_id: int | None = EOS_ID
    decoder_start_token_id: int | None = None
    tie_word_embeddings: bool = True
    use_cache: bool = True
    is_encoder_decoder: bool = True

    def __post_init__(self, **kwargs):
        self._reject_misspelled_fields(kwargs)
        if kwargs.get("custom_pipelines"):
            kwargs["custom_pipelines"] = pipelines_not_served_in_process(kwargs["custom_pipelines"])
        if self.decoder_start_token_id is None:
            self.decoder_start_token_id = self.pad_token_id
        if self.language_pairs is None:
            self.language_pairs = []
        if self.language_tag_ids is None:
            self.language_tag_ids = {}
        super().__post_init__(**kwargs)
        self.check_values()
        self._warn_unused_fields()

    @classmethod
    def from_pretrained(cls, *args, **kwargs):
        """`PreTrainedConfig.from_pretrained`, which `pipeline(task, model=...)` calls for remote
        code (the task comes as `_from_pipeline`). A direction task the saved `custom_pipelines`
        does not list ("translation_de_to_fr") is added to this config, so that transformers hands
        it to the model's own pipeline, which translates it or names the directions the model has,
        instead of answering that transformers removed the task."""
        loaded = super().from_pretrained(*args, **kwargs)
        # (config, unused) with return_unused_kwargs
        config = loaded[0] if isinstance(loaded, tuple) else loaded
        config.route_direction_task(kwargs.get("_from_pipeline"))
        return loaded

    def route_direction_task(self, task: str | None):
        """Serve `task` ("translation_xx_to_yy") with the pipeline that serves "translation" in
        `custom_pipelines`."""
        pipelines = getattr(self, "custom_pipelines", None) or {}
        if (
            isinstance(task, str)
            and DIRECTION_TASK.fullmatch(task)
            and "translation" in pipelines
            and task not in pipelines
        ):
            self.custom_pipelines = {**pipelines, task: dict(pipelines["translation"])}

    @classmethod
    def from_dict(cls, config_dict: dict, **kwargs):
        """Refuse a checkpoint of another family member: loading it would silently re-initialise
        weights."""
        stored_type = config_dict.get("model_type")
        if stored_type and stored_type != cls.model_type:
            raise ValueError(
                f"This checkpoint is a {stored_type!r} model, but {cls.__name__} builds "
                f"{cls.model_type!r} models. Load it with AutoModelForSeq2SeqLM / AutoConfig, or "
                f"the classes registered for {stored_type!r}."
            )
        return super().from_dict(config_dict, **kwargs)

    @classmethod
    def _reject_misspelled_fields(cls, kwargs: dict):
        """`share_gate="none"` would otherwise be stored as an unused attribute and silently
        ignored."""
        known = [f.name for f in fields(cls)]
        for key in kwargs:
            close = difflib.get_close_matches(key, known, n=1, cutoff=0.85)
            if close and key not in known:
                raise ValueError(f"Unknown config field `{key}`; did you mean `{close[0]}`?")

    def unused_fields(self) -> tuple[str, ...]:
        """The fields this configuration leaves unread (a member overrides it: the depth-wise LSTM,
        for one, has no FFN activation). The paper presets and model cards leave them out; a
        non-default value set in one warns."""
        return ()

    def _warn_unused_fields(self):
        defaults = {f.name: f.default for f in fields(type(self))}
        for name in self.unused_fields():
            if getattr(self, name) != defaults[name]:
                logger.warning(
                    f"{type(self).__name__}: `{name}={getattr(self, name)!r}` has no effect with "
                    "these "
                    "settings (see the config's docstring)."
                )

    def check_values(self):
        """Raise a ValueError naming the first field whose value the model cannot be built with."""
        for name in (
            "vocab_size",
            "d_model",
            "encoder_attention_heads",
            "decoder_attention_heads",
            "ffn_dim",
            "encoder_layers",
            "decoder_layers",
            "max_position_embeddings",
        ):
            check_int(name, getattr(self, name), 1)
        for name in ("dropout", "attention_dropout", "activation_dropout", "label_smoothing"):
            check_probability(name, getattr(self, name))
        for name in ("encoder_attention_heads", "decoder_attention_heads"):
            if self.d_model % getattr(self, name):
                raise ValueError(
                    f"`d_model` ({self.d_model}) must be divisible by `{name}` ("
                    f"{getattr(self, name)})."
                )
        check_choice(
            "position_embedding_type", self.position_embedding_type, ("sinusoidal", "learned")
        )
        check_choice(
            "activation_function", self.activation_function, ("relu", "gelu", "tanh", "silu")
        )
        for name in ("pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id"):
            value = getattr(self, name)
            if value is not None and (
                isinstance(value, bool)
                or not isinstance(value, int)
                or not 0 <= value < self.vocab_size
            ):
                raise ValueError(
                    f"`{name}` must be None or an id in [0, vocab_size={self.vocab_size}), got "
                    f"{value!r}."
                )
        if self.pad_token_id is None:
            raise ValueError(
                "`pad_token_id` must be set: padding and the decoder start depend on it."
            )
        for pair in self.language_pairs:
            if not isinstance(pair, str) or pair.count("-") != 1 or "" in pair.split("-"):
                raise ValueError(f"`language_pairs` entries look like 'en-de', got {pair!r}.")
        self.check_language_awareness()

    @property
    def target_languages(self) -> list[str]:
        """The target languages of `language_pairs`, sorted: row t of every language-aware parameter
        is the t-th."""
        return sorted({pair.split("-")[1] for pair in self.language_pairs})

    @property
    def language_aware(self) -> bool:
        """Whether some parameters are selected by the target language (LaLN or LaLT)."""
        return bool(self.language_aware_norm or self.language_aware_transform)

    def check_language_awareness(self):
        """LaLN and LaLT need the target languages (their parameter rows) and, once a tokenizer is
        known, its tags."""
        for name in ("language_aware_norm", "language_aware_transform"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"`{name}` must be True or False, got {getattr(self, name)!r}.")
        tags = self.language_tag_ids
        if not isinstance(tags, dict) or not all(
            isinstance(code, str)
            and not isinstance(token, bool)
            and isinstance(token, int)
            and 0 <= token < self.vocab_size
            for code, token in tags.items()
        ):
            raise ValueError(
                "`language_tag_ids` maps language codes to the token ids of their <2xx> tags, "
                f"ids in [0, vocab_size={self.vocab_size}); got {tags!r}."
            )
        if not self.language_aware:
            return
        option = "language_aware_norm" if self.language_aware_norm else "language_aware_transform"
        if not self.target_languages:
            raise ValueError(
                f"`{option}=True` selects parameters by the target language, and this model has "
                "no target "
                "languages: set `language_pairs` to its directions (e.g. ['en-de', 'de-en', "
                "'en-fr', 'fr-en']) and "
                "`language_tag_ids` from its tokenizer (tokenizer_model_kwargs); "
                "train_translation.py "
                "--language_pairs does both."
            )
        untagged = [language for language in self.target_languages if language not in tags]
        if tags and untagged:
            raise ValueError(
                f"`{option}=True` reads the target language from the tag in front of the source, "
                "and "
                f"`language_tag_ids` has no tag for the target languages {untagged} (it has "
                f"{sorted(tags)}): reserve <2xx> tags for every target language in the tokenizer "
                "(train_tokenizer.py --language_pairs)."
            )


def pipelines_not_served_in_process(custom_pipelines: dict) -> dict:
    """`custom_pipelines` without the translation tasks, when this process's pipeline registry
    serves "translation" (`import modeling_dwlstm` registers it): transformers demands
    `trust_remote_code` for every task listed there, even one it could serve with the package's own
    pipeline. The model's direction tasks ("translation_en_to_de") become aliases of "translation",
    as `register_translation_pairs` makes them. A process without the package keeps every entry."""
    # not imported: nothing registered, and no import cost
    pipelines = sys.modules.get("transformers.pipelines")
    registry = getattr(pipelines, "PIPELINE_REGISTRY", None)
    if registry is None or "translation" not in registry.supported_tasks:
        return custom_pipelines
    for task in custom_pipelines:
        if DIRECTION_TASK.fullmatch(task):
            registry.task_aliases.setdefault(task, "translation")
    return {
        task: entry
        for task, entry in custom_pipelines.items()
        if task != "translation" and registry.task_aliases.get(task) != "translation"
    }


__all__ = [
    "BOS_ID",
    "PAD_ID",
    "EOS_ID",
    "UNK_ID",
    "FamilyMember",
    "TranslationTransformerConfig",
    "check_choice",
    "check_int",
    "check_probability",
    "pipelines_not_served_in_process",
]
