"""The language-aware options every member can take (Zhang et al. 2020): LaLN, a LayerNorm with one
gain and bias per target language, and LaLT, one projection of the encoder output per target
language.

A multilingual model names the target language by a tag <2xx> in front of every source; with LaLN
and LaLT some parameters have one row per target language (the sorted `config.target_languages`),
and each sentence uses its language's row. The model owns one `TargetLanguage`, which the encoder
sets from the tags and the decoder from the encoder output (generate() expands it for beams with the
encoder states); every module that reads it (`reads_target_language`) holds a reference, given at
build time. What it holds is per thread, so that threads translating with one model (a server's)
each read their own.
"""

import threading

import torch
import torch.nn.functional as F
from torch import nn
from transformers import initialization as init

from .configuration_translation import TranslationTransformerConfig


class NoTargetLanguage(nn.Module):
    """The target language of a model without language-aware parameters: nothing to read, nothing
    to keep."""

    def from_source(
        self, input_ids: torch.Tensor | None, attention_mask: torch.Tensor | None
    ) -> None:
        return None

    def use(self, rows: torch.Tensor | None, rows_per_sentence: int = 1):
        pass

    def share_with(self, model: nn.Module):
        """Give every module of `model` that reads the target language (`reads_target_language`)
        this one, as a plain reference: the model owns it."""
        for module in model.modules():
            if getattr(module, "reads_target_language", False):
                object.__setattr__(module, "target_language", self)


class TargetLanguage(NoTargetLanguage):
    """Each sentence's target language in the forward pass under way, as `rows` (batch,): the index
    of its language in `config.target_languages`, read from the tag `<2xx>` its source starts with
    (`config.language_tag_ids`).

    `rows` is the calling thread's: two threads running one model with different target languages
    each read the rows their own forward pass set. A thread that set none reads the latest set by
    any thread: the autograd engine's own threads (one per GPU), where a checkpointed layer runs
    again in the backward pass of the step just taken."""

    def __init__(self, config: TranslationTransformerConfig):
        super().__init__()
        self.languages, self.tag_of = config.target_languages, dict(config.language_tag_ids)
        # (languages,), -1 where unknown
        self.register_buffer("tag_ids", self.build_tag_ids(), persistent=False)
        self.per_thread, self.latest = threading.local(), None

    @property
    def rows(self) -> torch.Tensor | None:
        return getattr(self.per_thread, "rows", self.latest)

    # deepcopy and pickling: a threading.local is neither; a copy starts with no rows
    def __getstate__(self):
        return {**super().__getstate__(), "per_thread": None, "latest": None}

    def __setstate__(self, state):
        super().__setstate__(state)
        self.per_thread = threading.local()

    def build_tag_ids(self) -> torch.Tensor:
        return torch.tensor(
            [self.tag_of.get(language, -1) for language in self.languages], dtype=torch.long
        )

    def init_parameters(self):
        init.copy_(self.tag_ids, self.build_tag_ids())

    def from_source(self, input_ids, attention_mask):
        if input_ids is None:
            raise ValueError(
                "A language-aware model reads the target language from the tag each source "
                "starts with: pass `input_ids`, not only `inputs_embeds`."
            )
        first = (
            attention_mask.long().argmax(-1)
            if attention_mask is not None
            else input_ids.new_zeros(len(input_ids))
        )
        # (B, 1): the first real token (left padding too)
        first_tokens = input_ids.gather(1, first[:, None])
        is_tag = first_tokens == self.tag_ids  # (B, languages)
        check_target_tags(is_tag, first_tokens[:, 0], self.languages, self.tag_of)
        self.use(is_tag.long().argmax(-1))
        return self.rows

    def use(self, rows, rows_per_sentence=1):
        """Set the rows' target languages (`rows_per_sentence` > 1: one per sentence, its
        beams')."""
        if rows is None:
            raise ValueError(
                "This language-aware model's decoder needs each sentence's target language, "
                "which the encoder returns with its output (`target_language`): pass "
                "`encoder_outputs` as `model.get_encoder()(input_ids=...)` returns them, or "
                "`input_ids` instead of them."
            )
        if rows_per_sentence > 1:
            rows = rows.repeat_interleave(rows_per_sentence)
        self.per_thread.rows = self.latest = rows


def make_target_language(config: TranslationTransformerConfig) -> NoTargetLanguage:
    """The model's one `TargetLanguage`, or `NoTargetLanguage` without language-aware parameters."""
    return TargetLanguage(config) if config.language_aware else NoTargetLanguage()


def check_target_tags(
    is_tag: torch.Tensor, first_tokens: torch.Tensor, languages: list[str], tag_of: dict
):
    """Every source must start with the tag of a target language; read on the CPU only, as
    `check_token_ids`."""
    if torch.compiler.is_compiling():
        return
    if is_tag.device.type != "cpu":
        torch._assert_async(
            is_tag.any(-1).all(), "a source does not start with a target-language tag"
        )
        return
    untagged = (~is_tag.any(-1)).nonzero().flatten().tolist()
    if not untagged:
        return
    missing = [language for language in languages if language not in tag_of]
    if missing:
        raise ValueError(
            f"The config has no `language_tag_ids` for the target languages {missing}: build it "
            "with "
            "tokenization_dwlstm.tokenizer_model_kwargs(tokenizer), which names the tokenizer's "
            "tags."
        )
    raise ValueError(
        f"Source sentence {untagged[0]} starts with token {int(first_tokens[untagged[0]])}, not "
        "the tag of one of this "
        f"model's target languages {dict((language, tag_of[language]) for language in languages)}"
        f" ({len(untagged)} "
        "such sentences): a language-aware model reads the target language from the <2xx> tag in "
        "front of every "
        "source (the pipeline's tgt_lang and evaluate_translation.py --language_pairs put it "
        "there)."
    )


class LanguageAwareLayerNorm(nn.Module):
    """LaLN (Zhang et al. 2020): LN_t(x) = g_t * (x - mean(x)) / std(x) + b_t, the gain and bias of the
    sentence's target language t. `weight`, `bias`: (languages, dim), initialised to 1 and 0 as
    LayerNorm's."""  # noqa: E501

    reads_target_language = True

    def __init__(self, num_languages: int, dim: int, eps: float = 1e-5):
        super().__init__()
        self.normalized_shape, self.eps = (dim,), eps
        self.weight = nn.Parameter(torch.ones(num_languages, dim))
        self.bias = nn.Parameter(torch.zeros(num_languages, dim))

    def init_parameters(self):
        init.ones_(self.weight)
        init.zeros_(self.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, ..., dim)
        rows = self.target_language.rows  # (B,)
        shape = (len(rows),) + (1,) * (x.dim() - 2) + self.normalized_shape
        normalized = F.layer_norm(x, self.normalized_shape, eps=self.eps)
        return normalized * self.weight[rows].view(shape) + self.bias[rows].view(shape)


def make_layer_norm(config: TranslationTransformerConfig, dim: int) -> nn.Module:
    """Every LayerNorm of every member: `nn.LayerNorm(dim)`, or with `language_aware_norm` its
    language-aware form."""
    if config.language_aware_norm:
        return LanguageAwareLayerNorm(len(config.target_languages), dim)
    return nn.LayerNorm(dim)


def make_language_transform(config: TranslationTransformerConfig) -> nn.Module:
    """What the encoder output goes through: LaLT with `language_aware_transform`, else nothing."""
    return LanguageAwareTransform(config) if config.language_aware_transform else nn.Identity()


class LanguageAwareTransform(nn.Module):
    """LaLT (Zhang et al. 2020): H_t = H W_t, one d x d projection per target language t, no bias
    (as in their code), applied to the encoder output. Each language's rows of the batch go through
    its own `nn.Linear`."""

    reads_target_language = True

    def __init__(self, config: TranslationTransformerConfig):
        super().__init__()
        d = config.d_model
        self.projections = nn.ModuleList(
            nn.Linear(d, d, bias=False) for _ in config.target_languages
        )

    # (B, S, d), or (B, S, L+1, d) for every encoder layer
    def forward(self, states: torch.Tensor) -> torch.Tensor:
        rows = self.target_language.rows  # (B,)
        # The group sizes are read on the host: one sync per encoder pass (once per generate() call
        # or training step), after which the GPU waits only while the next kernel is queued.
        # Avoiding it would take a d x d matrix gathered per sentence ((B, d, d) more memory, as
        # Zhang et al.'s code does) or every language's matrix run on the whole batch.
        counts = torch.bincount(rows, minlength=len(self.projections)).tolist()
        # the sentences grouped by language, each group in batch order
        order = rows.argsort(stable=True)
        groups = states.index_select(0, order).split(counts)
        projected = [
            projection(group) for projection, group in zip(self.projections, groups) if len(group)
        ]
        # `or`: an empty batch
        return torch.cat(projected or [states]).index_select(0, order.argsort())


__all__ = [
    "LanguageAwareLayerNorm",
    "LanguageAwareTransform",
    "NoTargetLanguage",
    "TargetLanguage",
    "make_language_transform",
    "make_layer_norm",
    "make_target_language",
]
