"""Joint BPE tokenizer for the modeling_dwlstm translation models.

The papers train one BPE over source and target together ("joint BPE", shared embeddings); the
multilingual setup marks the target language with a tag such as ``<2de>`` on the source. This module
trains such a tokenizer with `tokenizers` and wraps it as a `PreTrainedTokenizerFast`. Its choices:

- ``<s>`` = 0, ``<pad>`` = 1, ``</s>`` = 2, ``<unk>`` = 3: the config defaults (the decoder starts
  from pad, as in Marian); the language tags follow as special tokens, never split;
- NFC normalization, so that "ü" typed as u + combining diaeresis is the precomposed "ü"'s token,
  and nothing shown changes (NFKC would rewrite ligatures and full-width forms; tokenizers saved
  before have no normalizer);
- Metaspace pre-tokenization with isolated punctuation: decoding restores the spacing by itself;
- every sequence ends with ``</s>``: the encoder sees where the sentence ends, the decoder learns to
  stop.
"""

import re
from collections.abc import Iterable, Iterator, Sequence

from tokenizers import (
    Tokenizer,
    decoders,
    models,
    normalizers,
    pre_tokenizers,
    processors,
    trainers,
)
from transformers import PreTrainedTokenizerFast

from .configuration_translation import BOS_ID, EOS_ID, PAD_ID, UNK_ID

BOS, PAD, EOS, UNK = "<s>", "<pad>", "</s>", "<unk>"
SPECIAL_TOKENS = tuple(
    token for _, token in sorted({BOS_ID: BOS, PAD_ID: PAD, EOS_ID: EOS, UNK_ID: UNK}.items())
)  # position = id
LANGUAGE_TAG = re.compile(r"<2[a-z]{2,3}(?:_[A-Za-z0-9]+)*>")  # <2de>, <2yue>, <2zh_Hant>


def train_joint_bpe_tokenizer(
    texts: Iterable[str],
    vocab_size: int,
    language_tags: Sequence[str] = (),
    min_frequency: int = 2,
    model_max_length: int = 1024,
) -> PreTrainedTokenizerFast:
    """Train a joint BPE of `vocab_size` tokens (specials, tags, characters and merges) on `texts`.

    `texts` holds the sentences of both languages (of all languages for a multilingual model), one
    per item; it is read once, so a generator over a large corpus works. `language_tags` (e.g.
    ``["<2de>", "<2en>"]``) get the ids 4, 5, ... in that order. Pairs seen fewer than
    `min_frequency` times are not merged, so a small corpus may give fewer than `vocab_size` tokens:
    build the model from `tokenizer_model_kwargs`. `model_max_length` should match the model's
    `max_position_embeddings`.
    """
    language_tags = _check_language_tags(language_tags)
    special_tokens = [*SPECIAL_TOKENS, *language_tags]
    if (
        isinstance(vocab_size, bool)
        or not isinstance(vocab_size, int)
        or vocab_size <= len(special_tokens)
    ):
        raise ValueError(
            f"`vocab_size` must be an integer larger than the {len(special_tokens)} special "
            f"tokens, got {vocab_size!r}."
        )
    tokenizer = _untrained_tokenizer()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=special_tokens,
        show_progress=False,
    )
    counter = _SentenceCounter(texts)
    tokenizer.train_from_iterator(counter, trainer=trainer)
    if counter.sentences == 0:
        raise ValueError("The training corpus is empty: `texts` holds no non-blank sentence.")
    # BPE keeps every character even when the budget is exceeded
    if tokenizer.get_vocab_size() > vocab_size:
        raise ValueError(
            f"`vocab_size`={vocab_size} is too small: the {len(special_tokens)} special tokens "
            f"and the {tokenizer.get_vocab_size() - len(special_tokens)} characters of the "
            f"corpus alone take {tokenizer.get_vocab_size()} ids, before any merge."
        )
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"$A {EOS}",
        pair=f"$A {EOS} $B {EOS}",
        special_tokens=[(EOS, tokenizer.token_to_id(EOS))],
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        bos_token=BOS,
        eos_token=EOS,
        pad_token=PAD,
        unk_token=UNK,
        extra_special_tokens=list(language_tags),
        model_max_length=model_max_length,
    )


def tokenizer_model_kwargs(tokenizer: PreTrainedTokenizerFast) -> dict:
    """Config kwargs that make a model match `tokenizer`:
    `DwLstmConfig(**tokenizer_model_kwargs(tok), ...)`.

    The decoder starts from the pad id, as the model config and Marian do. `language_tag_ids` names
    the token id of every `<2xx>` tag the tokenizer reserves (a language-aware model reads the
    target language from it).
    """
    return {
        "vocab_size": len(tokenizer),
        "pad_token_id": tokenizer.pad_token_id,
        "bos_token_id": tokenizer.bos_token_id,
        "eos_token_id": tokenizer.eos_token_id,
        "decoder_start_token_id": tokenizer.pad_token_id,
        "language_tag_ids": language_tag_ids(tokenizer),
    }


def language_tag_ids(tokenizer) -> dict[str, int]:
    """{"de": id of "<2de>", ...} for every language tag the tokenizer reserves, by language
    code."""
    tags = {
        token: token_id
        for token, token_id in tokenizer.get_vocab().items()
        if LANGUAGE_TAG.fullmatch(token)
    }
    return {token[2:-1]: token_id for token, token_id in sorted(tags.items())}


def _untrained_tokenizer() -> Tokenizer:
    """A BPE over NFC-normalized text whose pre-tokenization keeps the spacing recoverable (see the
    module docstring)."""
    tokenizer = Tokenizer(models.BPE(unk_token=UNK))
    tokenizer.normalizer = normalizers.NFC()
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Metaspace(), pre_tokenizers.Punctuation(behavior="isolated")]
    )
    tokenizer.decoder = decoders.Metaspace()
    return tokenizer


def _check_language_tags(language_tags: Sequence[str]) -> list[str]:
    """Tags look like <2xx>; a typo such as "2de" or "<de>" would otherwise become an
    ordinary token."""
    if isinstance(language_tags, str):
        raise ValueError(
            "`language_tags` must be a list of tags such as ['<2de>'], not a string: "
            f"{language_tags!r}."
        )
    language_tags = list(language_tags)
    for tag in language_tags:
        if not isinstance(tag, str) or not LANGUAGE_TAG.fullmatch(tag):
            raise ValueError(
                f"Language tags look like '<2de>' (a '<2', a language code, a '>'), got {tag!r}."
            )
    duplicates = sorted({tag for tag in language_tags if language_tags.count(tag) > 1})
    if duplicates:
        raise ValueError(f"Language tags must be unique, got {duplicates} more than once.")
    return language_tags


class _SentenceCounter:
    """Pass `texts` through to the trainer once while counting the non-blank sentences, so that an
    empty corpus is detected without reading a large one twice or holding it in memory."""

    def __init__(self, texts: Iterable[str]):
        if isinstance(texts, str):
            raise ValueError("`texts` must be an iterable of sentences, not one string.")
        self.texts = texts
        self.sentences = 0

    def __iter__(self) -> Iterator[str]:
        for text in self.texts:
            if not isinstance(text, str):
                raise ValueError(f"`texts` must hold strings, got {type(text).__name__}.")
            if text.strip():
                self.sentences += 1
                yield text


def normalizes_unicode(tokenizer) -> bool:
    """Whether `tokenizer` (a fast tokenizer) composes its input (Unicode NFC or NFKC) before
    tokenizing: those of `train_joint_bpe_tokenizer` do since NFC was added; those saved before
    do not."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    normalizer = backend.normalizer if backend is not None else None
    # u + diaeresis -> ü
    return normalizer is not None and normalizer.normalize_str("u\u0308") == "\u00fc"
