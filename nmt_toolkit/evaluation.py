"""Evaluate translation models as the papers do (Xu et al. 2024, §3.1): beam search, BLEU, chrF,
speed, significance.

- `translate_sentences` decodes with beam search (beam 4 by default) in batches of sentences of
  similar length, each batch bounded by a number of source tokens (padding included), and returns
  the hypotheses in input order with the decoding speed in sentences per second (the papers' speed
  measure: the test set sorted by source length).
- `score_translations` reports sacreBLEU with its signature (detokenized, the comparable number),
  the papers' "tokenized case-sensitive BLEU", and chrF.
- `paired_bootstrap` is Koehn (2004)'s paired bootstrap resampling between two systems.

"Tokenized BLEU" here is what `multi-bleu.perl` computes on tokenized text, the number Xu et al. and
Vaswani et al. report: both sides are tokenized with the mteval-v13a rules (sacreBLEU's `13a`,
Moses-like punctuation splitting), hyphenated compounds are split as in tensor2tensor's
`get_ende_bleu.sh` ("a-b" -> "a ##AT##-##AT## b"), and BLEU is computed on whitespace tokens
(sacreBLEU `tokenize="none"`). It is case-sensitive. It can differ from multi-bleu on
Moses-tokenized text by a few tenths; report the sacreBLEU number with its signature for comparisons
across papers.
"""

import json
import logging
import os
import re
import time
import unicodedata
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from sacrebleu.metrics import BLEU, CHRF
from sacrebleu.tokenizers.tokenizer_13a import Tokenizer13a

from modeling_dwlstm.precision import (
    AUTO,
    DTYPES,
    PRECISIONS,
    QUANTIZATIONS,
    check_precision,
    precision_name,
    precision_settings,
    prepare_for_inference,
    torch_dtype,
)
from modeling_dwlstm.tokenization_dwlstm import LANGUAGE_TAG

from .allocator import freed_memory_kept, keep_freed_memory
from .arguments import check_device, check_finite_number, check_positive_int
from .batching import pack_by_tokens
from .checkpoints import load_saved_model, load_saved_tokenizer, weights_digest
from .data import load_parallel_corpus, warn_unnormalized_text
from .files import (
    atomic_write_json,
    atomic_write_text,
    clear_output_dir,
    prepare_output_dir,
    read_lines,
    releasing_output_dirs,
    set_threads,
)
from .multilingual import (
    ALL_PAIRS,
    PIVOT,
    corpus_languages,
    pair_name,
    parse_language_pairs,
    tag_source,
)
from .shortlist import check_shortlist_direction

logger = logging.getLogger(__name__)

DEFAULT_MAX_TOKENS = 4096  # source tokens per decoding batch, padding included
# a hypothesis may be this many tokens longer than the longest source in its batch
EXTRA_LENGTH = 50
_COMPOUND = re.compile(r"(\S)-(\S)")
_tokenize_13a = Tokenizer13a()


@dataclass
class Translations:
    """Hypotheses in the order of the sources, and how long decoding took."""

    hypotheses: list[str]
    seconds: float

    @property
    def sentences_per_second(self) -> float:
        return len(self.hypotheses) / self.seconds if self.seconds > 0 else float("inf")


def length_sorted_batches(lengths: Sequence[int], max_tokens: int) -> list[list[int]]:
    """Indices grouped into batches of similar length with at most `max_tokens` tokens, padding
    included.

    Sentences are sorted by length (stable, so ties keep their order); a batch holds as many
    consecutive sentences as fit `len(batch) * longest <= max_tokens`. A sentence longer than
    `max_tokens` alone gets a batch of its own rather than being dropped.
    """
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise ValueError(f"`max_tokens` must be a positive integer, got {max_tokens!r}.")
    return pack_by_tokens(
        sorted(range(len(lengths)), key=lambda i: lengths[i]), lengths, max_tokens
    )


def translate_sentences(
    model,
    tokenizer,
    sources: Sequence[str],
    num_beams: int = 4,
    length_penalty: float = 1.0,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    language_tag: str | None = None,
    **generate_kwargs,
) -> Translations:
    """Translate `sources` with beam search in length-sorted, token-bounded batches.

    `length_penalty` is transformers' exponent: beams are ranked by log-probability /
    length**penalty (the papers' 0.6 refers to GNMT's ((5 + length) / 6)**alpha, a different
    formula). `language_tag` (a language code, e.g. "de") puts the tokenizer's `<2de>` in front of
    every source, for models trained with tags (`--add_language_tag`, the multilingual models); it
    must be a reserved token. Hypotheses may be `EXTRA_LENGTH` tokens longer than the longest source
    of their batch unless `max_new_tokens` is passed; other `generate_kwargs` go to
    `model.generate()`. The timing covers tokenization, decoding and detokenization. An empty (or
    blank) source translates to "" without decoding, as in the translation pipeline; a source longer
    than the model's positions is refused before any decoding.
    """
    if isinstance(sources, str) or not all(isinstance(source, str) for source in sources):
        raise ValueError("`sources` must be a list of strings, one sentence each.")
    check_decoding_settings(
        num_beams, length_penalty, max_tokens, generate_kwargs.get("max_new_tokens")
    )
    warn_unnormalized_text(sources, tokenizer, "sources")
    start = time.perf_counter()
    encoded = encode_sources(tokenizer, sources, language_tag)
    _check_source_lengths(encoded, position_limit(model))
    hypotheses: list[str] = [""] * len(sources)
    for batch, texts in decode_batches(
        model,
        tokenizer,
        encoded,
        source_batches(sources, encoded, max_tokens),
        num_beams=num_beams,
        length_penalty=length_penalty,
        **generate_kwargs,
    ):
        for index, text in zip(batch, texts):
            hypotheses[index] = text
    return Translations(hypotheses=hypotheses, seconds=time.perf_counter() - start)


def encode_sources(
    tokenizer, sources: Sequence[str], language_tags: str | Sequence[str | None] | None = None
) -> list[list[int]]:
    """The token ids of `sources`, each with the `<2xx>` tag of its target language in front
    (`language_tags`: one language for all, one per source, or None for no tag); a source that
    starts with its tag keeps one."""
    if not sources:  # an empty file: the tokenizer refuses an empty batch
        return []
    encoded = tokenizer(list(sources), add_special_tokens=True)["input_ids"]
    if language_tags is None or isinstance(language_tags, str):
        language_tags = [language_tags] * len(encoded)
    tag_ids = {language: _language_tag_id(tokenizer, language) for language in set(language_tags)}
    languages_of = (
        {
            tag_id: token[2:-1]
            for token, tag_id in tokenizer.get_vocab().items()
            if LANGUAGE_TAG.fullmatch(token)
        }
        if any(i is not None for i in tag_ids.values())
        else {}
    )
    for number, (ids, language) in enumerate(zip(encoded, language_tags), 1):
        other = languages_of.get(ids[0]) if ids else None
        if tag_ids[language] is not None and other not in (None, language):
            raise ValueError(
                f"Source {number} starts with the tag <2{other}> but is to be translated into "
                f"{language}: take the tag out of the text (the target language puts its own in "
                "front)."
            )
    return [
        ids
        if tag_ids[language] is None or ids[:1] == [tag_ids[language]]
        else [tag_ids[language], *ids]
        for ids, language in zip(encoded, language_tags)
    ]


def position_limit(model) -> int | float:
    """The longest source (in tokens) the model has positions for (infinite when its config
    sets none)."""
    return getattr(model.config, "max_position_embeddings", None) or float("inf")


def source_batches(
    sources: Sequence[str], encoded: Sequence[list[int]], max_tokens: int
) -> list[list[int]]:
    """The indices of the non-blank `sources` in `length_sorted_batches` of their `encoded` lengths:
    the batches of every translation pass (blank sources are not decoded)."""
    to_translate = [index for index, source in enumerate(sources) if source.strip()]
    return [
        [to_translate[position] for position in positions]
        for positions in length_sorted_batches([len(encoded[i]) for i in to_translate], max_tokens)
    ]


def decode_batches(
    model,
    tokenizer,
    encoded: Sequence[list[int]],
    batches: Iterable[list[int]],
    num_beams: int = 4,
    length_penalty: float = 1.0,
    **generate_kwargs,
) -> Iterator[tuple[list[int], list[str]]]:
    """Decode the sources `encoded[i]` of each batch of indices with `model.generate()`; yield the
    batch and its hypotheses (stripped), one batch at a time, so that a caller can record each one
    as it completes."""
    limit = position_limit(model)
    # Lengths go to generate() as `max_length` (decoder start + new tokens), since `max_new_tokens`
    # next to the model's own `max_length` makes transformers warn on every batch; positions stop at
    # the model's limit.
    max_new_tokens = generate_kwargs.pop("max_new_tokens", None)
    model.eval()
    for batch in batches:
        inputs = tokenizer.pad({"input_ids": [encoded[i] for i in batch]}, return_tensors="pt").to(
            model.device
        )
        new_tokens = (
            inputs["input_ids"].shape[1] + EXTRA_LENGTH
            if max_new_tokens is None
            else max_new_tokens
        )
        settings = {"max_length": int(min(1 + new_tokens, limit)), **generate_kwargs}
        with torch.inference_mode():  # per batch: the caller's code between batches runs outside it
            output_ids = model.generate(
                **inputs, num_beams=num_beams, length_penalty=length_penalty, **settings
            )
        yield (
            batch,
            [text.strip() for text in tokenizer.batch_decode(output_ids, skip_special_tokens=True)],
        )


def check_decoding_settings(num_beams, length_penalty, max_tokens, max_new_tokens=None) -> None:
    """Refuse settings that generate() would reject late and obscurely (a zero beam, "max_length")
    or take silently (a NaN penalty ranks every beam alike)."""
    check_positive_int(num_beams, "--num_beams")
    check_finite_number(length_penalty, "--length_penalty")
    check_positive_int(max_tokens, "--max_tokens")
    check_positive_int(max_new_tokens, "--max_new_tokens", allow_none=True)


def _check_source_lengths(encoded: Sequence[list[int]], position_limit) -> None:
    too_long = [index for index, ids in enumerate(encoded) if len(ids) > position_limit]
    if too_long:
        first = too_long[0]
        raise ValueError(
            f"Source line {first + 1} has {len(encoded[first])} tokens, more than the model's "
            f"max_position_embeddings={position_limit} ({len(too_long)} such line(s)): shorten "
            "or split it."
        )


def tokenize_for_bleu(text: str) -> str:
    """The tokenization behind the papers' tokenized BLEU: 13a punctuation splitting, then compound
    splitting."""
    # one pass, as the perl one-liner
    return _COMPOUND.sub(r"\1 ##AT##-##AT## \2", _tokenize_13a(text))


def score_translations(
    hypotheses: Sequence[str], references: Sequence[str], target_lang: str | None = None
) -> dict:
    """sacreBLEU (with signature), the papers' tokenized case-sensitive BLEU, and chrF, all
    corpus-level.

    `target_lang` lets sacreBLEU pick its tokenizer for Chinese, Japanese and Korean targets. Both
    sides are compared in Unicode NFC, as the tokenizer reads text (`unicode_nfc`).
    """
    check_parallel(hypotheses, references, "hypotheses", "references")
    hypotheses, references = unicode_nfc(hypotheses), unicode_nfc(references)
    sacre = BLEU(trg_lang=target_lang or "")
    tokenized = BLEU(tokenize="none", force=True)
    chrf = CHRF()
    sacre_score = sacre.corpus_score(list(hypotheses), [list(references)])
    tokenized_score = tokenized.corpus_score(
        [tokenize_for_bleu(text) for text in hypotheses],
        [[tokenize_for_bleu(text) for text in references]],
    )
    chrf_score = chrf.corpus_score(list(hypotheses), [list(references)])
    return {
        "sentences": len(hypotheses),
        "sacrebleu": round(sacre_score.score, 2),
        "sacrebleu_signature": str(sacre.get_signature()),
        "sacrebleu_text": sacre_score.format(signature=str(sacre.get_signature())),
        "tokenized_bleu": round(tokenized_score.score, 2),
        "tokenized_bleu_method": (
            "13a + compound splitting, then BLEU on whitespace tokens (multi-bleu.perl)"
        ),
        "chrf": round(chrf_score.score, 2),
        "chrf_signature": str(chrf.get_signature()),
    }


def unicode_nfc(texts: Sequence[str]) -> list[str]:
    """`texts` in Unicode NFC: a reference with decomposed accents (NFD) matches the tokenizer's
    composed output (the same letters shown; only their encoding differs)."""
    return [unicodedata.normalize("NFC", text) for text in texts]


def paired_bootstrap(
    hypotheses: Sequence[str],
    baseline_hypotheses: Sequence[str],
    references: Sequence[str],
    num_samples: int = 1000,
    seed: int = 12345,
    tokenized: bool = True,
) -> dict:
    """Koehn (2004)'s paired bootstrap resampling: is `hypotheses` better than
    `baseline_hypotheses`?

    Draws `num_samples` test sets of the same size with replacement (the same draws for both
    systems), scores both on each, and reports how often the system beats the baseline. The p-value
    is the fraction of samples where it does not: p < 0.05 means "better with 95% confidence". BLEU
    is the tokenized BLEU of `score_translations` (`tokenized=False`: sacreBLEU's). Also gives each
    system's mean and 95% interval over the samples.
    """
    check_parallel(hypotheses, references, "hypotheses", "references")
    check_parallel(baseline_hypotheses, references, "baseline_hypotheses", "references")
    if isinstance(num_samples, bool) or not isinstance(num_samples, int) or num_samples < 1:
        raise ValueError(f"`num_samples` must be a positive integer, got {num_samples!r}.")
    draws = np.random.default_rng(seed).integers(
        0, len(references), size=(num_samples, len(references))
    )
    system = _sentence_statistics(hypotheses, references, tokenized)
    baseline = _sentence_statistics(baseline_hypotheses, references, tokenized)
    system_scores = np.array([_bleu_from_statistics(system[rows].sum(0)) for rows in draws])
    baseline_scores = np.array([_bleu_from_statistics(baseline[rows].sum(0)) for rows in draws])
    wins = float(np.mean(system_scores > baseline_scores))
    return {
        "metric": "tokenized_bleu" if tokenized else "sacrebleu",
        "num_samples": num_samples,
        "seed": seed,
        "system_bleu": round(_bleu_from_statistics(system.sum(0)), 2),
        "baseline_bleu": round(_bleu_from_statistics(baseline.sum(0)), 2),
        "system_interval": _interval(system_scores),
        "baseline_interval": _interval(baseline_scores),
        "system_wins": wins,
        "p_value": 1.0 - wins,
    }


@dataclass
class DecodingArguments:
    """The model and how it decodes: what the evaluation and the translate command share
    (HfArgumentParser)."""

    model: str = field(
        metadata={"help": "A saved model directory (with its tokenizer) or a Hub id."}
    )
    num_beams: int = field(default=4, metadata={"help": "Beam size (the papers: 4)."})
    length_penalty: float = field(
        default=1.0, metadata={"help": "transformers' length penalty exponent."}
    )
    max_tokens: int = field(
        default=DEFAULT_MAX_TOKENS, metadata={"help": "Source tokens per decoding batch."}
    )
    max_new_tokens: int | None = field(
        default=None,
        metadata={"help": f"Longest hypothesis (default: longest source + {EXTRA_LENGTH})."},
    )
    device: str = field(default="cpu", metadata={"help": "cpu, cuda, cuda:1, ..."})
    trust_remote_code: bool = field(
        default=False, metadata={"help": "Load a model whose code is not installed."}
    )
    threads: int | None = field(
        default=None,
        metadata={
            "help": (
                "torch CPU threads (default: torch's). On a busy machine 1 can be several times "
                "faster."
            )
        },
    )
    dtype: str = field(
        default="float32",
        metadata={
            "choices": list(DTYPES),
            "help": (
                "Weights and activations in float32 or bfloat16 (faster on CPUs with native "
                "bfloat16; see modeling_dwlstm.precision)."
            ),
        },
    )
    quantize: str = field(
        default="none",
        metadata={
            "choices": list(QUANTIZATIONS),
            "help": (
                "int8: every projection, the output projection included, int8 weights and "
                "dynamic int8 activations (CPU only; see modeling_dwlstm.precision)."
            ),
        },
    )
    precision: str | None = field(
        default=None,
        metadata={
            "choices": [AUTO, *PRECISIONS],
            "help": (
                "dtype and quantisation in one: float32, bfloat16, int8, bfloat16+int8, or auto: "
                "the one measured fastest on this CPU's class (docs/inference.md; bfloat16 on a "
                "GPU). Replaces --dtype and --quantize."
            ),
        },
    )
    use_shortlist: bool = field(
        default=False,
        metadata={
            "help": (
                "Decode each batch over the model's vocabulary shortlist "
                "(scripts/build_shortlist.py writes it beside the weights; see "
                "modeling_dwlstm.generation_translation)."
            )
        },
    )
    keep_freed_memory: bool = field(
        default=True,
        metadata={
            "help": (
                "Tell glibc's allocator to keep the memory this process frees for its next "
                "decoding steps instead of faulting fresh pages in (nmt_toolkit.allocator; the "
                "process keeps its peak memory). --no_keep_freed_memory: glibc's defaults. "
                "Nothing changes where the C library is not glibc or a MALLOC_ variable is set."
            )
        },
    )


@dataclass(kw_only=True)
class EvaluationArguments(DecodingArguments):
    """What `scripts/evaluate_translation.py` reads from its command line (HfArgumentParser)."""

    output_dir: str = field(metadata={"help": "Where hypotheses.txt and results.json are written."})
    source_file: str | None = field(
        default=None, metadata={"help": "Source sentences, one per line."}
    )
    reference_file: str | None = field(
        default=None, metadata={"help": "References, line-aligned with the sources."}
    )
    data: str | None = field(
        default=None,
        metadata={
            "help": "Instead of the two files: a folder of {split}.{lang}[.gz], a JSON-lines "
            "file or a Hub corpus (see nmt_toolkit.data.load_parallel_corpus)."
        },
    )
    split: str = field(default="test", metadata={"help": "The split of --data."})
    source_lang: str | None = field(
        default=None, metadata={"help": "Source language code, e.g. en."}
    )
    target_lang: str | None = field(
        default=None, metadata={"help": "Target language code, e.g. de."}
    )
    max_pairs: int | None = field(
        default=None, metadata={"help": "Evaluate only the first pairs (quick checks)."}
    )
    baseline_hypotheses: str | None = field(
        default=None,
        metadata={"help": "Another system's hypotheses, for the paired bootstrap test."},
    )
    bootstrap_samples: int = field(
        default=1000, metadata={"help": "Resamples of the paired bootstrap test."}
    )
    add_language_tag: bool = field(
        default=False,
        metadata={
            "help": (
                "Prefix sources with the <2xx> target tag (models trained with --add_language_tag)."
            )
        },
    )
    language_pairs: str | None = field(
        default=None,
        metadata={
            "help": (
                "Multilingual: decode every direction of 'en-de,de-en,de-fr,...' (or 'all') in "
                "one call, with tags; writes DIRECTION/hypotheses.txt and one results.json with "
                "`directions` and `averages`."
            )
        },
    )
    average_subset: str | None = field(
        default=None,
        metadata={
            "help": (
                "Multilingual: a further average over these directions (the papers' 'BLEU4' "
                "style), e.g. 'en-de,de-en'."
            )
        },
    )
    baseline_results: str | None = field(
        default=None,
        metadata={
            "help": (
                "Multilingual: a baseline run's results.json (its DIRECTION/hypotheses.txt "
                "beside it): the win ratio and a paired bootstrap p-value per direction."
            )
        },
    )
    pivot: str | None = field(
        default=None,
        metadata={
            "help": (
                "Multilingual: also translate every direction X-Y without this language through "
                "it (X -> en -> Y, the same model and beam) and report those scores as `pivot` "
                "beside the direct ones, e.g. --pivot en."
            )
        },
    )
    off_target: bool = field(
        default=True,
        metadata={
            "help": (
                "Multilingual: report the share of outputs not in the target language (needs "
                "py3langid)."
            )
        },
    )
    overwrite_output_dir: bool = field(
        default=False,
        metadata={
            "help": (
                "Write into a non-empty --output_dir, deleting what it holds first (an earlier "
                "evaluation; refused otherwise)."
            )
        },
    )


@releasing_output_dirs
def run_evaluation(args: EvaluationArguments) -> dict:
    """Load the model and test set, translate, score, and write hypotheses.txt and results.json.

    Returns the results (also in `output_dir`/results.json): the scores of `score_translations`, the
    decoding settings and speed, and, with `baseline_hypotheses`, the paired bootstrap test.
    """
    prepare_decoding_process(args)
    check_evaluation_arguments(args)
    check_precision(*inference_settings(args), torch.device(args.device).type)
    if args.language_pairs:
        return evaluate_directions(args)
    sources, references = _read_test_set(args)
    empty = [number for number, source in enumerate(sources, start=1) if not source.strip()]
    if empty:
        logger.warning(
            "%d empty source line(s) (the first: line %d) get an empty translation.",
            len(empty),
            empty[0],
        )
    _warn_empty_references(references)
    hypotheses_path = Path(args.output_dir) / "hypotheses.txt"
    _check_inputs_not_written(args, [hypotheses_path, Path(args.output_dir) / "results.json"])
    baseline = read_lines(args.baseline_hypotheses) if args.baseline_hypotheses else None
    if baseline is not None:
        check_parallel(
            baseline, references, f"baseline hypotheses in {args.baseline_hypotheses}", "references"
        )
    prepare_evaluation_dir(args)  # before loading and decoding, not after
    tokenizer = load_saved_tokenizer(
        args.model, "--model", trust_remote_code=args.trust_remote_code
    )
    directions = (
        [f"{args.source_lang}-{args.target_lang}"] if args.source_lang and args.target_lang else []
    )
    model = load_model_for_evaluation(args, directions)
    check_directions(
        model, tokenizer, [(args.source_lang, args.target_lang)], with_tags=args.add_language_tag
    )
    translations = translate_sentences(
        model,
        tokenizer,
        sources,
        language_tag=args.target_lang if args.add_language_tag else None,
        **decoding_settings(args),
    )
    results = {
        "model": args.model,
        "model_weights_sha256": weights_digest(args.model),
        "test_set": args.data or args.source_file,
        "split": args.split if args.data else None,
        "source_lang": args.source_lang,
        "target_lang": args.target_lang,
        "num_beams": args.num_beams,
        "length_penalty": args.length_penalty,
        "language_tag": args.add_language_tag,
        "max_tokens": args.max_tokens,
        **score_translations(translations.hypotheses, references, args.target_lang),
        "seconds": round(translations.seconds, 3),
        "sentences_per_second": round(translations.sentences_per_second, 2),
        "device": str(model.device),
        "freed_memory_kept": freed_memory_kept(),
        **precision_record(args),
        "use_shortlist": args.use_shortlist,
    }
    if baseline is not None:
        results["paired_bootstrap"] = {
            "baseline": args.baseline_hypotheses,
            **paired_bootstrap(
                translations.hypotheses, baseline, references, num_samples=args.bootstrap_samples
            ),
        }
    write_lines(translations.hypotheses, hypotheses_path)
    write_json(results, Path(args.output_dir) / "results.json")
    return results


def prepare_decoding_process(args: DecodingArguments) -> None:
    """What `args` sets for the whole process before anything is loaded: torch's CPU threads
    (--threads) and glibc keeping freed memory (--keep_freed_memory, `keep_freed_memory`: each
    decoding step allocates the self-attention cache a little larger than the last step did, which
    glibc otherwise serves with fresh pages; docs/inference.md has the measurements)."""
    set_threads(args.threads)
    if args.keep_freed_memory:
        keep_freed_memory()


def decoding_settings(args: DecodingArguments) -> dict:
    """`translate_sentences`' settings from `args` (the search, the batches, the length, the
    shortlist), one set for every decoding pass of an evaluation: the direct directions and both
    legs through a pivot."""
    return dict(
        num_beams=args.num_beams,
        length_penalty=args.length_penalty,
        max_tokens=args.max_tokens,
        **({} if args.max_new_tokens is None else {"max_new_tokens": args.max_new_tokens}),
        **({"use_shortlist": True} if args.use_shortlist else {}),
    )


def check_decoding_arguments(args: DecodingArguments) -> None:
    """The decoding numbers, the device and the precision of `args`, before any file is read or
    written."""
    check_decoding_settings(
        args.num_beams, args.length_penalty, args.max_tokens, args.max_new_tokens
    )
    check_device(args.device)
    check_precision(*inference_settings(args), torch.device(args.device).type)


def check_evaluation_arguments(args: EvaluationArguments) -> None:
    """The numbers, the device and the precision of `args`, before any file is read or written."""
    check_positive_int(args.max_pairs, "--max_pairs", allow_none=True)
    check_positive_int(args.bootstrap_samples, "--bootstrap_samples")
    check_decoding_arguments(args)
    if args.pivot and not args.language_pairs:
        raise ValueError(
            "--pivot translates the directions of a multilingual evaluation through a language: "
            "pass --language_pairs (e.g. en-de,de-en,de-fr --pivot en)."
        )


def _warn_empty_references(references: Sequence[str]) -> None:
    empty = [
        number for number, reference in enumerate(references, start=1) if not reference.strip()
    ]
    if empty:
        logger.warning(
            "%d empty reference line(s) (the first: line %d): their hypotheses are scored against "
            "nothing. Remove those pairs from both files if their references are missing.",
            len(empty),
            empty[0],
        )


def tagged_languages(tokenizer) -> list[str]:
    """The languages whose `<2xx>` tag the tokenizer reserves, sorted."""
    return sorted(token[2:-1] for token in tokenizer.get_vocab() if LANGUAGE_TAG.fullmatch(token))


def check_directions(
    model, tokenizer, directions: Sequence[tuple[str | None, str | None]], with_tags: bool
) -> None:
    """Refuse what the translation pipeline refuses, before decoding: with tags, a target whose
    `<2xx>` tag the tokenizer lacks (it would be encoded as unknown pieces) or a source outside the
    model's languages; without tags, a model trained with tags (it would translate into whichever
    language it guesses)."""
    tagged = tagged_languages(tokenizer)
    pairs = list(getattr(model.config, "language_pairs", None) or [])
    if not with_tags:
        if tagged:
            source, target = directions[0]
            raise ValueError(
                "The model's tokenizer reserves the language tags "
                f"{[f'<2{code}>' for code in tagged]}: the model "
                "was trained with the target tag in front of every source. Evaluate it with "
                "--add_language_tag, or "
                f"with --language_pairs {source or 'xx'}-{target or 'yy'}."
            )
        _warn_untrained_direction(pairs, directions[0])
        return
    if not tagged:
        raise ValueError(
            "The model has no language tags (its tokenizer reserves no <2xx> token): it is a "
            "bilingual model"
            f"{f' ({pairs[0]})' if len(pairs) == 1 else ''}. Evaluate it with --source_lang and "
            "--target_lang, "
            "without --language_pairs and --add_language_tag."
        )
    languages = sorted(set(tagged) | {code for pair in pairs for code in pair.split("-")})
    supported = (
        f"it translates into {tagged} from {languages} (trained directions: {pairs or 'unknown'}"
        "; others "
        "between these languages are zero-shot)"
    )
    for source, target in directions:
        if target is None:
            raise ValueError(
                "--add_language_tag needs --target_lang: the tag <2xx> names the target language."
            )
        if target not in tagged:
            raise ValueError(
                f"The model has no tag <2{target}> for the direction {source or '?'}-{target}: "
                f"{supported}."
            )
        # no pairs listed: nothing to go by
        if source is not None and pairs and source not in languages:
            raise ValueError(
                f"The model does not know the source language of {source}-{target}: {supported}."
            )


def _warn_untrained_direction(
    pairs: Sequence[str], direction: tuple[str | None, str | None]
) -> None:
    """A bilingual model asked for another direction than it was trained on (`language_pairs` of its
    config; a model fine-tuned from another one may still list the old direction, hence a
    warning)."""
    name = "-".join(code or "?" for code in direction)
    if pairs and None not in direction and name not in pairs:
        logger.warning(
            "The model's config lists the direction(s) %s, not %s: check "
            "--source_lang/--target_lang.",
            pairs,
            name,
        )


def prepare_evaluation_dir(
    args: EvaluationArguments, baseline_files: list[str] | None = None
) -> None:
    """Claim and check `args.output_dir` (`prepare_output_dir`); with --overwrite_output_dir, empty
    it first: an earlier evaluation's files (another direction's hypotheses, its pivot outputs) must
    not stand beside this one's. Refused when the folder is or holds one of the evaluation's
    inputs."""
    prepare_output_dir(args.output_dir, args.overwrite_output_dir)
    if args.overwrite_output_dir:
        clear_output_dir(
            args.output_dir,
            {
                "--model": args.model,
                "--data": args.data,
                "--source_file": args.source_file,
                "--reference_file": args.reference_file,
                "--baseline_hypotheses": args.baseline_hypotheses,
                "--baseline_results": args.baseline_results,
                "a baseline's hypotheses": baseline_files,
            },
        )


def _check_inputs_not_written(args: EvaluationArguments, outputs: list[Path]) -> None:
    """Refuse an input file that is one of the files this evaluation writes (with
    --overwrite_output_dir it would be replaced, and the scores would compare the system with
    itself)."""
    written = {output.resolve() for output in outputs}
    for flag, path in (
        ("--baseline_hypotheses", args.baseline_hypotheses),
        ("--source_file", args.source_file),
        ("--reference_file", args.reference_file),
    ):
        if path and Path(path).resolve() in written:
            raise ValueError(
                f"{flag} {path} is the file this evaluation writes; give another --output_dir."
            )


def inference_settings(args: DecodingArguments) -> tuple[str, str]:
    """(dtype, quantize) that `args` asks for: --precision's (auto: the fastest on this CPU's class,
    `precision.fastest_precision`), or --dtype and --quantize."""
    if args.precision is None:
        return args.dtype, args.quantize
    if (torch_dtype(args.dtype), args.quantize) != (torch.float32, "none"):
        raise ValueError(
            f"--precision {args.precision} sets the dtype and the quantisation itself: leave out "
            "--dtype "
            "and --quantize."
        )
    return precision_settings(args.precision, torch.device(args.device).type)


def precision_record(args: DecodingArguments) -> dict:
    """What results.json says of the precision: dtype, quantize, and the precision they make (with
    --precision auto, the one it chose)."""
    dtype, quantize = inference_settings(args)
    return {
        "dtype": dtype,
        "quantize": quantize,
        "precision": precision_name(dtype, quantize),
        "precision_requested": args.precision,
    }


def load_model_for_evaluation(args: DecodingArguments, directions: Sequence[str] = ()):
    """The model of `args.model` on `args.device`, in the precision `args` asks for
    (`inference_settings`, `precision.prepare_for_inference`); the settings are checked before the
    model is loaded, and with --use_shortlist that its shortlist was built for the `directions`
    decoded ("en-de")."""
    dtype, quantize = inference_settings(args)
    check_precision(dtype, quantize, torch.device(args.device).type)
    model = load_saved_model(args.model, "--model", trust_remote_code=args.trust_remote_code)
    if args.use_shortlist and getattr(model, "shortlist", None) is None:
        raise ValueError(
            f"--use_shortlist: {args.model} has no shortlist.safetensors; build it with "
            f"scripts/build_shortlist.py --model {args.model} --data ... (the training corpus)."
        )
    if args.use_shortlist:
        check_shortlist_direction(model.shortlist, directions)
    return prepare_for_inference(model.to(args.device), dtype=dtype, quantize=quantize)


def _read_test_set(args: EvaluationArguments) -> tuple[list[str], list[str]]:
    """(sources, references) from --data or from --source_file/--reference_file, checked for
    alignment."""
    if (args.data is None) == (args.source_file is None and args.reference_file is None):
        raise ValueError(
            "Give either --data (with --split, --source_lang, --target_lang) or both --source_file "
            "and --reference_file."
        )
    if args.data is not None:
        if not args.source_lang or not args.target_lang:
            raise ValueError("--data needs --source_lang and --target_lang.")
        pairs = load_parallel_corpus(
            args.data, args.source_lang, args.target_lang, args.split, max_pairs=args.max_pairs
        )["translation"]
        return [pair[args.source_lang] for pair in pairs], [
            pair[args.target_lang] for pair in pairs
        ]
    if args.source_file is None or args.reference_file is None:
        raise ValueError("--source_file and --reference_file go together: give both.")
    if Path(args.source_file).resolve() == Path(args.reference_file).resolve():
        raise ValueError(
            f"--source_file and --reference_file are the same file ({args.source_file}): the "
            "translations "
            "would be scored against their own sources. Give the target-language references."
        )
    sources, references = read_lines(args.source_file), read_lines(args.reference_file)
    check_parallel(
        sources,
        references,
        f"sources in {args.source_file}",
        f"references in {args.reference_file}",
    )
    return sources[: args.max_pairs], references[: args.max_pairs]


def write_json(results: dict, path: str | os.PathLike) -> None:
    """Write `results` to `path` atomically (a temporary file beside it, then a rename)."""
    atomic_write_json(path, results)


def write_lines(lines: Sequence[str], path: str | os.PathLike) -> None:
    """One line per hypothesis, atomically (a line break inside a hypothesis becomes a space, so
    that `files.read_lines` gives the lines back in the same places)."""
    atomic_write_text(path, lines_text(lines))


def lines_text(lines: Sequence[str]) -> str:
    """`lines` as the text of a line file, a line break inside one of them becoming a space (see
    `write_lines`)."""
    return "".join(line.replace("\n", " ").replace("\r", " ") + "\n" for line in lines)


def _language_tag_id(tokenizer, language: str | None) -> int | None:
    if language is None:
        return None
    tag_id = tokenizer.convert_tokens_to_ids(f"<2{language}>")
    if tag_id is None or tag_id == tokenizer.unk_token_id:
        raise ValueError(
            f"The tokenizer has no language tag '<2{language}>': tags are only for models trained "
            "with them (--add_language_tag); leave the tag out otherwise."
        )
    return tag_id


def check_parallel(
    hypotheses: Sequence[str], references: Sequence[str], name: str, other: str
) -> None:
    for what, texts in ((name, hypotheses), (other, references)):
        if isinstance(texts, str) or not all(isinstance(text, str) for text in texts):
            raise ValueError(f"`{what}` must be a list of strings, one sentence each.")
    if len(hypotheses) != len(references):
        raise ValueError(
            f"`{name}` has {len(hypotheses)} sentences but `{other}` has {len(references)}: they "
            "must be "
            "line-aligned (one hypothesis per reference, in the same order)."
        )
    if not references:
        raise ValueError(f"`{name}` and `{other}` are empty: there is nothing to score.")


def _sentence_statistics(
    hypotheses: Sequence[str], references: Sequence[str], tokenized: bool
) -> np.ndarray:
    """Per-sentence BLEU statistics [hypothesis length, reference length, matches 1-4, totals
    1-4]."""
    hypotheses, references = unicode_nfc(hypotheses), unicode_nfc(references)
    if tokenized:
        hypotheses = [tokenize_for_bleu(text) for text in hypotheses]
        references = [tokenize_for_bleu(text) for text in references]
    metric = BLEU(tokenize="none" if tokenized else "13a", effective_order=True, force=True)
    rows = []
    for hypothesis, reference in zip(hypotheses, references, strict=True):
        score = metric.sentence_score(hypothesis, [reference])
        rows.append([score.sys_len, score.ref_len, *score.counts, *score.totals])
    return np.array(rows, dtype=np.int64)


def _bleu_from_statistics(statistics: np.ndarray) -> float:
    """Corpus BLEU from summed sentence statistics, with sacreBLEU's corpus-level defaults."""
    sys_len, ref_len, counts, totals = (
        statistics[0],
        statistics[1],
        statistics[2:6],
        statistics[6:10],
    )
    return BLEU.compute_bleu(
        counts.tolist(), totals.tolist(), int(sys_len), int(ref_len), smooth_method="exp"
    ).score


def _interval(scores: np.ndarray) -> dict:
    low, high = np.percentile(scores, [2.5, 97.5])
    return {
        "mean": round(float(scores.mean()), 2),
        "low": round(float(low), 2),
        "high": round(float(high), 2),
    }


# --- Evaluation over many directions --------------------------------------------------------------


def direction_groups(
    directions: Sequence[str], subset: Sequence[str] = (), pivot: str = PIVOT
) -> dict[str, list]:
    """{"out_of_english": [...], "into_english": [...], "zero_shot": [...], "subset": [...]} (empty
    groups left out)."""
    pairs = [direction.split("-") for direction in directions]
    groups = {
        f"out_of_{_name(pivot)}": [f"{s}-{t}" for s, t in pairs if s == pivot],
        f"into_{_name(pivot)}": [f"{s}-{t}" for s, t in pairs if t == pivot],
        "zero_shot": [f"{s}-{t}" for s, t in pairs if pivot not in (s, t)],
        "all": list(directions),
    }
    unknown = sorted(set(subset) - set(directions))
    if unknown:
        raise ValueError(
            f"--average_subset names directions that were not evaluated: {unknown}; "
            f"evaluated: {list(directions)}."
        )
    if subset:
        groups["subset"] = list(subset)
    return {name: members for name, members in groups.items() if members}


def _name(code: str) -> str:
    return "english" if code == "en" else code


def group_averages(
    scores: Mapping[str, Mapping[str, float]],
    groups: Mapping[str, Sequence[str]],
    metrics: Sequence[str] = ("sacrebleu", "tokenized_bleu", "chrf", "off_target_rate"),
) -> dict:
    """{group: {"directions": n, metric: mean over the group's directions}} (the BLEU94 /
    BLEU4 style)."""
    averages = {}
    for group, members in groups.items():
        averages[group] = {"directions": len(members)}
        for metric in metrics:
            values = [
                scores[member][metric]
                for member in members
                if scores[member].get(metric) is not None
            ]
            if values:
                averages[group][metric] = round(
                    sum(values) / len(values), 4 if metric == "off_target_rate" else 2
                )
    return averages


def win_ratio(system: Mapping[str, float], baseline: Mapping[str, float]) -> dict:
    """Share of the common directions where `system` scores higher than `baseline` (Xu et al. 2024,
    Table 7, "WR")."""
    common = [direction for direction in system if direction in baseline]
    if not common:
        raise ValueError(
            f"The baseline has none of the evaluated directions {list(system)}; it has "
            f"{list(baseline)}."
        )
    wins = [direction for direction in common if system[direction] > baseline[direction]]
    ties = [direction for direction in common if system[direction] == baseline[direction]]
    return {
        "directions": len(common),
        "wins": len(wins),
        "ties": len(ties),
        "win_ratio": round(len(wins) / len(common), 4),
    }


# --- Off-target translation -----------------------------------------------------------------------


class LanguageIdentifier:
    """Offline language identification with py3langid (its model ships inside the wheel: no
    download).

    Restricted to `languages` (the model's languages): the question is "which of the model's
    languages is this", and a restricted classifier is far more reliable on short sentences than one
    over 97 languages. `languages=None` keeps all of py3langid's languages.
    """

    def __init__(self, languages: Sequence[str] | None):
        try:
            from py3langid.langid import MODEL_FILE
            from py3langid.langid import LanguageIdentifier as Identifier
        except ImportError as error:
            raise ImportError(
                "Off-target rates need py3langid: pip install 'modeling-dwlstm[langid]' (the train "
                "extra includes it), or pip install py3langid."
            ) from error
        self.identifier = Identifier.from_model_file(MODEL_FILE)
        if languages is None:
            return
        unknown = sorted(set(languages) - set(self.identifier.nb_classes))
        if unknown:
            raise ValueError(
                f"py3langid does not know the languages {unknown}; off-target rates cannot be "
                "measured "
                "for them."
            )
        self.identifier.set_languages(sorted(set(languages)))

    def classify(self, texts: Sequence[str]) -> list[str]:
        return [self.identifier.classify(text)[0] for text in texts]


def off_target_rate(
    hypotheses: Sequence[str], target_lang: str, identifier: LanguageIdentifier
) -> float:
    """Share of `hypotheses` not identified as `target_lang` (an empty output counts as off
    target)."""
    if not hypotheses:
        raise ValueError("No hypotheses to check.")
    languages = identifier.classify(hypotheses)
    off = sum(
        1
        for text, language in zip(hypotheses, languages)
        if not text.strip() or language != target_lang
    )
    return round(off / len(hypotheses), 4)


def score_off_target(
    hypotheses: Sequence[str], target_lang: str | None, languages: Sequence[str] | None = None
) -> dict:
    """``{"off_target_rate", "language_id"}`` of `hypotheses` for `target_lang`: the `evaluate`
    module's "off_target" configuration. `languages`: the candidates (the model's languages; None:
    py3langid's 97)."""
    if not target_lang:
        raise ValueError(
            "The off-target rate needs the target language: pass target_lang='de' (an ISO 639-1 "
            "code)."
        )
    identifier = LanguageIdentifier(
        None if languages is None else sorted({*languages, target_lang})
    )
    return {
        "off_target_rate": off_target_rate(list(hypotheses), target_lang, identifier),
        "language_id": "py3langid"
        + (f", restricted to {sorted({*languages, target_lang})}" if languages else ""),
    }


@releasing_output_dirs
def evaluate_directions(args) -> dict:
    """`run_evaluation` for many directions (`args.language_pairs`): one decoding pass, batches
    mixing directions.

    Writes ``output_dir/DIRECTION/hypotheses.txt`` and ``output_dir/results.json`` with the
    settings, ``directions`` (the scores of `evaluation.score_translations` plus ``off_target_rate``
    per direction), ``averages`` per group (`direction_groups`) and, given `args.baseline_results`,
    ``win_ratio`` (over sacreBLEU, overall and per group) with ``paired_bootstrap`` per direction
    (against the baseline's hypotheses of that direction). With `args.pivot` each direction without
    the pivot language also gets ``pivot``, the scores of its translation through it
    (`translate_through_pivot`; ``DIRECTION/pivot_hypotheses.txt``), and the groups of such
    directions their ``pivot_*`` averages. Together: Xu et al. 2024, Table 7's report
    (`results_table`).
    """
    if (
        args.data is None
        or args.source_lang
        or args.target_lang
        or args.source_file
        or args.baseline_hypotheses
    ):
        raise ValueError(
            "--language_pairs takes the test set from --data (with --split) and replaces "
            "--source_lang/--target_lang, --source_file/--reference_file and "
            "--baseline_hypotheses (use --baseline_results)."
        )
    languages = (
        corpus_languages(args.data, args.split)
        if args.language_pairs.strip() == ALL_PAIRS
        else None
    )
    names = [
        pair_name(direction) for direction in parse_language_pairs(args.language_pairs, languages)
    ]
    subset = (
        [pair_name(direction) for direction in parse_language_pairs(args.average_subset)]
        if args.average_subset
        else []
    )
    groups = direction_groups(names, subset)
    pivoted = pivot_directions(names, args.pivot) if args.pivot else []
    if (
        args.baseline_results
        and Path(args.baseline_results).resolve().parent == Path(args.output_dir).resolve()
    ):
        raise ValueError(
            f"--baseline_results {args.baseline_results} is in the folder this evaluation writes "
            "(its "
            "results.json and DIRECTION/hypotheses.txt would be replaced); give another "
            "--output_dir."
        )
    baseline = _read_baseline(args.baseline_results, names) if args.baseline_results else None
    tests = {
        name: load_parallel_corpus(
            args.data, *name.split("-"), args.split, max_pairs=args.max_pairs
        )["translation"]
        for name in names
    }
    identifier, off_target_skipped = _off_target_identifier(args.off_target, names)
    empty = [
        f"{name} line {number}"
        for name in names
        for number, pair in enumerate(tests[name], start=1)
        if not pair[name.split("-")[0]].strip()
    ]
    if empty:
        logger.warning(
            "%d empty source line(s) (the first: %s) get an empty translation.",
            len(empty),
            empty[0],
        )
    baseline_hypotheses = (
        {name: read_lines(path) for name, path in baseline.items()} if baseline else None
    )
    for name in baseline_hypotheses or ():
        check_parallel(
            baseline_hypotheses[name],
            [pair[name.split("-")[1]] for pair in tests[name]],
            f"baseline hypotheses in {baseline[name]}",
            f"the {name} references",
        )
    # before loading and decoding
    prepare_evaluation_dir(args, list(baseline.values()) if baseline else None)
    tokenizer = load_saved_tokenizer(
        args.model, "--model", trust_remote_code=args.trust_remote_code
    )
    legs = [pair_name(leg) for name in pivoted for leg in pivot_legs(name, args.pivot)]
    model = load_model_for_evaluation(args, list(dict.fromkeys(names + legs)))
    check_directions(model, tokenizer, [tuple(name.split("-")) for name in names], with_tags=True)
    if pivoted:
        check_directions(
            model,
            tokenizer,
            [leg for name in pivoted for leg in pivot_legs(name, args.pivot)],
            True,
        )
    tagged = [
        tag_source(pair[name.split("-")[0]], name.split("-")[1])
        for name in names
        for pair in tests[name]
    ]
    translations = translate_sentences(model, tokenizer, tagged, **decoding_settings(args))
    directions, start = {}, 0
    for name in names:
        source_lang, target_lang = name.split("-")
        hypotheses = translations.hypotheses[start : start + len(tests[name])]
        references = [pair[target_lang] for pair in tests[name]]
        start += len(tests[name])
        directions[name] = score_translations(hypotheses, references, target_lang)
        directions[name]["off_target_rate"] = (
            off_target_rate(hypotheses, target_lang, identifier) if identifier else None
        )
        if baseline is not None:
            directions[name]["paired_bootstrap"] = {
                "baseline": str(baseline[name]),
                **paired_bootstrap(
                    hypotheses,
                    baseline_hypotheses[name],
                    references,
                    num_samples=args.bootstrap_samples,
                ),
            }
        write_lines(hypotheses, Path(args.output_dir) / name / "hypotheses.txt")
    averages = group_averages(directions, groups)
    pivot_seconds = (
        _score_pivot(
            model, tokenizer, tests, pivoted, args, identifier, directions, averages, groups
        )
        if pivoted
        else None
    )
    results = {
        "model": args.model,
        "model_weights_sha256": weights_digest(args.model),
        "test_set": args.data,
        "split": args.split,
        "num_beams": args.num_beams,
        "length_penalty": args.length_penalty,
        "max_tokens": args.max_tokens,
        "language_id": "py3langid, restricted to the evaluated languages" if identifier else None,
        "off_target_skipped": off_target_skipped,
        "seconds": round(translations.seconds, 3),
        "sentences_per_second": round(translations.sentences_per_second, 2),
        "device": str(model.device),
        "freed_memory_kept": freed_memory_kept(),
        **precision_record(args),
        "use_shortlist": args.use_shortlist,
        "subset": subset,
        "pivot": args.pivot,
        "pivot_seconds": pivot_seconds,
        "directions": directions,
        "averages": averages,
    }
    if baseline is not None:
        baseline_scores = json.loads(Path(args.baseline_results).read_text())["directions"]
        system = {name: scores["sacrebleu"] for name, scores in directions.items()}
        reference = {name: baseline_scores[name]["sacrebleu"] for name in names}
        results["win_ratio"] = {
            "baseline": args.baseline_results,
            "metric": "sacrebleu",
            **win_ratio(system, reference),
            "groups": {
                group: win_ratio({name: system[name] for name in members}, reference)
                for group, members in groups.items()
                if group != "all"
            },
        }
    write_json(results, Path(args.output_dir) / "results.json")
    return results


def pivot_directions(names: Sequence[str], pivot: str) -> list[str]:
    """The directions of `names` that do not involve `pivot` (the zero-shot ones, for an
    English-centric model)."""
    directions = [name for name in names if pivot not in name.split("-")]
    if not directions:
        raise ValueError(
            f"--pivot {pivot}: every evaluated direction ({', '.join(names)}) involves {pivot}; "
            "pivot translation is for directions without it, e.g. de-fr through en."
        )
    return directions


def pivot_legs(name: str, pivot: str) -> list[tuple[str, str]]:
    """The two directions of X -> pivot -> Y for "X-Y"."""
    source, target = name.split("-")
    return [(source, pivot), (pivot, target)]


def translate_through_pivot(
    model,
    tokenizer,
    tests: Mapping[str, Sequence[Mapping[str, str]]],
    names: Sequence[str],
    pivot: str,
    **decoding,
) -> tuple[dict[str, list[str]], dict[str, list[str]], float]:
    """X -> pivot -> Y with the same model for each direction "X-Y" of `names`, the test pairs of
    `tests[name]`: ({direction: translations into Y}, {direction: the pivot-language translations},
    seconds). Each distinct source sentence goes into the pivot language once (de-fr and de-cs share
    the German ones), in one decoding pass; then every intermediate into its direction's target
    language, in a second. `decoding`: `translate_sentences`'s settings. An empty source, or an
    empty intermediate, gives "" without decoding."""
    first_leg = {}  # (language, sentence) -> its position in the first pass
    for name in names:
        source = name.split("-")[0]
        for pair in tests[name]:
            first_leg.setdefault((source, pair[source]), len(first_leg))
    into_pivot = translate_sentences(
        model, tokenizer, [_tagged(text, pivot) for _, text in first_leg], **decoding
    )
    intermediates = {
        name: [
            into_pivot.hypotheses[first_leg[(name.split("-")[0], pair[name.split("-")[0]])]]
            for pair in tests[name]
        ]
        for name in names
    }
    second_leg = [
        _tagged(text, name.split("-")[1]) for name in names for text in intermediates[name]
    ]
    out_of_pivot = translate_sentences(model, tokenizer, second_leg, **decoding)
    translations, start = {}, 0
    for name in names:
        translations[name] = out_of_pivot.hypotheses[start : start + len(tests[name])]
        start += len(tests[name])
    return translations, intermediates, into_pivot.seconds + out_of_pivot.seconds


def _tagged(text: str, target_lang: str) -> str:
    return tag_source(text, target_lang) if text.strip() else ""


def _score_pivot(
    model,
    tokenizer,
    tests,
    names,
    args,
    identifier,
    directions: dict,
    averages: dict,
    groups: Mapping[str, Sequence[str]],
) -> float:
    """Translate `names` through `args.pivot`, add each one's ``pivot`` scores to `directions` and
    the ``pivot_*`` averages to the groups made only of such directions, write
    DIRECTION/pivot_hypotheses.txt (and the intermediates, DIRECTION/pivot_{pivot}.txt); return the
    seconds."""
    translations, intermediates, seconds = translate_through_pivot(
        model, tokenizer, tests, names, args.pivot, **decoding_settings(args)
    )
    for name, hypotheses in translations.items():
        target_lang = name.split("-")[1]
        references = [pair[target_lang] for pair in tests[name]]
        directions[name]["pivot"] = {
            "via": args.pivot,
            **score_translations(hypotheses, references, target_lang),
            "off_target_rate": off_target_rate(hypotheses, target_lang, identifier)
            if identifier
            else None,
        }
        write_lines(hypotheses, Path(args.output_dir) / name / "pivot_hypotheses.txt")
        write_lines(intermediates[name], Path(args.output_dir) / name / f"pivot_{args.pivot}.txt")
    for group, members in groups.items():
        if all("pivot" in directions[member] for member in members):
            pivot_scores = group_averages(
                {member: directions[member]["pivot"] for member in members}, {group: members}
            )
            averages[group].update(
                {
                    f"pivot_{metric}": value
                    for metric, value in pivot_scores[group].items()
                    if metric != "directions"
                }
            )
            if averages[group].get("pivot_sacrebleu"):
                averages[group]["direct_share_of_pivot"] = round(
                    averages[group]["sacrebleu"] / averages[group]["pivot_sacrebleu"], 4
                )
    return round(seconds, 3)


def _off_target_identifier(
    wanted: bool, names: Sequence[str]
) -> tuple[LanguageIdentifier | None, str | None]:
    """(the identifier, None), or (None, why off-target rates are skipped): not asked for, or
    py3langid is not installed (the rest of the evaluation does not need it; results.json and the
    log say it was skipped)."""
    if not wanted:
        return None, "--off_target false"
    try:
        return LanguageIdentifier(
            sorted({code for name in names for code in name.split("-")})
        ), None
    except ImportError as error:
        reason = f"{error} Off-target rates are skipped."
        logger.warning(reason)
        return None, reason


def _read_baseline(path: str, names: Sequence[str]) -> dict[str, Path]:
    """{direction: the baseline's hypotheses file}, checked before decoding starts."""
    try:
        evaluated = json.loads(Path(path).read_text())["directions"]
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise ValueError(
            f"--baseline_results {path}: not the results.json of a multilingual evaluation ("
            f"{error})."
        ) from error
    missing = [name for name in names if name not in evaluated]
    files = {name: Path(path).parent / name / "hypotheses.txt" for name in names}
    missing += [
        f"{name} (no {file})"
        for name, file in files.items()
        if name in evaluated and not file.is_file()
    ]
    if missing:
        raise ValueError(
            f"--baseline_results {path} lacks the directions {missing}; it has {sorted(evaluated)}."
        )
    return files


def results_table(results: Mapping, baseline: Mapping | None = None) -> list[str]:
    """Markdown lines for a multilingual results.json, Xu et al. 2024, Table 7's report: one row per
    direction, then one per group average (out of / into English, zero-shot, all, the chosen
    subset), with chrF and the off-target rate; with `--pivot` the scores through the pivot
    language; with `baseline` (another results.json of the same directions) its sacreBLEU and the
    paired bootstrap p-value stored in `results` (evaluated with --baseline_results); then the win
    ratios, overall and per group, and the subset's averages out of and into English (the
    papers' BLEU4)."""
    with_baseline = baseline is not None
    if with_baseline:
        missing = [
            name for name in results["directions"] if name not in baseline.get("directions", {})
        ]
        if missing:
            raise ValueError(
                f"The baseline has no {missing} (it has {sorted(baseline.get('directions', {}))}"
                "): give "
                "the baseline's results.json of the same directions."
            )
    with_pivot = any("pivot" in scores for scores in results["directions"].values())
    header = (
        "| direction | sacreBLEU | chrF | off-target |"
        + (" pivot sacreBLEU | pivot off-target |" if with_pivot else "")
        + (" baseline sacreBLEU | p (bootstrap) |" if with_baseline else "")
    )
    lines = [header, "|" + "---|" * (header.count("|") - 1)]

    for name, scores in results["directions"].items():
        row = [
            name,
            _cell(scores["sacrebleu"]),
            _cell(scores["chrf"]),
            _cell(scores.get("off_target_rate"), True),
        ]
        if with_pivot:
            pivot = scores.get("pivot", {})
            row += [_cell(pivot.get("sacrebleu")), _cell(pivot.get("off_target_rate"), True)]
        if with_baseline:
            bootstrap = scores.get("paired_bootstrap", {})
            row += [
                _cell(baseline["directions"][name]["sacrebleu"]),
                _cell(bootstrap.get("p_value")),
            ]
        lines.append("| " + " | ".join(row) + " |")
    for group, scores in results["averages"].items():
        row = [
            f"**{group.replace('_', ' ')}** ({scores['directions']})",
            _cell(scores.get("sacrebleu")),
            _cell(scores.get("chrf")),
            _cell(scores.get("off_target_rate"), True),
        ]
        if with_pivot:
            row += [
                _cell(scores.get("pivot_sacrebleu")),
                _cell(scores.get("pivot_off_target_rate"), True),
            ]
        if with_baseline:
            row += [_cell(baseline["averages"].get(group, {}).get("sacrebleu")), ""]
        lines.append("| " + " | ".join(row) + " |")
    return lines + _summary_lines(results)


def _cell(value, percent=False) -> str:
    if value is None:
        return "-"
    return f"{100 * value:.1f}%" if percent else f"{value:.2f}"


def _summary_lines(results: Mapping) -> list[str]:
    """The lines under `results_table`'s table: win ratios, the pivot comparison, the subset
    per side."""
    lines = []
    if "win_ratio" in results:
        ratio = results["win_ratio"]
        per_group = "; ".join(
            f"{group.replace('_', ' ')} {each['wins']} of {each['directions']} ("
            f"{each['win_ratio']:.2f})"
            for group, each in ratio.get("groups", {}).items()
        )
        lines += [
            "",
            f"Win ratio over the baseline ({ratio['metric']}): {ratio['wins']} of "
            f"{ratio['directions']} directions ({ratio['win_ratio']:.2f}), {ratio['ties']} ties"
            + (f"; {per_group}." if per_group else "."),
        ]
    zero_shot = results["averages"].get("zero_shot", {})
    if zero_shot.get("pivot_sacrebleu") is not None:
        share = zero_shot.get("direct_share_of_pivot")
        lines += [
            "",
            f"Zero-shot: direct {zero_shot['sacrebleu']:.2f} sacreBLEU, through "
            f"{results.get('pivot')} {zero_shot['pivot_sacrebleu']:.2f}"
            + (f" (direct = {100 * share:.0f}% of pivot)" if share else "")
            + ".",
        ]
    sides = subset_sides(results)
    if sides:
        lines += [
            "",
            "Subset averages (sacreBLEU): "
            + "; ".join(
                f"{side.replace('_', ' ')} {value:.2f} ({count})"
                for side, (value, count) in sides.items()
            )
            + ".",
        ]
    return lines


def subset_sides(results: Mapping) -> dict[str, tuple[float, int]]:
    """{"out_of_english": (mean sacreBLEU, directions), "into_english": ...} over the
    `--average_subset` directions of each side (the papers' BLEU4 for En->xx and xx->En); empty
    without a subset."""
    subset = results.get("subset") or []
    sides = {}
    for side in ("out_of_english", "into_english"):
        members = [
            name
            for name in subset
            if name in direction_groups(list(results["directions"])).get(side, [])
        ]
        if members:
            values = [results["directions"][name]["sacrebleu"] for name in members]
            sides[side] = (round(sum(values) / len(values), 2), len(members))
    return sides


def systems_table(systems: Mapping[str, Mapping]) -> list[str]:
    """Markdown lines of Xu et al. 2024, Table 7 over several systems' multilingual results.json (by
    name): sacreBLEU averaged out of English, into English and over the zero-shot directions, the
    subset's averages (BLEU4) and the win ratio of each side (of results evaluated with
    --baseline_results), the zero-shot off-target rate, the pivot sacreBLEU and the direct share of
    it (of results evaluated with --pivot)."""
    header = (
        "| system | out of en | subset | WR | into en | subset | WR | zero-shot | off-target | "
        "pivot | direct / pivot |"
    )
    lines = [header, "|" + "---|" * (header.count("|") - 1)]
    for name, results in systems.items():
        averages, sides = results["averages"], subset_sides(results)
        ratios = results.get("win_ratio", {}).get("groups", {})
        zero_shot = averages.get("zero_shot", {})
        row = [name]
        for side in ("out_of_english", "into_english"):
            ratio = ratios.get(side, {}).get("win_ratio")
            row += [
                _cell(averages.get(side, {}).get("sacrebleu")),
                _cell(sides.get(side, (None,))[0]),
                "-" if ratio is None else f"{100 * ratio:.1f}%",
            ]
        row += [
            _cell(zero_shot.get("sacrebleu")),
            _cell(zero_shot.get("off_target_rate"), True),
            _cell(zero_shot.get("pivot_sacrebleu")),
            _cell(zero_shot.get("direct_share_of_pivot"), True),
        ]
        lines.append("| " + " | ".join(row) + " |")
    return lines
