"""Parallel corpora for the translation models, from any source, in the Hub's translation schema.

`load_parallel_corpus` returns a `datasets.Dataset` with one column, ``translation``, each row
``{source_lang: "...", target_lang: "..."}`` (the schema of the Hub's wmt14 / wmt15 / opus-100),
read from

- a Hub dataset: ``"wmt14"`` (de-en, fr-en), ``"wmt15"`` (cs-en), ``"opus100"`` (any xx-en pair), or
  any other Hub id with that schema (``hub_config`` names its configuration);
- a local folder of aligned files ``{split}.{lang}[.gz]`` (Multi30k's layout) or
  ``{split}.jsonl[.gz]``, or a folder of such folders, one per language pair named like ``de-en``
  (OPUS-100's layout);
- a JSON-lines file of ``{"translation": {"en": ..., "de": ...}}`` or ``{"en": ..., "de": ...}``
  pairs.

A local corpus is read once into a memory-mapped Arrow file under the `datasets` cache
(`corpus_cache_dir`, keyed by the files' path, size and time): millions of pairs are never held in
memory. The Hub's ``validation`` splits are not the papers' (Xu et al. 2020, §5: WMT14 validates on
newstest2012+2013, the Hub on newstest2013 alone): for the papers' validation sets use a local
folder.

Local files are checked strictly, since a silent misalignment ruins a model: mismatched line counts,
empty sides, missing languages, lone-CR line ends and unreadable files raise a ValueError naming the
file and the line; `check_unknown_tokens` refuses pairs the tokenizer cannot spell. A Hub dataset's
few empty pairs are dropped and counted. `tokenize_pairs` encodes the pairs (in `num_proc`
processes, cached) and drops those longer than `max_length` tokens on either side (256 in the
papers), logging how many.
"""

import gzip
import hashlib
import itertools
import json
import logging
import os
import re
import unicodedata
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import datasets
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from datasets.arrow_writer import ArrowWriter
from datasets.fingerprint import Hasher

from modeling_dwlstm.tokenization_dwlstm import (
    SPECIAL_TOKENS,
    normalizes_unicode,
    train_joint_bpe_tokenizer,
)

from .files import (
    BYTE_ORDER_MARK,
    check_hub_reachable,
    check_line_ends,
    looks_like_hub_id,
    strip_line_end,
)

logger = logging.getLogger(__name__)

# en, yue, zh_Hant: as the tokenizer's <2xx> tags
LANGUAGE_CODE = re.compile(r"[a-z]{2,3}(?:_[A-Za-z0-9]+)*")
JSON_LINES_SUFFIXES = (".jsonl", ".json", ".jsonl.gz", ".json.gz")

# Short names of the papers' corpora -> (Hub repository, how its configurations are named).
HUB_CORPORA = {
    "wmt14": ("wmt/wmt14", "xx-en"),
    "wmt15": ("wmt/wmt15", "xx-en"),
    "opus100": ("Helsinki-NLP/opus-100", "sorted"),
}


def load_parallel_corpus(
    source: str | Path,
    source_lang: str,
    target_lang: str,
    split: str = "train",
    max_pairs: int | None = None,
    hub_config: str | None = None,
) -> datasets.Dataset:
    """Load the `split` pairs of `source` as a Dataset with a ``translation`` column (see the module
    docstring).

    Args: source: a Hub name ("wmt14", "wmt15", "opus100" or a Hub id), a folder of
        ``{split}.{lang}[.gz]``
            files, or a JSON-lines file (``.jsonl`` / ``.json``, optionally gzipped; `split` is then
            unused).
        source_lang / target_lang: language codes such as "en", "de". split: "train", "validation",
        "test" on the Hub; the file prefix in a folder ("train", "val", ...). max_pairs: keep only
        the first `max_pairs` pairs (quick experiments, tests). hub_config: the Hub configuration,
        when the default ("de-en" for WMT, the sorted pair for
            OPUS-100 and other ids) is not the right one.
    """
    for name, language in (("source_lang", source_lang), ("target_lang", target_lang)):
        if not isinstance(language, str) or not LANGUAGE_CODE.fullmatch(language):
            raise ValueError(
                f"`{name}` must be a language code such as 'en' or 'de', got {language!r}."
            )
    if source_lang == target_lang:
        raise ValueError(
            f"`source_lang` and `target_lang` are both {source_lang!r}; they must differ."
        )
    if max_pairs is not None and (
        isinstance(max_pairs, bool) or not isinstance(max_pairs, int) or max_pairs < 1
    ):
        raise ValueError(f"`max_pairs` must be a positive integer or None, got {max_pairs!r}.")
    path = Path(source)
    languages = (source_lang, target_lang)
    if path.is_dir():
        files = local_corpus_files(path, split, languages)
    elif path.is_file() or str(source).endswith(JSON_LINES_SUFFIXES):
        files = (path,)
    else:
        _check_hub_name(str(source))
        return _load_hub_corpus(str(source), languages, split, max_pairs, hub_config)
    return _cached_local_corpus(files, languages, max_pairs)


def _check_hub_name(name: str) -> None:
    """Refuse a name shaped like a local path ("data/multi30k/en", "./m30k") that does not exist,
    before `datasets` asks the Hub for it (which can take a minute to fail)."""
    if ("/" in name or name.startswith((".", "~"))) and not looks_like_hub_id(name):
        raise ValueError(
            f"{name}: no such folder or file (a Hub dataset id looks like 'user/name'). Check "
            "the path."
        )


def pairs_to_dataset(pairs: list[dict[str, str]], languages: tuple[str, str]) -> datasets.Dataset:
    """A Dataset with the Hub's schema: ``translation: Translation(languages=[source, target])``."""
    features = datasets.Features({"translation": datasets.Translation(languages=list(languages))})
    return datasets.Dataset.from_dict({"translation": pairs}, features=features)


def tokenize_pairs(
    dataset: datasets.Dataset,
    tokenizer,
    source_lang: str,
    target_lang: str,
    max_length: int | None = 256,
    add_language_tag: bool = False,
    num_proc: int | None = None,
) -> datasets.Dataset:
    """Tokenize the pairs into ``input_ids``, ``attention_mask`` and ``labels``, dropping
    long pairs.

    A pair is dropped when either side has more than `max_length` tokens (``</s>`` included); the
    count is logged. `add_language_tag` puts the target-language tag ``<2xx>`` in front of the
    source, as the multilingual models of Xu et al. 2024, §3.5 need (the tokenizer must have the tag
    as a special token). The ids are the tokenizer's own
    (`tokenizer(sources, text_target=targets)`), computed by `encode_pairs`; the result is cached
    beside the corpus's Arrow files, so a second run with the same corpus, tokenizer and settings
    reads it back instead of tokenizing again.
    """
    tag = check_language_tag(tokenizer, target_lang, add_language_tag)
    prefix = f"{tag} " if add_language_tag else ""
    check_max_length(max_length)

    def texts(table: pa.Table) -> tuple[list[str], list[str]]:
        pairs = table.column("translation")
        sources = pc.struct_field(pairs, source_lang).to_pylist()
        return [prefix + text for text in sources] if prefix else sources, pc.struct_field(
            pairs, target_lang
        ).to_pylist()

    return tokenize_texts(
        dataset, tokenizer, texts, max_length, num_proc, settings=(source_lang, target_lang, prefix)
    )


def check_language_tag(tokenizer, target_lang: str, add_language_tag: bool) -> str:
    """The target tag ``<2xx>``; refused when asked for and missing, or present and not asked
    for."""
    tag = f"<2{target_lang}>"
    has_tag = tag in tokenizer.get_vocab()
    if add_language_tag and not has_tag:
        raise ValueError(
            f"The tokenizer has no language tag {tag!r}: train it with that tag reserved."
        )
    if has_tag and not add_language_tag:  # the model would never see the tag the pipeline gives it
        raise ValueError(
            f"The tokenizer reserves the language tag {tag!r}, and pipeline('translation') puts "
            "it in front of every "
            "source: train with add_language_tag=True (--add_language_tag), or use a tokenizer "
            "without language "
            "tags for a bilingual model."
        )
    return tag


def warn_unnormalized_text(texts: Sequence[str], tokenizer, what: str = "sentences") -> int:
    """Warn when `tokenizer` does not compose Unicode (one saved before NFC normalization was added
    to `train_joint_bpe_tokenizer`) and some `texts` are not in NFC: their decomposed letters ("u" +
    combining diaeresis, as macOS and some editors write them) are read as they are, mostly as
    <unk>. Returns how many."""
    if normalizes_unicode(tokenizer):
        return 0
    count = sum(not unicodedata.is_normalized("NFC", text) for text in texts)
    if count:
        logger.warning(
            "%d of %d %s are not in Unicode NFC (decomposed accents), and the tokenizer, saved "
            "before NFC normalization was added, reads them as they are (mostly <unk>): convert "
            "the text to NFC (unicodedata.normalize('NFC', text)), or train a new tokenizer.",
            count,
            len(texts),
            what,
        )
    return count


def check_max_length(max_length: int | None) -> None:
    if max_length is not None and (
        isinstance(max_length, bool) or not isinstance(max_length, int) or max_length < 1
    ):
        raise ValueError(f"`max_length` must be a positive integer or None, got {max_length!r}.")


# Changes whenever `encode_pairs` could give other ids or columns for the same input: cached results
# are then recomputed instead of reused.
ENCODING_VERSION = "encode_pairs-1"
TOKENIZE_BATCH = 2000


def tokenize_texts(
    dataset: datasets.Dataset,
    tokenizer,
    texts: Callable[[pa.Table], tuple[list[str], list[str]]],
    max_length: int | None,
    num_proc: int | None,
    settings: tuple = (),
    extra_columns: Callable[[pa.Table], dict[str, list]] | None = None,
) -> datasets.Dataset:
    """`dataset` -> ``input_ids``, ``attention_mask``, ``labels`` (+ `extra_columns`), long pairs
    dropped, by `datasets.map` in Arrow batches (`num_proc` processes), cached under a fingerprint
    of the input, the tokenizer and `settings`. `texts(table)` gives a batch's (sources,
    targets)."""
    fingerprint = Hasher.hash(
        (
            dataset._fingerprint,
            tokenizer.backend_tokenizer.to_str(),
            settings,
            max_length,
            ENCODING_VERSION,
        )
    )

    def encode(table: pa.Table) -> pa.Table:
        sources, targets = texts(table)
        encoded, keep = encode_pairs(tokenizer, sources, targets, max_length)
        if extra_columns is not None:
            for name, values in extra_columns(table).items():
                encoded = encoded.append_column(
                    name, pa.array(list(itertools.compress(values, keep)))
                )
        return encoded

    tokenized = (
        dataset.with_format("arrow")
        .map(
            encode,
            batched=True,
            batch_size=TOKENIZE_BATCH,
            remove_columns=dataset.column_names,
            num_proc=num_proc,
            new_fingerprint=fingerprint,
            desc="Tokenizing",
        )
        .with_format(None)
    )
    _report_dropped(len(dataset), len(tokenized), max_length)
    return tokenized


def encode_pairs(
    tokenizer, sources: list[str], targets: list[str], max_length: int | None = None
) -> tuple[pa.Table, list[bool]]:
    """(table of ``input_ids``, ``attention_mask``, ``labels`` of the kept pairs, which pairs
    were kept).

    The ids are those of `tokenizer(sources, text_target=targets)`, from the Rust tokenizer's batch
    encoding straight into Arrow arrays: the Python tokenizer's per-pair dicts and lists, and the
    separate filtering pass over every row, took most of the time. A pair is kept when neither side
    has more than `max_length` tokens.
    """
    backend = tokenizer.backend_tokenizer
    source_ids = [encoding.ids for encoding in backend.encode_batch_fast(sources)]
    target_ids = [encoding.ids for encoding in backend.encode_batch_fast(targets)]
    if max_length is None:
        keep = [True] * len(source_ids)
    else:
        keep = [
            len(source) <= max_length and len(target) <= max_length
            for source, target in zip(source_ids, target_ids)
        ]
        if not all(keep):
            source_ids, target_ids = (
                list(itertools.compress(source_ids, keep)),
                list(itertools.compress(target_ids, keep)),
            )
    input_ids, offsets = _list_array(source_ids, np.int32)
    attention_mask = pa.ListArray.from_arrays(offsets, np.ones(int(offsets[-1]), dtype=np.int8))
    labels, _ = _list_array(target_ids, np.int32)
    return pa.table(
        {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}
    ), keep


def _list_array(rows: list[list[int]], dtype) -> tuple[pa.ListArray, np.ndarray]:
    """An Arrow list array of `rows` (and its offsets), built from one flat NumPy array."""
    lengths = np.fromiter(map(len, rows), dtype=np.int64, count=len(rows))
    offsets = np.zeros(len(rows) + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    values = np.fromiter(itertools.chain.from_iterable(rows), dtype=dtype, count=int(offsets[-1]))
    return pa.ListArray.from_arrays(offsets, values), offsets


def _report_dropped(before: int, after: int, max_length: int | None) -> None:
    if max_length is None:
        return
    logger.info(
        "Dropped %d of %d pairs longer than %d tokens on a side (%d kept).",
        before - after,
        before,
        max_length,
        after,
    )
    if after == 0:
        raise ValueError(
            f"Every one of the {before} pairs is longer than `max_length`={max_length} tokens."
        )


def filter_long_pairs(
    dataset: datasets.Dataset, max_length: int | None = 256, num_proc: int | None = None
):
    """Drop tokenized pairs with more than `max_length` tokens on either side; log how many were
    dropped.

    (`tokenize_pairs` drops them while tokenizing; this is for datasets tokenized otherwise.)"""
    if max_length is None:
        return dataset
    check_max_length(max_length)

    def short(table: pa.Table) -> list[bool]:
        lengths = [pc.list_value_length(table[name]).to_numpy() for name in ("input_ids", "labels")]
        return ((lengths[0] <= max_length) & (lengths[1] <= max_length)).tolist()

    kept = (
        dataset.with_format("arrow")
        .filter(
            short,
            batched=True,
            num_proc=num_proc,
            desc=f"Dropping pairs longer than {max_length} tokens",
        )
        .with_format(None)
    )
    _report_dropped(len(dataset), len(kept), max_length)
    return kept


# more <unk> tokens than this in a language: the tokenizer was made for other text
UNKNOWN_SHARE_LIMIT = 0.01


def check_unknown_tokens(
    dataset: datasets.Dataset,
    tokenizer,
    limit: float = UNKNOWN_SHARE_LIMIT,
    languages: tuple[str | None, str | None] = (None, None),
    flag: str = "max_unknown_share",
):
    """Refuse tokenized pairs where more than `limit` of a language's tokens are `<unk>`; warn
    about fewer.

    A tokenizer trained on other text (or a corpus in another script) turns whole words into
    `<unk>`: the model then learns to write `<unk>`, silently. Each side is checked per direction
    (the ``direction`` column of a multilingual dataset, else `languages`).
    """
    unknown_id = tokenizer.unk_token_id
    if unknown_id is None or len(dataset) == 0:
        return
    table = dataset.with_format("arrow")[:]
    if "direction" in table.column_names:
        groups = {
            name: table.filter(pc.equal(table["direction"], name))
            for name in pc.unique(table["direction"]).to_pylist()
        }
    else:
        groups = {"-".join(code or "?" for code in languages): table}
    for direction, rows in groups.items():
        for column, language in zip(("input_ids", "labels"), direction.split("-")):
            tokens = pc.list_flatten(rows[column])
            unknown = pc.sum(pc.equal(tokens, unknown_id)).as_py() or 0
            _report_unknown(unknown, len(tokens), language, direction, limit, flag)


def _report_unknown(
    unknown: int, total: int, language: str, direction: str, limit: float, flag: str
) -> None:
    if not unknown:
        return
    side = "source" if direction.startswith(f"{language}-") else "target"
    share = unknown / total
    found = (
        f"{share:.1%} of the {language} ({side}) tokens of the {direction} training pairs are "
        f"<unk> ({unknown:,} of {total:,})"
    )
    if share > limit:
        raise ValueError(
            f"{found}: the tokenizer cannot spell this language (it was trained on other text). "
            f"Train a tokenizer on this corpus (scripts/train_tokenizer.py), or pass {flag} 1 to "
            "train anyway."
        )
    logger.warning(
        "%s: the model learns to write <unk> where the tokenizer lacks characters.", found
    )


def train_corpus_tokenizer(
    corpora: Sequence[datasets.Dataset],
    languages: Sequence[str],
    merges: int = 32000,
    language_tags: Sequence[str] = (),
    min_frequency: int = 2,
    model_max_length: int = 1024,
):
    """A joint BPE (`tokenization_dwlstm.train_joint_bpe_tokenizer`) with `merges` merges over
    both sides.

    The papers give BPE sizes in merges (32k); the trainer counts special tokens and the alphabet
    too, so the vocabulary size is set to specials + characters of the corpus + `merges` (fewer
    merges result when fewer pairs than that occur `min_frequency` times). `language_tags` (e.g.
    ``["<2de>", "<2fr>"]``, for multilingual models trained with `add_language_tag`) are reserved as
    special tokens with fixed ids; a bilingual model's tokenizer has none, because
    `pipeline("translation")` puts the target tag in front of every source whenever the
    tokenizer has it.
    """
    return train_sentence_tokenizer(
        lambda: corpus_sentences(corpora, languages),
        merges,
        language_tags,
        min_frequency=min_frequency,
        model_max_length=model_max_length,
    )


def train_sentence_tokenizer(
    sentences,
    merges: int = 32000,
    language_tags: Sequence[str] = (),
    min_frequency: int = 2,
    model_max_length: int = 1024,
):
    """`train_corpus_tokenizer` over the sentences `sentences()` yields (called twice: alphabet,
    then training)."""
    if isinstance(merges, bool) or not isinstance(merges, int) or merges < 1:
        raise ValueError(f"`merges` must be a positive integer, got {merges!r}.")
    language_tags = list(language_tags)
    alphabet = {"\u2581"}  # Metaspace turns spaces into "▁"
    for sentence in sentences():
        alphabet.update(sentence)
    alphabet.discard(" ")
    vocab_size = len(SPECIAL_TOKENS) + len(language_tags) + len(alphabet) + merges
    tokenizer = train_joint_bpe_tokenizer(
        sentences(),
        vocab_size,
        language_tags,
        min_frequency=min_frequency,
        model_max_length=model_max_length,
    )
    learnt = len(tokenizer) - (vocab_size - merges)
    # a few short is normal (small corpora); far fewer is a character-level tokenizer
    if learnt < merges / 2:
        logger.warning(
            "Only %d of the %d merges asked for were learnt: few pairs of symbols occur "
            "min_frequency=%d times in this corpus. Lower --min_frequency or --merges, or train "
            "on more text.",
            learnt,
            merges,
            min_frequency,
        )
    return tokenizer


def corpus_sentences(
    corpora: Sequence[datasets.Dataset], languages: Sequence[str]
) -> Iterator[str]:
    """Every sentence of every language of the ``translation`` column of `corpora`."""
    for corpus in corpora:
        for batch in corpus.iter(batch_size=10_000):
            for pair in batch["translation"]:
                yield from (pair[language] for language in languages if language in pair)


# --- Local files, cached as Arrow -----------------------------------------------------------------

# Changes whenever the readers below could give other pairs for the same files: old caches are then
# not reused.
CORPUS_CACHE_VERSION = "local-corpus-1"
CACHE_BATCH_PAIRS = 10_000


def corpus_cache_dir() -> Path:
    """Where local corpora are cached as Arrow files: under the `datasets` cache
    (``HF_DATASETS_CACHE``)."""
    return Path(datasets.config.HF_DATASETS_CACHE) / "nmt_toolkit-corpora"


def local_corpus_files(folder: Path, split: str, languages: tuple[str, str]) -> tuple[Path, ...]:
    """The files of `split` in `folder`: a ``{split}.jsonl[.gz]`` file, else the aligned
    ``{split}.{lang}[.gz]`` files. A folder with one subfolder per language pair, named like the
    Hub's configurations (``de-en``, sorted: OPUS-100's layout), is looked into first."""
    pair = "-".join(sorted(languages))
    pairs = pair_folders(folder)
    if (folder / pair).is_dir():
        own = [
            name
            for name in [f"{split}.jsonl", f"{split}.jsonl.gz"]
            + [f"{split}.{language}{suffix}" for language in languages for suffix in ("", ".gz")]
            if (folder / name).is_file()
        ]
        # which of the two is the corpus cannot be known: reading either could be the wrong one
        if own:
            raise ValueError(
                f"{folder} holds both {', '.join(own)} and a pair folder {pair}/ for the same "
                f"languages: move one of them away, or pass {folder / pair} itself."
            )
        folder = folder / pair
    elif pairs and not any(
        path.name.startswith(f"{split}.") for path in folder.iterdir() if path.is_file()
    ):
        raise ValueError(
            f"{folder} has no subfolder {pair} for the pair {languages[0]}-{languages[1]}; its "
            f"pairs: {pairs[:10]}{' ...' if len(pairs) > 10 else ''}."
        )
    # "jsonl" is no language code: no clash with the above
    for name in (f"{split}.jsonl", f"{split}.jsonl.gz"):
        if (folder / name).is_file():
            return (folder / name,)
    return tuple(_text_file(folder, split, language) for language in languages)


PAIR_FOLDER = re.compile(rf"{LANGUAGE_CODE.pattern}-{LANGUAGE_CODE.pattern}")


def pair_folders(folder: str | Path) -> list[str]:
    """The names of `folder`'s language-pair subfolders ("de-en", ...), sorted; none for other
    folders."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    return sorted(
        path.name for path in folder.iterdir() if path.is_dir() and PAIR_FOLDER.fullmatch(path.name)
    )


def _cached_local_corpus(
    files: tuple[Path, ...], languages: tuple[str, str], max_pairs: int | None
) -> datasets.Dataset:
    """The pairs of local `files` as a memory-mapped Arrow dataset, read (and checked) once and
    cached under a fingerprint of the files (path, size, modification time), the languages and
    `max_pairs`: a corpus of millions of pairs is never held in memory, and a second run starts from
    the cache."""
    fingerprint = _files_fingerprint(files, languages, max_pairs)
    path = corpus_cache_dir() / f"{fingerprint}.arrow"
    if not path.is_file():
        _write_corpus_cache(path, files, languages, max_pairs)
    dataset = datasets.Dataset.from_file(str(path))
    # what `datasets.map` derives the tokenized cache's name from
    dataset._fingerprint = fingerprint
    return dataset


def _files_fingerprint(
    files: tuple[Path, ...], languages: tuple[str, str], max_pairs: int | None
) -> str:
    identities = []
    for file in files:
        try:
            status = file.stat()
        except OSError as error:
            raise ValueError(f"{file}: cannot be read ({error.strerror}).") from error
        identities.append((str(file.resolve()), status.st_size, status.st_mtime_ns))
    key = json.dumps([CORPUS_CACHE_VERSION, identities, languages, max_pairs])
    return hashlib.sha256(key.encode()).hexdigest()[:32]


def _write_corpus_cache(
    path: Path, files: tuple[Path, ...], languages: tuple[str, str], max_pairs: int | None
):
    """Stream the checked pairs into `path` in batches (under a temporary name, renamed when
    complete)."""
    features = datasets.Features({"translation": datasets.Translation(languages=list(languages))})
    names = sorted(languages)  # the order of Translation's Arrow struct
    pairs = (
        _folder_pairs(*files, languages, max_pairs)
        if len(files) == 2
        else _json_lines_pairs(files[0], languages, max_pairs)
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with ArrowWriter(path=str(partial), features=features) as writer:
            while batch := list(itertools.islice(pairs, CACHE_BATCH_PAIRS)):
                sides = dict(zip(languages, zip(*batch)))
                column = pa.StructArray.from_arrays(
                    [pa.array(sides[name], pa.string()) for name in names], names=names
                )
                writer.write_table(pa.table({"translation": column}))
            writer.finalize()
        partial.replace(path)
    finally:
        partial.unlink(missing_ok=True)


def _folder_pairs(
    source_path: Path, target_path: Path, languages: tuple[str, str], max_pairs: int | None
) -> Iterator[tuple[str, str]]:
    """The first `max_pairs` pairs (all by default). Both files are read to the end even then: a
    file with a line too many or too few is misaligned from some line on, perhaps from the first,
    and must not be used."""
    count = 0
    source_lines, target_lines = _numbered_lines(source_path), _numbered_lines(target_path)
    for (number, source_text), (_, target_text) in _aligned(
        source_lines, target_lines, source_path, target_path
    ):
        if count == max_pairs:
            continue  # only counting now
        for path, text in ((source_path, source_text), (target_path, target_text)):
            if not text.strip():
                raise ValueError(
                    f"{path}, line {number}: the sentence is empty. Remove the pair from both "
                    "files."
                )
        count += 1
        yield source_text, target_text
    if not count:
        raise ValueError(f"{source_path} and {target_path} hold no sentence pairs.")


def _text_file(folder: Path, split: str, language: str) -> Path:
    candidates = [folder / f"{split}.{language}", folder / f"{split}.{language}.gz"]
    found = [path for path in candidates if path.is_file()]
    # which one is current cannot be known: reading either could be the wrong one
    if len(found) == 2:
        raise ValueError(
            f"{folder} holds both {found[0].name} and {found[1].name}: keep one of them (move "
            "the other "
            "away), so that it is clear which is read."
        )
    if found:
        return found[0]
    for path in candidates:
        if path.is_symlink():
            raise ValueError(
                f"{path} is a broken symbolic link (to {os.readlink(path)}, which does not exist): "
                "point it at the file, or copy the file there."
            )
    files = sorted(path.name for path in folder.iterdir() if path.is_file())
    found = sorted(
        {
            name.removesuffix(".gz").rsplit(".", 1)[-1]
            for name in files
            if name.startswith(f"{split}.")
        }
    )
    splits = sorted({name.split(".")[0] for name in files if name.count(".") >= 1})
    if found:
        raise ValueError(
            f"Unknown language {language!r} for split {split!r} in {folder}: no {split}."
            f"{language}[.gz]; that split has the languages {found}."
        )
    raise ValueError(
        f"No split {split!r} in {folder}: no {split}.{language}[.gz]; the folder has the splits "
        f"{splits}."
    )


def _numbered_lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number from 1, text without the newline); unreadable files raise a ValueError naming
    the line.

    Lines are decoded one by one (not by a buffered text reader) so that a decoding error names its
    own line. A UTF-8 byte-order mark (Windows editors) is not part of the first line. A file whose
    lines end in lone carriage returns (old Mac style) is refused when read to its end
    (`check_line_ends`): it would be one line.
    """
    number, line_ends, lone_returns = 0, 0, 0
    try:
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rb") as lines:
            for number, line in enumerate(lines, start=1):
                line_ends += line.endswith(b"\n")
                lone_returns += line.count(b"\r") - line.endswith(b"\r\n")
                text = strip_line_end(line.decode("utf-8"))  # the one rule: see files.py
                yield number, text.removeprefix(BYTE_ORDER_MARK) if number == 1 else text
    except UnicodeDecodeError as error:
        raise ValueError(f"{path}, line {number}: not valid UTF-8 ({error.reason}).") from error
    except (OSError, EOFError) as error:  # permissions, a truncated or non-gzip .gz file
        raise ValueError(f"{path}: cannot be read after line {number} ({error}).") from error
    check_line_ends(path, line_ends, lone_returns)


def _aligned(source_lines, target_lines, source_path: Path, target_path: Path):
    """Zip the two files, raising where one ends before the other."""
    sentinel = (None, None)
    while True:
        source, target = next(source_lines, sentinel), next(target_lines, sentinel)
        if source is sentinel and target is sentinel:
            return
        if source is sentinel or target is sentinel:
            short, long_, line = (
                (source_path, target_path, target[0])
                if source is sentinel
                else (target_path, source_path, source[0])
            )
            raise ValueError(
                f"Line counts differ: {short} ends before line {line}, but {long_} has a line "
                f"{line}. "
                "The files must hold the same number of lines, one sentence pair per line."
            )
        yield source, target


# --- JSON lines -----------------------------------------------------------------------------------


def _json_lines_pairs(
    path: Path, languages: tuple[str, str], max_pairs: int | None
) -> Iterator[tuple[str, str]]:
    count = 0
    for number, line in _numbered_lines(path):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            # a text file given for the corpus
            if not count and not path.name.endswith(JSON_LINES_SUFFIXES):
                raise ValueError(
                    f"{path} is not a JSON-lines file (its line {number} is not JSON): give the "
                    "folder "
                    "that holds {split}.{lang}[.gz] files, or a .jsonl file of pairs."
                ) from error
            raise ValueError(f"{path}, line {number}: not valid JSON ({error.msg}).") from error
        record = record.get("translation", record) if isinstance(record, dict) else record
        if not isinstance(record, dict):
            raise ValueError(
                f"{path}, line {number}: expected an object like "
                f'{{"translation": {{"{languages[0]}": ..., "{languages[1]}": ...}}}}.'
            )
        for language in languages:
            text = record.get(language)
            if language not in record:
                raise ValueError(
                    f"{path}, line {number}: no {language!r} side (unknown language?); "
                    f"the line has {sorted(record)}."
                )
            if not isinstance(text, str) or not text.strip():
                raise ValueError(
                    f"{path}, line {number}: the {language!r} side is empty or not a string."
                )
        count += 1
        yield record[languages[0]], record[languages[1]]
        if count == max_pairs:
            break
    if not count:
        raise ValueError(f"{path} holds no sentence pairs.")


# --- The Hub --------------------------------------------------------------------------------------


def hub_corpus_location(
    name: str, languages: tuple[str, str], hub_config: str | None = None
) -> tuple[str, str]:
    """(repository id, configuration) of a Hub corpus, e.g. ("wmt/wmt14", "de-en") for wmt14
    en->de."""
    repository, naming = HUB_CORPORA.get(name.lower().replace("-", ""), (name, "sorted"))
    if hub_config is not None:
        return repository, hub_config
    if naming == "xx-en":
        if "en" not in languages:
            raise ValueError(
                f"{name} pairs English with another language; got {languages[0]}-{languages[1]}."
            )
        other = languages[1] if languages[0] == "en" else languages[0]
        return repository, f"{other}-en"
    return repository, "-".join(sorted(languages))


def _load_hub_corpus(
    name: str, languages: tuple[str, str], split: str, max_pairs: int | None, hub_config: str | None
) -> datasets.Dataset:
    repository, config = hub_corpus_location(name, languages, hub_config)
    if not datasets.config.HF_HUB_OFFLINE:
        check_hub_reachable(repository, "The corpus", repo_type="dataset")
    try:
        dataset = datasets.load_dataset(repository, config, split=split)
    except ValueError as error:  # unknown split or configuration
        raise ValueError(
            f"Cannot load split {split!r} of {repository} ({config}): {error}"
        ) from error
    except (OSError, ConnectionError) as error:
        raise ValueError(
            f"{name!r} is neither a local folder, a JSON-lines file nor a reachable Hub dataset "
            f"({repository}, configuration {config}): {error}"
        ) from error
    if "translation" not in dataset.column_names:
        raise ValueError(
            f"{repository} ({config}) has no `translation` column; its columns: "
            f"{dataset.column_names}."
        )
    available = getattr(dataset.features["translation"], "languages", None)
    missing = [
        language for language in languages if available is not None and language not in available
    ]
    if missing:
        raise ValueError(
            f"Unknown language {missing[0]!r} for {repository} ({config}): it has "
            f"{list(available)}."
        )
    if max_pairs is not None:
        dataset = dataset.select(range(min(max_pairs, len(dataset))))
    dataset = dataset.select_columns(["translation"])
    kept = dataset.filter(
        lambda row: all(row["translation"][language].strip() for language in languages),
        desc="Dropping pairs with an empty side",
    )
    if len(kept) < len(dataset):
        logger.info(
            "Dropped %d of %d pairs of %s (%s, %s) with an empty side.",
            len(dataset) - len(kept),
            len(dataset),
            repository,
            config,
            split,
        )
    return kept


__all__ = [
    "load_parallel_corpus",
    "tokenize_pairs",
    "tokenize_texts",
    "encode_pairs",
    "check_unknown_tokens",
    "filter_long_pairs",
    "pairs_to_dataset",
    "hub_corpus_location",
    "local_corpus_files",
    "pair_folders",
    "corpus_cache_dir",
    "train_corpus_tokenizer",
    "train_sentence_tokenizer",
    "corpus_sentences",
]
