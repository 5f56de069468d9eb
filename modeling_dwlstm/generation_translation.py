"""Decoding for the translation models: greedy and beam search without needless passes over the
scores, and a vocabulary shortlist.

`TranslationTransformerForConditionalGeneration.generate` is transformers'
`GenerationMixin.generate`, which prepares the call (generation config, logits processors, stopping
criteria, encoder output, cache) and hands greedy and beam search to `lean_search` here through its
public `custom_generate` argument; so does the translation pipeline, which calls `generate()`. The
loop uses only public transformers APIs (the cache classes, the processors and stopping criteria as
callables, the output classes), so it does not depend on how a release arranges its own loop. Its
output is transformers' own loop's, token for token and score for score: the same forward passes,
the same operations on the same numbers, the same bookkeeping of hypotheses (the tests compare the
two under every tested transformers version). What changes is what happens to the (rows, vocabulary)
scores at each step:

    transformers' loop                                  this loop
    logits in a new tensor per step                    one tensor every eager step writes over
                                                         (`ReusedLogits`)
    logits copied to a new float32 tensor              float32 logits themselves (bfloat16 into one
                                                         float32 tensor every step writes over)
    log-softmax into a new tensor                      log-softmax in place
    length and suppression processors: new tensors     the same columns written in place
    + beam scores into a new tensor                    top-k of each beam's row over the maxima of
    top-k over beams x vocabulary (2 x beams kept)       blocks of columns, + beam scores to those only,
                                                         top-k over beams x (2 x beams + 1); where
                                                         two are equal, transformers' computation
    cache: keys and values copied every step           copied only when a beam moved; a static cache in place,
    (a static cache over its whole length)             over the positions filled so far

With an int8 output projection the scores are its float32 output, which this loop owns as well (on
the `torch._int_mm` route, `precision.Int8Projection`, the int32 sums and their rescaling written
into two tensors every eager step writes over; fbgemm's own float32 output on the other,
`precision.FbgemmInt8Projection`), and the log-softmax runs in place over them. bfloat16 logits
are converted to float32 once, as transformers' loop converts them, into one float32 tensor that
every step writes over (`ScoresBuffer`).

What this loop does not implement runs in transformers' loop, never ignored (`lean_refusal` says
why): sampling and the other search methods, streamers, synchronised GPUs, assisted decoding,
returning logits, attentions or hidden states, decoding without a cache, chunked prefill, and caches
other than the growing and the static one. That is logged at info level, and warned where the call
asked for a shortlist or compiled steps, which only this loop has.

Compiled decoding steps: `generate(..., compile_decoding=True)` (or
`model.generation_config.compile_decoding = True`; off by default) runs every step after the first
two through `torch.compile` (`StepForward`), greedy and beam search, with the growing cache, int8
models included (`precision.fbgemm_unit_range_linear`). The first decode of a search compiles its
graph (about 40 s for a 6+6-layer model on a 2-core CPU; torch.compile caches it on disk for later
processes), which removes the cost of running a step's operators one by one from Python. A static
cache with a `compile_config` (`generate(..., cache_implementation="static", compile_config=...)`,
as transformers' loop compiles greedy search) is compiled here too, in beam search as well.
`generate(..., lean_decoding=False)` (or `model.generation_config.lean_decoding = False`) always
runs transformers' loop. So that a model stays compiled whatever batches it decodes,
`compile_decoding` pads each batch to a bucket (`generate_in_buckets`) and compiles with the batch's
sizes dynamic (`mark_dynamic_sizes`): a few graphs per model (one per search and attention route),
each model with its own (`compiled_call`).

The shortlist (Jean et al. 2015; L'Hostis et al. 2016; as Marian's `--shortlist`, Sockeye's
`--restrict-lexicon` and CTranslate2's `use_vmap`): a lexical table of likely target tokens for each
source token, plus tokens always allowed (the most frequent ones, the special ones).
`generate(..., use_shortlist=True)` (or `model.generation_config.use_shortlist = True`; off by
default) takes the union of the table rows of the batch's source tokens, and every decoding step
projects onto that union only: the output projection, the log-softmax and the top-k run over its
columns, and the model's distribution is renormalised over it. The table is `Shortlist`;
`save_pretrained` writes it beside the weights (`shortlist.safetensors`) and `from_pretrained` reads
it back; `nmt_toolkit.shortlist` builds it from a corpus. A logits processor this loop does not know
is called on the whole vocabulary's scores, -inf outside the shortlist. Where a shortlist meets an
option this loop does not implement, transformers' loop decodes with the same restriction
(`ShortlistLogitsMask`, and renormalisation in beam search).
"""  # noqa: E501

import copy
import dataclasses
import math
import os
import shutil
import types
import warnings
import weakref

import torch
import transformers
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from transformers import CompileConfig, GenerationConfig, GenerationMixin
from transformers.cache_utils import EncoderDecoderCache, StaticLayer
from transformers.generation import GenerateBeamEncoderDecoderOutput, GenerateEncoderDecoderOutput
from transformers.generation.logits_process import (
    ForcedBOSTokenLogitsProcessor,
    ForcedEOSTokenLogitsProcessor,
    LogitNormalization,
    LogitsProcessor,
    LogitsProcessorList,
    MinLengthLogitsProcessor,
    MinNewTokensLengthLogitsProcessor,
    SuppressTokensAtBeginLogitsProcessor,
    SuppressTokensLogitsProcessor,
)
from transformers.utils import cached_file, logging

from .precision import (
    Int8Projection,
    PackedBfloat16Projection,
    output_rows,
    register_packed_weights,
    takes_packed_product,
)

logger = logging.get_logger(__name__)

SHORTLIST_FILE = "shortlist.safetensors"
SHORTLIST_FORMAT = "modeling_dwlstm shortlist 1"
TOPK_BLOCK = 64  # columns per block of `row_topk`
# The generation-config entries this module adds (`generate(..., name=value)` sets them for
# one call).
DECODING_OPTIONS = {"lean_decoding": True, "use_shortlist": False, "compile_decoding": False}
# module -> (CompileConfig, its compiled __call__): `compiled_call`
COMPILED_CALLS = weakref.WeakKeyDictionary()
# transformers 5.24 renamed the outputs' `past_key_values` to `cache`: the installed version's name.
OUTPUT_CACHE_FIELD = next(
    name
    for name in ("cache", "past_key_values")
    if name in {field.name for field in dataclasses.fields(GenerateEncoderDecoderOutput)}
)


# ---------------------------------------------------------------------------------------------
# The shortlist
# ---------------------------------------------------------------------------------------------


class Shortlist:
    """A lexical shortlist: `table` (vocab_size, k), for each source token id up to k target token
    ids (-1 pads a shorter row), and `always` (n,), the target ids every batch may produce (the most
    frequent ones and the special ones). `metadata` says how it was built (strings; saved with
    it)."""

    def __init__(self, table: torch.Tensor, always: torch.Tensor, metadata: dict | None = None):
        if (
            table.dim() != 2
            or table.dtype.is_floating_point
            or always.dim() != 1
            or always.dtype.is_floating_point
        ):
            raise ValueError(
                "A shortlist is an integer table (vocab_size, k) and an integer vector of ids "
                "always allowed."
            )
        self.table, self.always = table.long(), always.long()
        self.metadata = {str(key): str(value) for key, value in (metadata or {}).items()}

    @property
    def vocab_size(self) -> int:
        return self.table.shape[0]

    @property
    def direction(self) -> str | None:
        """The direction ("en-de") whose corpus built it: its `direction` metadata, or the last word
        of its `corpus` (shortlists built before the direction was recorded); None when
        neither says."""
        direction = (
            self.metadata.get("direction") or self.metadata.get("corpus", "").rpartition(" ")[2]
        )
        return direction if direction.count("-") == 1 and all(direction.split("-")) else None

    def candidates(
        self,
        source_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        extra: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """The sorted target ids a batch of sources (batch, length) may produce: `always`, `extra`
        and the table rows of the sources' tokens (padding left out by `attention_mask`)."""
        tokens = (
            source_ids[attention_mask.bool()]
            if attention_mask is not None
            else source_ids.flatten()
        )
        tokens = tokens[(tokens >= 0) & (tokens < self.vocab_size)].cpu().unique()
        rows = self.table[tokens].flatten()
        parts = [rows[rows >= 0], self.always] + (
            [extra.flatten().cpu().long()] if extra is not None else []
        )
        return torch.cat(parts).unique()  # sorted

    def save(self, path) -> None:
        save_file(
            {"table": self.table.int().contiguous(), "always": self.always.int().contiguous()},
            str(path),
            metadata={"format": SHORTLIST_FORMAT, **self.metadata},
        )

    @classmethod
    def load(cls, path) -> "Shortlist":
        with safe_open(str(path), framework="pt") as file:
            metadata = dict(file.metadata() or {})
        if metadata.get("format") != SHORTLIST_FORMAT:
            raise ValueError(
                f"{path} is not a shortlist of this package (format {metadata.get('format')!r}, "
                f"expected {SHORTLIST_FORMAT!r})."
            )
        tensors = load_file(str(path))
        metadata.pop("format")
        return cls(tensors["table"], tensors["always"], metadata)

    def __repr__(self) -> str:
        return (
            f"Shortlist(vocab_size={self.vocab_size}, top_k={self.table.shape[1]}, always="
            f"{len(self.always)}, metadata={self.metadata})"
        )


def load_shortlist(name_or_path, **hub_kwargs) -> Shortlist | None:
    """The shortlist saved with the model at `name_or_path` (a folder or a Hub repository), None if
    it has none. `hub_kwargs`: `from_pretrained`'s cache_dir, revision, token, subfolder,
    local_files_only, force_download."""
    path = cached_file(
        str(name_or_path),
        SHORTLIST_FILE,
        _raise_exceptions_for_missing_entries=False,
        _raise_exceptions_for_connection_errors=False,
        **hub_kwargs,
    )
    return Shortlist.load(path) if path else None


class ShortlistLogitsMask(LogitsProcessor):
    """-inf for every token outside `allowed` (sorted ids): the shortlist in transformers' own
    loop."""

    def __init__(self, allowed: torch.Tensor):
        self.allowed = allowed

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        outside = torch.ones(scores.shape[-1], dtype=torch.bool, device=scores.device)
        outside[self.allowed[self.allowed < scores.shape[-1]].to(scores.device)] = False
        return scores.masked_fill(outside, -math.inf)


# ---------------------------------------------------------------------------------------------
# Which loop decodes
# ---------------------------------------------------------------------------------------------

# Processors this loop applies itself, as columns of the scores written in place, on the full
# vocabulary or a shortlist. Exact types: a subclass may do something else (it is called as it is).
COLUMN_PROCESSORS = (
    MinLengthLogitsProcessor,
    MinNewTokensLengthLogitsProcessor,
    SuppressTokensLogitsProcessor,
    SuppressTokensAtBeginLogitsProcessor,
    ForcedBOSTokenLogitsProcessor,
    ForcedEOSTokenLogitsProcessor,
)
# generate()'s caches that this loop keeps: the growing one and the static one
# (`cache_implementation`).
CACHE_IMPLEMENTATIONS = (None, "dynamic", "static")


def call_generation_config(model, kwargs: dict) -> GenerationConfig:
    """The generation config of a generate() call: the one given (or the model's) updated with the
    call's keyword arguments, as generate() will make it (`GenerationConfig.update`)."""
    config = copy.deepcopy(kwargs.get("generation_config") or model.generation_config)
    for name, default in DECODING_OPTIONS.items():
        if not hasattr(config, name):
            setattr(config, name, default)
    config.update(**{name: value for name, value in kwargs.items() if name != "generation_config"})
    return config


def lean_refusal(generation_config: GenerationConfig, kwargs: dict) -> str | None:
    """Why this loop cannot decode a generate() call with these settings (transformers' loop then
    does), or None."""
    config = generation_config
    if not getattr(config, "lean_decoding", True):
        return "lean_decoding=False"
    given_cache = kwargs.get("cache", kwargs.get("past_key_values"))
    mode = config.get_generation_mode(kwargs.get("assistant_model")).value
    checks = [
        (kwargs.get("custom_generate") is not None, "a custom_generate of the caller"),
        (
            mode not in ("greedy_search", "beam_search"),
            f"{mode.replace('_', ' ')} (this loop: greedy and beam search)",
        ),
        (bool(kwargs.get("synced_gpus")), "synced_gpus"),
        (kwargs.get("streamer") is not None, "a streamer"),
        (getattr(config, "is_assistant", False), "assisted decoding"),
        (
            config.return_dict_in_generate
            and (config.output_attentions or config.output_hidden_states or config.output_logits),
            "output_attentions, output_hidden_states or output_logits",
        ),
        (config.use_cache is False, "use_cache=False"),
        (getattr(config, "prefill_chunk_size", None) is not None, "prefill_chunk_size"),
        (getattr(config, "low_memory", None), "low_memory"),
        (
            config.cache_implementation not in CACHE_IMPLEMENTATIONS,
            f"cache_implementation={config.cache_implementation!r}",
        ),
        (
            given_cache is not None and not isinstance(given_cache, EncoderDecoderCache),
            "a cache that is not an EncoderDecoderCache",
        ),
        (
            "inputs_embeds" in kwargs and getattr(config, "use_shortlist", False),
            "inputs_embeds with a shortlist",
        ),
    ]
    return next((reason for refused, reason in checks if refused), None)


# transformers' static cache layers count their filled positions from 5.4 on (before, a layer is
# written at the positions the caller passes, which this model's attention does not).
STATIC_CACHE_COUNTS_POSITIONS = hasattr(StaticLayer(1), "cumulative_length")


def check_sources(model, inputs, kwargs: dict):
    """Refuse sources without a single token (their translation would be a hallucination; the
    pipeline and the evaluation give them the empty translation), derive the mask of padded sources,
    and return the output of an empty batch (no sentence to decode; transformers' loops reduce over
    it), else None."""
    input_ids = kwargs.get("input_ids", inputs)
    attention_mask = kwargs.get("attention_mask")
    if (
        isinstance(input_ids, torch.Tensor)
        and input_ids.dim() == 2
        and kwargs.get("encoder_outputs") is None
    ):
        # an empty batch: no sentence to decode (transformers' loops reduce over it)
        if input_ids.shape[0] == 0:
            start = model.generation_config.decoder_start_token_id
            sequences = input_ids.new_full(
                (0, 1), model.config.pad_token_id if start is None else start
            )
            config = kwargs.get("generation_config") or model.generation_config
            as_dict = kwargs.get("return_dict_in_generate", config.return_dict_in_generate)
            return GenerateEncoderDecoderOutput(sequences=sequences) if as_dict else sequences
        if attention_mask is None:
            attention_mask = kwargs["attention_mask"] = model.mask_from_padding(input_ids)
        lengths = (
            attention_mask.sum(-1)
            if attention_mask is not None
            else torch.full(input_ids.shape[:1], input_ids.shape[1])
        )
        empty = (lengths == 0).nonzero().flatten().tolist()
        if empty:
            raise ValueError(
                f"Source sentences {empty} have no tokens (zero length or every position "
                "masked). An empty "
                "source has the empty translation: leave it out (the translation pipeline and "
                "evaluate_translation.py do so and return '')."
            )
    return None


def translation_generate(model, inputs=None, **kwargs):
    """`generate()` for the family: transformers' `GenerationMixin.generate` prepares the call
    (configuration, processors, stopping criteria, encoder output, cache) and hands greedy and beam
    search to this module's loop through its public `custom_generate` argument; any other call runs
    transformers' own loop, with a warning where the caller asked for something only this loop does
    (a shortlist, compiled steps)."""
    # so that generate(..., use_shortlist=True) is a generation option
    for name, default in DECODING_OPTIONS.items():
        if not hasattr(model.generation_config, name):
            setattr(model.generation_config, name, default)
    empty_batch_output = check_sources(model, inputs, kwargs)
    if empty_batch_output is not None:
        return empty_batch_output
    new_tokens = kwargs.get("max_new_tokens")
    if new_tokens is not None and (
        isinstance(new_tokens, bool) or not isinstance(new_tokens, int) or new_tokens < 1
    ):
        raise ValueError(
            "max_new_tokens must be a whole number of at least 1 (the tokens to generate after "
            f"the decoder start), got {new_tokens!r}."
        )
    if kwargs.get("max_new_tokens") is not None and kwargs.get("max_length") is None:
        # The call's length wins over the saved max_length (the papers' 256), as generate() would
        # make it, without its warning that both were set: the saved one is a default, not the
        # caller's.
        prompt = kwargs.get("decoder_input_ids")
        kwargs["max_length"] = kwargs.pop("max_new_tokens") + (
            prompt.shape[-1] if prompt is not None else 1
        )
    config = call_generation_config(model, kwargs)
    if config.cache_implementation == "static" and not STATIC_CACHE_COUNTS_POSITIONS:
        raise ValueError(
            f"cache_implementation='static' needs transformers 5.4 or newer (installed: "
            f"{transformers.__version__}); decode with the default cache, or upgrade transformers."
        )
    reason = lean_refusal(config, kwargs)
    if reason is None:
        return generate_in_buckets(model, config, inputs, kwargs)
    asked = [name for name in ("use_shortlist", "compile_decoding") if getattr(config, name, False)]
    # never silent where the caller asked for this loop's options
    if asked and reason != "lean_decoding=False":
        warnings.warn(
            f"generate(): {' and '.join(asked)} decode in transformers' loop here, because of "
            f"{reason}: "
            "the shortlist is a mask over the whole vocabulary there, and no step is compiled.",
            stacklevel=3,
        )
    else:
        logger.info(f"Decoding with transformers' loop: {reason}.")
    if getattr(config, "use_shortlist", False):
        source_ids = kwargs.get("input_ids", inputs)
        allowed = batch_shortlist_ids(
            model,
            config,
            source_ids,
            kwargs.get("attention_mask"),
            kwargs.get("decoder_input_ids"),
            kwargs.get("logits_processor") or (),
        )
        # -inf outside, then renormalised where beam search has normalised
        mask = [
            ShortlistLogitsMask(allowed),
            *([] if config.num_beams == 1 else [LogitNormalization()]),
        ]
        kwargs["logits_processor"] = LogitsProcessorList(
            [*(kwargs.get("logits_processor") or ()), *mask]
        )
    return GenerationMixin.generate(model, inputs, **kwargs)


def lean_search(
    model,
    input_ids,
    logits_processor,
    stopping_criteria,
    generation_config,
    inputs_tensor=None,
    **model_kwargs,
):
    """The `custom_generate` that generate() calls after its preparation: greedy or beam search,
    over the batch's shortlist when the generation config says `use_shortlist`. `model_kwargs` carry
    the encoder output, its mask and the cache (as `cache`, or `past_key_values` before
    transformers 5.24)."""
    cache = model_kwargs.get("cache", model_kwargs.get("past_key_values"))
    if not isinstance(cache, EncoderDecoderCache):
        raise RuntimeError(
            f"generate() prepared a {type(cache).__name__} cache where this model's decoding "
            "needs an "
            "EncoderDecoderCache; decode with lean_decoding=False and report the transformers "
            "version."
        )
    state = DecodingInputs(model, model_kwargs, cache)
    columns = None
    if getattr(generation_config, "use_shortlist", False):
        ids = batch_shortlist_ids(
            model,
            generation_config,
            inputs_tensor,
            model_kwargs.get("attention_mask"),
            input_ids,
            logits_processor,
        )
        columns = OutputColumns(
            ids.to(model.device), shortlist_projection(model, ids), model.config.vocab_size
        )
    search = lean_greedy_search if generation_config.num_beams == 1 else lean_beam_search
    return search(
        model, input_ids, logits_processor, stopping_criteria, generation_config, columns, state
    )


class DecodingInputs:
    """What each decoding step's forward is given: the encoder output and mask, the decoder's own
    mask (one more position per step), and the cache, which the forward fills in place."""

    def __init__(self, model, model_kwargs: dict, cache: EncoderDecoderCache):
        self.cache = cache
        self.fixed = {
            name: model_kwargs[name]
            for name in ("encoder_outputs", "attention_mask")
            if model_kwargs.get(name) is not None
        }
        self.decoder_attention_mask = model_kwargs.get("decoder_attention_mask")
        self.device = model.device

    def step(self, decoder_input_ids: torch.Tensor, first: bool = False) -> dict:
        """The forward's inputs for the tokens so far, `decoder_input_ids` (rows, length): the
        positions not yet in the cache (all of them at the first step, unless the caller's cache
        holds some)."""
        if not first and self.decoder_attention_mask is not None:
            mask = self.decoder_attention_mask
            self.decoder_attention_mask = torch.cat([mask, mask.new_ones(mask.shape[0], 1)], dim=-1)
        new = decoder_input_ids.shape[1] - int(self.cache.get_seq_length()) if first else 1
        inputs = {
            **self.fixed,
            "decoder_input_ids": decoder_input_ids[:, -new:].to(self.device),
            "past_key_values": self.cache,
            "use_cache": True,
        }
        if self.decoder_attention_mask is not None:
            inputs["decoder_attention_mask"] = self.decoder_attention_mask
        return inputs


def special_token_tensors(
    model, generation_config, device
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """(pad, end-of-sentence ids) of the call as tensors: the pad id falls back to the first
    end-of-sentence id, as in transformers' loop."""
    eos = generation_config.eos_token_id
    eos = model.config.eos_token_id if eos is None else eos
    eos = None if eos is None else torch.as_tensor(eos, device=device).long().reshape(-1)
    pad = generation_config.pad_token_id
    pad = eos[0] if pad is None and eos is not None else pad
    return (None if pad is None else torch.as_tensor(pad, device=device).long()), eos


# ---------------------------------------------------------------------------------------------
# The output columns a step scores: the whole vocabulary or a shortlist
# ---------------------------------------------------------------------------------------------


class OutputColumns:
    """The token ids a decoding step scores, `ids` (sorted) of a vocabulary of `vocab_size`, and the
    output projection onto them."""

    def __init__(self, ids: torch.Tensor, projection, vocab_size: int):
        self.ids, self.projection, self.vocab_size = ids, projection, vocab_size

    def positions(self, token_ids: torch.Tensor) -> torch.Tensor:
        """The columns of `token_ids` that are among `ids` (the others are left out)."""
        token_ids = token_ids.to(self.ids.device).flatten()
        index = torch.searchsorted(self.ids, token_ids).clamp_(max=len(self.ids) - 1)
        return index[self.ids[index] == token_ids]

    def token_ids(self, positions: torch.Tensor) -> torch.Tensor:
        return self.ids[positions]


def batch_shortlist_ids(
    model, generation_config, source_ids, attention_mask, decoder_input_ids, logits_processor
) -> torch.Tensor:
    """The shortlist's token ids for this batch (sorted): the union of its sources' rows, the
    special tokens, the tokens the generation config or the processors force, and the
    decoder prompt."""
    shortlist = getattr(model, "shortlist", None)
    if shortlist is None:
        raise ValueError(
            "use_shortlist=True, but this model has no shortlist: build one with "
            "scripts/build_shortlist.py (nmt_toolkit.shortlist) and load the model from the "
            "folder it was written to."
        )
    if (
        not isinstance(source_ids, torch.Tensor)
        or source_ids.dtype.is_floating_point
        or source_ids.dim() != 2
        or (source_ids < 0).any()
    ):
        raise ValueError(
            "use_shortlist=True needs the source token ids (`input_ids`): the shortlist is "
            "chosen from them, and this call gave none (e.g. only `encoder_outputs`)."
        )
    if shortlist.vocab_size != model.config.vocab_size:
        raise ValueError(
            f"The shortlist covers {shortlist.vocab_size} source tokens but the model has "
            f"{model.config.vocab_size}: build it again with the model's tokenizer."
        )
    check_shortlist_targets(model, shortlist, source_ids)
    config = generation_config
    specials = [
        config.decoder_start_token_id,
        config.bos_token_id,
        config.pad_token_id,
        model.config.eos_token_id,
        config.forced_bos_token_id,
    ]
    eos = [config.eos_token_id, config.forced_eos_token_id]
    forced = [
        torch.as_tensor(getattr(processor, name)).flatten()
        for processor in logits_processor
        for name in ("bos_token_id", "eos_token_id")
        if type(processor) in COLUMN_PROCESSORS and hasattr(processor, name)
    ]
    extra = [
        torch.tensor([token for token in specials if token is not None], dtype=torch.long),
        *[torch.as_tensor(token).flatten() for token in eos if token is not None],
        *forced,
    ]
    if decoder_input_ids is not None:
        extra.append(decoder_input_ids.flatten())
    # expanded for the beams
    if attention_mask is not None and attention_mask.shape[0] != source_ids.shape[0]:
        attention_mask = attention_mask[:: attention_mask.shape[0] // source_ids.shape[0]]
    ids = shortlist.candidates(
        source_ids, attention_mask, torch.cat([part.cpu().long() for part in extra])
    )
    return ids[ids < model.config.vocab_size]


def check_shortlist_targets(model, shortlist: Shortlist, source_ids: torch.Tensor) -> None:
    """Refuse a shortlist built for another direction than the call translates: its rows hold
    another target language's words. A multilingual model translates into the languages whose tags
    `<2xx>` start the sources (`config.language_tag_ids`); a model without tags translates its
    config's `language_pairs`."""
    built_for = shortlist.direction
    if built_for is None:
        return
    tags = {
        tag_id: language
        for language, tag_id in (getattr(model.config, "language_tag_ids", None) or {}).items()
    }
    targets = sorted({tags[token] for token in source_ids[:, 0].tolist() if token in tags})
    pairs = list(getattr(model.config, "language_pairs", None) or [])
    others = [language for language in targets if language != built_for.split("-")[1]]
    if others:
        raise ValueError(
            f"use_shortlist=True: the model's shortlist was built for {built_for} and would "
            f"restrict this call's translation into {', '.join(others)} (the tag in front of its "
            f"sources) to {built_for}'s words; leave out use_shortlist for it, or translate into "
            f"{built_for.split('-')[1]} only."
        )
    if not targets and pairs and built_for not in pairs:
        raise ValueError(
            f"use_shortlist=True: the model's shortlist was built for {built_for}, but the model "
            f"translates {', '.join(pairs)} (its config's language_pairs); build it again for the "
            "model's direction (scripts/build_shortlist.py), or leave out use_shortlist."
        )


def shortlist_projection(model, ids: torch.Tensor):
    """The output projection onto the rows `ids`; where it cannot be restricted (e.g. a LoRA
    wrapper), the whole projection and then its columns `ids`."""
    projection = model.get_output_embeddings()
    try:
        return output_rows(projection, ids)
    except ValueError:
        return lambda hidden: projection(hidden)[..., ids.to(hidden.device)]


class StepForward:
    """What runs a decoding step's forward: the model, or its encoder-decoder `model.model` where
    the loop projects itself, onto a shortlist's columns or (`reuse_logits`, eager steps) onto the
    whole vocabulary into one reused tensor (`ReusedLogits`). With `compile_decoding`,
    or where transformers' loop would compile (a static cache, with a `compile_config` or on a GPU),
    the steps after the first two go through `torch.compile`, with the cache's length marked as a
    dynamic size (torch.compile would specialise the second step's length of 1, then compile once
    more for the third's), so that one graph serves the whole decode."""

    def __init__(
        self,
        model,
        generation_config,
        cache: EncoderDecoderCache,
        columns: "OutputColumns | None",
        reuse_logits: bool = False,
    ):
        self.module = model if columns is None else model.model
        self.compiled = self.logits = None
        config = step_compile_config(model, generation_config, cache)
        if config is None:
            projection = (
                model.decoding_step_projection()
                if reuse_logits and columns is None and not any_autocast()
                else None
            )
            if projection is not None:
                self.module, self.logits = model.model, ReusedLogits(projection)
            return
        check_torch_compile_traces_steps()
        check_cpp_compiler(model, config)
        # a copied int8 model's projections (fbgemm route) need theirs registered
        register_packed_weights(model)
        self.compiled = compiled_call(self.module, config)

    def __call__(self, step: int, model_inputs: dict):
        # eager; or past the limit
        if self.compiled is None or step < 2 or COMPILED_CALLS[self.module][1] is None:
            return self.module(**model_inputs, return_dict=True)
        mark_dynamic_sizes(model_inputs)
        return run_compiled(self.module, self.compiled, model_inputs)


def mark_dynamic_sizes(model_inputs: dict) -> None:
    """The sizes that change from batch to batch and step to step marked dynamic before the first
    graph is traced, so that one graph serves them all (torch.compile would specialise the first
    batch's sizes, then compile once more): the rows, the source length, the growing cache's length.
    With the batch in buckets (`generate_in_buckets`) a model compiles one graph per search (greedy,
    beams); compiling static graphs, one per bucket, would compile more of them."""
    cache = model_inputs["past_key_values"]
    encoder_outputs = model_inputs.get("encoder_outputs")
    tensors = [
        model_inputs.get("attention_mask"),
        model_inputs.get("decoder_attention_mask"),
        getattr(encoder_outputs, "last_hidden_state", None),
    ]
    for tensor in tensors:
        if isinstance(tensor, torch.Tensor):
            torch._dynamo.maybe_mark_dynamic(tensor, 0)  # rows
            # source length (the decoder's: cache length + 1)
            torch._dynamo.maybe_mark_dynamic(tensor, 1)
    torch._dynamo.maybe_mark_dynamic(model_inputs["decoder_input_ids"], 0)
    for layer in [*cache.self_attention_cache.layers, *cache.cross_attention_cache.layers]:
        if isinstance(layer, StaticLayer) or not isinstance(
            getattr(layer, "keys", None), torch.Tensor
        ):
            continue
        for tensor in (layer.keys, layer.values):  # (rows, heads, length, head size)
            torch._dynamo.maybe_mark_dynamic(tensor, 0)
            torch._dynamo.maybe_mark_dynamic(tensor, 2)


def step_compile_config(
    model, generation_config, cache: EncoderDecoderCache
) -> CompileConfig | None:
    """The torch.compile options of the decoding steps, or None to run them eagerly:
    `compile_decoding`'s; else, as transformers' loop decides, a static cache's with the caller's
    `compile_config` or on a GPU."""
    if getattr(generation_config, "compile_decoding", False):
        return generation_config.compile_config or decoding_compile_config()
    if (
        getattr(generation_config, "disable_compile", False)
        or not cache.self_attention_cache.is_compileable
    ):
        return None
    if generation_config.compile_config is not None:
        return generation_config.compile_config
    return CompileConfig() if model.device.type in ("cuda", "xpu") else None


def torch_compile_traces_steps() -> bool:
    """Whether this torch's torch.compile traces the decoding step: torch 2.6's cannot (it stops at
    transformers 5.24's model outputs, and has no `recompile_limit`); tested from torch 2.13."""
    return hasattr(torch._dynamo.config, "recompile_limit")


def check_torch_compile_traces_steps():
    """Compiled steps refused before decoding, with what to do, where torch cannot compile them."""
    if not torch_compile_traces_steps():
        raise RuntimeError(
            f"Compiled decoding steps need a newer torch than {torch.__version__}, whose "
            "torch.compile cannot trace this model's decoding step (tested from torch 2.13). "
            "Upgrade torch, or decode without compile_decoding (and without a compile_config)."
        )


def check_cpp_compiler(model, compile_config: CompileConfig):
    """torch.compile's default compiler (inductor) builds C++ for a CPU: refused with what to do,
    before decoding, where no C++ compiler is found (it would fail at the first compiled step).
    Looked up as inductor looks it up: the CXX variable, else a compiler on the PATH."""
    if compile_config.backend != "inductor" or model.device.type != "cpu":
        return
    candidates = [os.environ["CXX"]] if os.environ.get("CXX") else ["c++", "g++", "clang++"]
    if not any(shutil.which(name) for name in candidates):
        raise RuntimeError(
            "compile_decoding on a CPU needs a C++ compiler for torch.compile's inductor, and "
            "none was found "
            f"(looked for {', '.join(candidates)}). Install g++ or clang++ (or point the CXX "
            "variable at one), or "
            "decode without compile_decoding."
        )


def decoding_compile_config() -> CompileConfig:
    """`compile_decoding`'s torch.compile options when the generation config gives none: sizes made
    dynamic when they change (batches differ; compiling everything dynamic from the start took 2-5
    times as long), and no CUDA graphs ("reduce-overhead", transformers' default), which would be
    recorded again for every length of the growing cache."""
    return CompileConfig(dynamic=None, mode="default")


# compiled decoding pads the source length to a multiple of this (`generate_in_buckets`)
SOURCE_BUCKET = 16


def generate_in_buckets(model, config: GenerationConfig, inputs, kwargs: dict):
    """The lean loop's generate(); with `compile_decoding`, the batch padded to a bucket first, so
    that a model compiles a few graphs whatever batches it decodes: the sentences to a power of two
    (copies of the first one, which end when it ends), the source length to a multiple of
    `SOURCE_BUCKET` (masked padding, within the model's positions). The copies' outputs are dropped:
    the sentences' tokens are those of the batch as given. Left as given where other inputs follow
    the batch's rows (e.g. `encoder_outputs`) or the call returns a dict (its scores and cache hold
    every row)."""
    source = kwargs.get("input_ids", inputs)
    padded = None
    if getattr(config, "compile_decoding", False) and not config.return_dict_in_generate:
        padded = bucketed_inputs(model, source, kwargs)
    if padded is None:
        return GenerationMixin.generate(model, inputs, custom_generate=lean_search, **kwargs)
    output = GenerationMixin.generate(model, custom_generate=lean_search, **{**kwargs, **padded})
    return output[: source.shape[0] * (config.num_return_sequences or 1)]


def bucket_sentences(sentences: int) -> int:
    """The sentences a batch of `sentences` is padded to: the next power of two, and never 1
    sentence, a size torch.compile specialises (it would compile one more graph for it)."""
    return 1 << (max(sentences, 2) - 1).bit_length()


def bucketed_inputs(model, source, kwargs: dict) -> dict | None:
    """`generate_in_buckets`' padded `input_ids`, `attention_mask` (and decoder prompt), or None
    where the call's inputs cannot be padded this way."""
    rows_only = {"input_ids", "attention_mask", "decoder_input_ids"}
    if (
        not isinstance(source, torch.Tensor)
        or source.dim() != 2
        or source.dtype.is_floating_point
        or any(
            isinstance(value, torch.Tensor) and name not in rows_only
            for name, value in kwargs.items()
        )
    ):
        return None
    sentences, length = source.shape
    mask = kwargs.get("attention_mask")
    mask = torch.ones_like(source) if mask is None else mask
    limit = getattr(model.config, "max_position_embeddings", None) or math.inf
    padded_length = max(length, min(-(-length // SOURCE_BUCKET) * SOURCE_BUCKET, limit))
    copies = bucket_sentences(sentences) - sentences
    pad_id = model.config.pad_token_id if model.config.pad_token_id is not None else 0
    source = torch.nn.functional.pad(source, (0, padded_length - length), value=pad_id)
    mask = torch.nn.functional.pad(mask, (0, padded_length - length), value=0)
    padded = {
        "input_ids": torch.cat([source, source[:1].expand(copies, -1)]),
        "attention_mask": torch.cat([mask, mask[:1].expand(copies, -1)]),
    }
    prompt = kwargs.get("decoder_input_ids")
    if prompt is not None:
        if prompt.dim() != 2 or prompt.shape[0] != sentences:
            return None
        padded["decoder_input_ids"] = torch.cat([prompt, prompt[:1].expand(copies, -1)])
    return padded


def compiled_call(module, compile_config: CompileConfig):
    """`module(**inputs)` through torch.compile with `compile_config`, made once per module and
    configuration (its compiled graphs are kept for the shapes seen). Called with the module first:
    `compiled_call(m, c)(m, **inputs)`. Each module compiles its own copy of `call_module`'s code:
    torch.compile keeps its graphs, and counts recompilations against its limit, per code object, so
    one model's shapes, dtypes or precision never use up another's (a process serving two models, or
    evaluating checkpoints in a loop, keeps each one compiled). Kept beside the module rather than
    in it, so that a copy of the module (`copy.deepcopy` keeps a function as it is) never runs the
    original's weights."""
    config, compiled = COMPILED_CALLS.get(module, (None, None))
    if config != compile_config:
        compiled = torch.compile(own_code(call_module), **compile_config.to_dict())
        COMPILED_CALLS[module] = (compile_config, compiled)
    return compiled


def call_module(module, **inputs):
    """What `compiled_call` compiles: torch.compile's graphs belong to this frame's code (a copy per
    module), and it traces the module's own `__call__` and `forward` inside it."""
    return module(**inputs)


def own_code(function):
    """`function` with a code object of its own (the same instructions, globals and defaults)."""
    return types.FunctionType(
        function.__code__.replace(),
        function.__globals__,
        function.__name__,
        function.__defaults__,
        function.__closure__,
    )


def run_compiled(module, compiled, model_inputs: dict):
    """A compiled step; where torch.compile has compiled this model's step as often as its recompile
    limit allows, the step runs eagerly from then on, said once in a warning with torch.compile's
    reason (otherwise only its log would say it)."""
    try:
        # raise instead of running eagerly without a word (the setting's name in older torch
        # releases: the second)
        setting = next(
            name
            for name in ("fail_on_recompile_limit_hit", "fail_on_cache_limit_hit")
            if hasattr(torch._dynamo.config, name)
        )
        # no duck sizing: sizes equal by chance in the traced batch (rows and source length, say)
        # would be one size in the graph, and a batch where they differ would compile another.
        # A private torch module: imported here, when steps are compiled, never with the model.
        from torch.fx.experimental import _config as fx_config

        with torch._dynamo.config.patch(**{setting: True}), fx_config.patch(use_duck_shape=False):
            return compiled(module, **model_inputs, return_dict=True)
    except torch._dynamo.exc.FailOnRecompileLimitHit as error:
        COMPILED_CALLS[module] = (COMPILED_CALLS[module][0], None)
        warnings.warn(
            f"compile_decoding: this model's decoding step reached torch.compile's recompile limit "
            f"({torch._dynamo.config.recompile_limit} graphs) and runs eagerly from now on ("
            f"{error}). "
            "Decode batches of fewer distinct shapes, or raise "
            "torch._dynamo.config.recompile_limit.",
            stacklevel=2,
        )
        return module(**model_inputs, return_dict=True)


def any_autocast() -> bool:
    """Whether autocast is on for the CPU or the GPU (where the output projection's product would
    run in another dtype than its tensor written in place)."""
    return torch.is_autocast_enabled("cpu") or torch.is_autocast_enabled("cuda")


def step_tensor(tensor: torch.Tensor | None, shape, dtype, device) -> torch.Tensor:
    """`tensor`, the previous step's, where it has this shape, dtype and device; else a new one."""
    if tensor is None or tensor.shape != shape or tensor.dtype != dtype or tensor.device != device:
        return torch.empty(shape, dtype=dtype, device=device)
    return tensor


class ReusedLogits:
    """The model's output projection (a bias-free nn.Linear, `decoding_step_projection`) applied by
    the loop, into one (rows, vocabulary) tensor that every step writes over: the product F.linear
    computes (`torch.mm`), without a new tensor per step, which glibc serves with fresh pages where
    it passes 32 MB (65 MB in bfloat16 at 1,024 rows of a 32k vocabulary). A projection with a
    packed bfloat16 weight computes the few rows it takes itself (`takes_packed_product`: at most
    18 MB at a 35k vocabulary). An int8 projection (`Int8Projection`) writes its int32 sums and
    their float32 rescaling into two such tensors. The loop keeps no step's logits past that
    step."""

    def __init__(self, projection: torch.nn.Linear):
        self.projection, self.tensor, self.sums = projection, None, None

    def __call__(self, hidden: torch.Tensor) -> torch.Tensor:  # (N, d) -> (N, V)
        if isinstance(self.projection, PackedBfloat16Projection) and takes_packed_product(
            self.projection, hidden
        ):
            return self.projection(hidden)
        shape = (hidden.shape[0], self.projection.weight.shape[0])
        if isinstance(self.projection, Int8Projection):
            self.sums = step_tensor(self.sums, shape, torch.int32, hidden.device)
            self.tensor = step_tensor(self.tensor, shape, torch.float32, hidden.device)
            logits = self.projection.rows_product(hidden, sums=self.sums, out=self.tensor)
            return logits.to(hidden.dtype)  # as its forward returns them: bfloat16 rounds
        self.tensor = step_tensor(self.tensor, shape, hidden.dtype, hidden.device)
        return torch.mm(hidden, self.projection.weight.t(), out=self.tensor)


class ScoresBuffer:
    """The float32 tensor that holds each step's scores where the logits are bfloat16 or float16,
    written over at every step. A new (rows, vocabulary) float32 tensor per step costs more than the
    copy into it at large batches: glibc serves blocks over 32 MB with fresh pages from the
    operating system (131 MB at 1,024 rows of a 32k vocabulary), zeroed and faulted in at every
    step. The loop that owns it keeps no step's scores past that step."""

    def __init__(self):
        self.tensor = None

    def float32(self, logits: torch.Tensor) -> torch.Tensor:
        self.tensor = step_tensor(self.tensor, logits.shape, torch.float32, logits.device)
        return self.tensor.copy_(logits)  # exact: float32 holds every bfloat16 and float16 value


def step_scores(
    forward: StepForward,
    step: int,
    model_inputs: dict,
    columns: OutputColumns | None,
    buffer: ScoresBuffer | None = None,
):
    """Decoding step `step` (0 for the first): (outputs, float32 scores (rows, columns) of the last
    position). The scores are a tensor this loop owns (the output projection's own, or its float32
    conversion, into `buffer` where given): it may change them in place."""
    outputs = forward(step, model_inputs)
    if columns is not None:
        logits = columns.projection(outputs.last_hidden_state[:, -1])  # (N, S)
    elif forward.logits is not None:
        logits = forward.logits(outputs.last_hidden_state[:, -1])  # (N, V)
    else:
        logits = outputs.logits[:, -1]  # (N, V)
    if logits.dtype != torch.float32:
        logits = logits.float() if buffer is None else buffer.float32(logits)
    elif not logits.is_contiguous():  # a decoder prompt longer than one token: (N, T, V)[:, -1]
        logits = logits.contiguous()
    return outputs, logits


def apply_processors(
    logits_processor, input_ids: torch.Tensor, scores: torch.Tensor, columns: OutputColumns | None
) -> torch.Tensor:
    """The processors, in their order: the column ones written in place, any other called as
    transformers' loop calls it; with a shortlist, on the whole vocabulary's scores (-inf outside
    the shortlist), of which the shortlist's columns are kept."""
    for processor in logits_processor:
        if type(processor) in COLUMN_PROCESSORS:
            scores = apply_column_processor(processor, input_ids.shape[-1], scores, columns)
        elif columns is None:
            scores = processor(input_ids, scores)
        else:
            scores = processor(
                input_ids, full_vocabulary_scores(scores, columns, columns.vocab_size)
            )[:, columns.ids]
    return scores


def column_positions(
    token_ids, scores: torch.Tensor, columns: OutputColumns | None
) -> torch.Tensor:
    token_ids = torch.as_tensor(token_ids, device=scores.device).flatten().long()
    if columns is not None:
        return columns.positions(token_ids)
    return token_ids[(token_ids >= 0) & (token_ids < scores.shape[-1])]


def apply_column_processor(
    processor, length: int, scores: torch.Tensor, columns: OutputColumns | None
) -> torch.Tensor:
    """What `processor` does to `scores` at sequence length `length`, written in place into its
    columns (transformers' own versions build new tensors with the same values)."""
    kind = type(processor)
    if kind is MinLengthLogitsProcessor:
        suppressed = processor.eos_token_id if length < processor.min_length else None
    elif kind is MinNewTokensLengthLogitsProcessor:
        short = length - processor.prompt_length_to_skip < processor.min_new_tokens
        suppressed = processor.eos_token_id if short else None
    elif kind is SuppressTokensLogitsProcessor:
        suppressed = processor.suppress_tokens
    elif kind is SuppressTokensAtBeginLogitsProcessor:
        suppressed = processor.begin_suppress_tokens if length == processor.begin_index else None
    # forced BOS (at length 1) or EOS (one before max_length): every other token -inf, the
    # forced one 0
    else:
        forced = (
            processor.bos_token_id
            if kind is ForcedBOSTokenLogitsProcessor
            else processor.eos_token_id
            if length == processor.max_length - 1
            else None
        )
        if kind is ForcedBOSTokenLogitsProcessor and length != 1:
            forced = None
        if forced is not None:
            scores.fill_(-math.inf)
            scores[:, column_positions(forced, scores, columns)] = 0
        return scores
    if suppressed is not None:
        scores[:, column_positions(suppressed, scores, columns)] = -math.inf
    return scores


def full_vocabulary_scores(
    scores: torch.Tensor, columns: OutputColumns | None, vocab_size: int
) -> torch.Tensor:
    """Scores over the whole vocabulary (-inf outside the shortlist), as transformers' loop
    returns them."""
    if columns is None:
        return scores
    full = scores.new_full((scores.shape[0], vocab_size), -math.inf)
    full[:, columns.ids] = scores
    return full


def reorder_cache(cache: EncoderDecoderCache, beam_idx: torch.Tensor) -> None:
    """Make row i of the self-attention cache what row beam_idx[i] was (the cross-attention keys and
    values are the same for every beam of a sentence). Nothing is copied when no beam moved; a
    static cache is reordered in place, over the positions written so far."""
    if torch.equal(
        beam_idx, torch.arange(len(beam_idx), dtype=beam_idx.dtype, device=beam_idx.device)
    ):
        return
    for layer in cache.self_attention_cache.layers:
        if isinstance(layer, StaticLayer):
            if not layer.is_initialized:
                continue
            filled = int(layer.cumulative_length)
            index = beam_idx.to(layer.keys.device)
            for states in (layer.keys, layer.values):
                states[:, :, :filled] = states[:, :, :filled].index_select(0, index)
        else:
            layer.reorder_cache(beam_idx)


def row_topk(scores: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """torch.topk(scores, k) of each row of `scores` (rows, columns): the same values in the same
    order, and the same columns but among equal values (whose order torch.topk leaves unspecified).
    It reads each row once for the maxima of its blocks of `TOPK_BLOCK` columns, and looks for the k
    largest only in the k blocks with the largest maxima, which hold them: 2.6x faster than
    torch.topk's CPU kernel over a step's scores at the benchmark's shapes. Where -inf is among the
    k largest (ties the blocks cannot order) it is torch.topk itself."""
    rows, width = scores.shape
    block = TOPK_BLOCK
    whole = width // block * block
    if width // block < 2 * k:  # a short row: nothing to gain
        return torch.topk(scores, k)
    maxima = scores[:, :whole].view(rows, -1, block).amax(-1)  # (rows, width // block)
    if whole < width:  # the last, shorter block
        maxima = torch.cat([maxima, scores[:, whole:].amax(-1, keepdim=True)], dim=1)
    blocks = torch.topk(maxima, k).indices  # (rows, k)
    # (rows, k * block)
    columns = (blocks[:, :, None] * block + torch.arange(block, device=scores.device)).flatten(1)
    outside = columns >= width  # past the end of the last block
    candidates = scores.gather(1, columns.clamp(max=width - 1)).masked_fill_(outside, -math.inf)
    values, positions = torch.topk(candidates, k)
    if values[:, -1].isneginf().any():
        return torch.topk(scores, k)
    return values, columns.gather(1, positions)


def best_continuations(
    log_probs: torch.Tensor, beam_scores: torch.Tensor, k: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """The k best (beam score + log-probability) of each sentence, over its beams x columns:
    torch.topk((log_probs + beam_scores).view(sentences, -1), k), values and flat indices. Adding a
    beam's score keeps the order of its row, so only each beam's k + 1 best columns are added to it
    and compared. Where two of a sentence's k + 1 best are equal (bfloat16 logits, -inf), which of
    them comes first is torch.topk's to say: that sentence's k best are then that computation
    itself, over its own row (torch.topk orders each row by that row alone), the beam scores added
    in place into `log_probs` (the loop's own tensor). log_probs (sentences * beams, columns),
    beam_scores (sentences, beams)."""
    sentences, beams = beam_scores.shape
    columns = log_probs.shape[-1]
    sentence_rows = log_probs.view(sentences, beams, columns)
    if columns > k:
        values, indices = row_topk(log_probs, k + 1)  # (sentences * beams, k + 1)
        totals = (values.view(sentences, beams, k + 1) + beam_scores[:, :, None]).view(
            sentences, -1
        )
        best, positions = torch.topk(totals, k + 1)  # (sentences, k + 1)
        tied = (~(best[:, :-1] > best[:, 1:]).all(1)).nonzero().flatten().tolist()
        # One sentence's row at a time runs on one thread, where torch.topk over the batch shares
        # its rows among the threads: the rows alone pay while fewer sentences tie than that.
        if len(tied) * torch.get_num_threads() < sentences:
            # beam b's columns start there
            offsets = torch.arange(beams, device=indices.device)[:, None] * columns
            flat = (
                (indices.view(sentences, beams, k + 1) + offsets)
                .view(sentences, -1)
                .gather(1, positions)
            )
            for sentence in tied:
                row = sentence_rows[sentence].add_(beam_scores[sentence, :, None])
                best[sentence, :k], flat[sentence, :k] = torch.topk(row.view(-1), k)
            return best[:, :k], flat[:, :k]
    sentence_rows.add_(beam_scores[:, :, None])
    return torch.topk(log_probs.view(sentences, -1), k)


# ---------------------------------------------------------------------------------------------
# Greedy search
# ---------------------------------------------------------------------------------------------


def lean_greedy_search(
    model,
    input_ids,
    logits_processor,
    stopping_criteria,
    generation_config,
    columns: OutputColumns | None,
    inputs: DecodingInputs,
):
    """Greedy search as transformers' loop does it (`GenerationMixin._sample` without sampling):
    argmax over the output projection's tensor, no float32 copy, the tokens written into one
    buffer."""
    pad_token_id, _ = special_token_tensors(model, generation_config, input_ids.device)
    output_scores = generation_config.return_dict_in_generate and generation_config.output_scores
    scores = () if output_scores else None
    has_eos_stopping_criteria = any(
        hasattr(criteria, "eos_token_id") for criteria in stopping_criteria
    )
    batch_size, length = input_ids.shape
    # (B, max_length)
    tokens = input_ids.new_empty(batch_size, max(generation_config.max_length, length + 1))
    tokens[:, :length] = input_ids
    unfinished_sequences = torch.ones(batch_size, dtype=torch.long, device=input_ids.device)
    model_inputs = inputs.step(input_ids, first=True)
    # the returned scores keep each step's tensor
    forward = StepForward(
        model, generation_config, inputs.cache, columns, reuse_logits=scores is None
    )
    buffer = ScoresBuffer() if scores is None else None
    while True:
        # (B, V or S)
        outputs, logits = step_scores(
            forward, length - input_ids.shape[1], model_inputs, columns, buffer
        )
        del outputs
        next_token_scores = apply_processors(logits_processor, tokens[:, :length], logits, columns)
        if scores is not None:
            scores += (full_vocabulary_scores(next_token_scores, columns, model.config.vocab_size),)
        next_tokens = next_token_scores.argmax(dim=-1)  # (B,)
        if columns is not None:
            next_tokens = columns.token_ids(next_tokens)
        if has_eos_stopping_criteria:
            next_tokens = next_tokens * unfinished_sequences + pad_token_id * (
                1 - unfinished_sequences
            )
        tokens[:, length] = next_tokens
        length += 1
        unfinished_sequences = unfinished_sequences & ~stopping_criteria(tokens[:, :length], scores)
        if unfinished_sequences.max() == 0 or length == tokens.shape[1]:
            break
        model_inputs = inputs.step(tokens[:, :length])
    sequences = tokens[:, :length].clone()
    if not generation_config.return_dict_in_generate:
        return sequences
    return GenerateEncoderDecoderOutput(
        sequences=sequences, scores=scores, **{OUTPUT_CACHE_FIELD: inputs.cache}
    )


# ---------------------------------------------------------------------------------------------
# Beam search
# ---------------------------------------------------------------------------------------------
# The beams of the batch's sentences are kept as (sentences, beams, ...) tensors: the running
# hypotheses (the best `beams` of each sentence still open) and the finished ones, with their scores
# and the beam each token came from.


def gather_beams(tensor: torch.Tensor, beam_indices: torch.Tensor) -> torch.Tensor:
    """tensor[sentence, beam_indices[sentence, k], ...] for every sentence and k: (sentences,
    k, ...)."""
    while beam_indices.dim() < tensor.dim():
        beam_indices = beam_indices.unsqueeze(-1)
    return torch.take_along_dim(tensor, beam_indices, dim=1)


def running_beams(topk_log_probs, topk_sequences, topk_beam_indices, finished_now, num_beams: int):
    """The `num_beams` best candidates that did not just finish: the hypotheses that go on to the
    next step."""
    open_scores = topk_log_probs + finished_now.to(torch.float32) * -1.0e9
    best = torch.topk(open_scores, k=num_beams)[1]
    return (
        gather_beams(topk_sequences, best),
        gather_beams(open_scores, best),
        gather_beams(topk_beam_indices, best),
    )


def update_finished_beams(
    finished,
    topk_sequences,
    topk_log_probs,
    topk_beam_indices,
    finished_now,
    improvable,
    top_num_beam_mask,
    cur_len: int,
    prompt_length: int,
    length_penalty: float,
    early_stopping,
):
    """The finished hypotheses after this step: the old ones and the candidates that just ended
    among each sentence's `num_beams` best, ranked by score / length ** length_penalty (Wu et al.
    2016); `finished` is (sequences, scores, beam_indices, is_finished), each (sentences,
    num_beams, ...)."""
    sequences, beam_scores, beam_indices, is_finished = finished
    num_beams = beam_scores.shape[1]
    just_finished = finished_now & top_num_beam_mask[None, :]
    candidate_scores = topk_log_probs / ((cur_len + 1 - prompt_length) ** length_penalty)
    full = torch.all(is_finished, dim=-1, keepdim=True) & (early_stopping is True)
    candidate_scores += full.to(torch.float32) * -1.0e9
    candidate_scores += (~improvable).to(torch.float32) * -1.0e9
    candidate_scores += (~just_finished) * -1.0e9
    merged_scores = torch.cat((beam_scores, candidate_scores), dim=1)
    best = torch.topk(merged_scores, k=num_beams)[1]
    return (
        gather_beams(torch.cat((sequences, topk_sequences), dim=1), best),
        gather_beams(merged_scores, best),
        gather_beams(torch.cat((beam_indices, topk_beam_indices), dim=1), best),
        gather_beams(torch.cat((is_finished, just_finished), dim=1), best),
    )


def still_improvable(
    improvable,
    running_scores,
    beam_scores,
    is_finished,
    cur_len: int,
    max_length: int,
    prompt_length: int,
    early_stopping,
    length_penalty: float,
) -> torch.Tensor:
    """(sentences, 1): whether a running hypothesis can still beat the worst finished one of its
    sentence (with early_stopping="never" and a positive length penalty, at the longest length it
    could reach)."""
    if early_stopping == "never" and length_penalty > 0.0:
        best_length = max_length - prompt_length
    else:
        best_length = cur_len - prompt_length
    best_running = running_scores[:, :1] / (best_length**length_penalty)
    worst_finished = torch.where(
        is_finished, torch.min(beam_scores, dim=1, keepdim=True)[0], -1.0e9
    )
    return improvable & torch.any(best_running > worst_finished, dim=-1, keepdim=True)


def beams_to_go_on(improvable, is_finished, finished_now, early_stopping) -> bool:
    """Whether another step can change the result."""
    improvement_possible = torch.any(improvable)
    open_beam = ~(torch.all(is_finished) & (early_stopping is True))
    return bool(improvement_possible & open_beam & ~torch.all(finished_now))


def lean_beam_search(
    model,
    input_ids,
    logits_processor,
    stopping_criteria,
    generation_config,
    columns: OutputColumns | None,
    inputs: DecodingInputs,
):
    """Beam search as transformers' loop does it (`GenerationMixin._beam_search` without sampling),
    its scores computed in place (see the module docstring); ties and finished beams are handled
    as there."""
    pad_token_id, eos_token_id = special_token_tensors(model, generation_config, input_ids.device)
    output_scores = generation_config.return_dict_in_generate and generation_config.output_scores
    early_stopping, length_penalty = (
        generation_config.early_stopping,
        generation_config.length_penalty,
    )
    max_length, num_beams = generation_config.max_length, generation_config.num_beams
    num_return_sequences = generation_config.num_return_sequences
    rows, cur_len = input_ids.shape[:2]
    batch_size = rows // num_beams
    prompt_length = cur_len
    device = input_ids.device
    # 2 x beams candidates per sentence (more with several EOS tokens), so that `num_beams` stay
    # open when the best ones all end.
    n_eos_tokens = eos_token_id.shape[0] if eos_token_id is not None else 0
    beams_to_keep = max(2, 1 + n_eos_tokens) * num_beams
    top_num_beam_mask = torch.cat(
        (
            torch.ones(num_beams, dtype=torch.bool),
            torch.zeros(beams_to_keep - num_beams, dtype=torch.bool),
        )
    ).to(device)
    all_scores = () if output_scores else None

    output_fill_value = pad_token_id or eos_token_id[0] if eos_token_id is not None else -1
    running_sequences = torch.full(
        (batch_size, num_beams, max_length),
        fill_value=output_fill_value,
        dtype=torch.int64,
        device=device,
    )
    running_sequences[:, :, :cur_len] = input_ids.view(batch_size, num_beams, cur_len)
    running_beam_scores = torch.zeros((batch_size, num_beams), dtype=torch.float, device=device)
    running_beam_scores[:, 1:] = -1e9  # only the first beam's continuations at the first step
    running_beam_indices = torch.full(
        (batch_size, num_beams, max_length - cur_len),
        fill_value=-1,
        dtype=torch.int32,
        device=device,
    )
    finished = (
        running_sequences.detach().clone(),
        torch.full((batch_size, num_beams), fill_value=-1e9, dtype=torch.float, device=device),
        running_beam_indices.detach().clone(),
        torch.zeros((batch_size, num_beams), dtype=torch.bool, device=device),
    )
    improvable = torch.ones((batch_size, 1), dtype=torch.bool, device=device)
    batch_offset = torch.arange(batch_size, device=device).view(-1, 1) * num_beams

    flat_running_sequences = input_ids
    model_inputs = inputs.step(input_ids, first=True)
    # the returned scores are copies
    forward = StepForward(model, generation_config, inputs.cache, columns, reuse_logits=True)
    buffer = ScoresBuffer()
    while True:
        # (B * beams, V or S)
        outputs, log_probs = step_scores(
            forward, cur_len - prompt_length, model_inputs, columns, buffer
        )
        del outputs
        torch.log_softmax(log_probs, dim=-1, out=log_probs)
        log_probs = apply_processors(
            logits_processor, flat_running_sequences, log_probs, columns
        ).contiguous()
        if all_scores is not None:
            all_scores += (
                full_vocabulary_scores(log_probs, columns, model.config.vocab_size).clone(),
            )
        columns_per_beam = log_probs.shape[-1]
        topk_log_probs, topk_indices = best_continuations(
            log_probs, running_beam_scores, beams_to_keep
        )  # (B, 2 x beams)
        del log_probs

        topk_current_beam_indices = topk_indices // columns_per_beam
        topk_ids = topk_indices % columns_per_beam
        if columns is not None:
            topk_ids = columns.token_ids(topk_ids)
        topk_running_beam_indices = gather_beams(running_beam_indices, topk_current_beam_indices)
        topk_running_sequences = gather_beams(running_sequences, topk_current_beam_indices)
        topk_running_sequences[:, :, cur_len] = topk_ids
        topk_running_beam_indices[:, :, cur_len - prompt_length] = (
            topk_current_beam_indices + batch_offset
        )

        finished_now = stopping_criteria(
            topk_running_sequences[:, :, : cur_len + 1].flatten(0, 1), all_scores
        )
        finished_now = finished_now.view(batch_size, beams_to_keep)
        running_sequences, running_beam_scores, running_beam_indices = running_beams(
            topk_log_probs,
            topk_running_sequences,
            topk_running_beam_indices,
            finished_now,
            num_beams,
        )
        finished = update_finished_beams(
            finished,
            topk_running_sequences,
            topk_log_probs,
            topk_running_beam_indices,
            finished_now,
            improvable,
            top_num_beam_mask,
            cur_len,
            prompt_length,
            length_penalty,
            early_stopping,
        )
        reorder_cache(inputs.cache, running_beam_indices[..., cur_len - prompt_length].flatten())

        cur_len = cur_len + 1
        improvable = still_improvable(
            improvable,
            running_beam_scores,
            finished[1],
            finished[3],
            cur_len,
            max_length,
            prompt_length,
            early_stopping,
            length_penalty,
        )
        if not beams_to_go_on(improvable, finished[3], finished_now, early_stopping):
            break
        flat_running_sequences = running_sequences[:, :, :cur_len].flatten(0, 1)
        model_inputs = inputs.step(flat_running_sequences)

    # The best `num_return_sequences` per sentence, cut to the longest generated length.
    sequences, beam_scores, beam_indices, _ = (
        part[:, :num_return_sequences].flatten(0, 1) for part in finished
    )
    max_generated_length = ((beam_indices + 1).bool()).sum(dim=1).max()
    sequences = sequences[:, : prompt_length + max_generated_length]
    beam_indices = beam_indices[:, :max_generated_length]
    if not generation_config.return_dict_in_generate:
        return sequences
    return GenerateBeamEncoderDecoderOutput(
        sequences=sequences,
        sequences_scores=beam_scores if output_scores else None,
        scores=all_scores,
        beam_indices=beam_indices,
        **{OUTPUT_CACHE_FIELD: inputs.cache},
    )


__all__ = [
    "DECODING_OPTIONS",
    "SHORTLIST_FILE",
    "Shortlist",
    "ShortlistLogitsMask",
    "load_shortlist",
    "translation_generate",
    "lean_refusal",
]
