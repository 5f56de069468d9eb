"""Synthetic parallel corpora of a real corpus's size and shape, to measure the data path without
downloading.

What costs time and memory before the first update (reading, BPE, tokenisation, batching, streaming)
depends on the number of pairs, their lengths and the vocabulary's shape, not on the sentences
meaning anything. So:

- sentence lengths (in words, per pair, source and target together so that their correlation is
  kept) are drawn from a real corpus's pairs (`read_length_pairs`, e.g. Multi30k's ~12 words),
  optionally stretched per pair by a log-normal factor (`length_scale`, `length_spread`): news and
  parliament text such as WMT14's is about twice as long as Multi30k's image captions, with a longer
  tail; without a corpus, `realistic_length_pairs` draws them from a log-normal of that shape;
- words come from a Zipfian vocabulary per language (rank r drawn with probability ~ r^-s, Zipf
  1949; s slightly above 1, as measured on large corpora), frequent words short (Zipf's law of
  abbreviation), letters from the language's script, so that BPE finds real merges and real scripts'
  alphabets;
- `write_parallel_corpus` writes one direction as the local layouts `data.load_parallel_corpus`
  reads (aligned ``{split}.{lang}.gz`` files and/or ``{split}.jsonl.gz`` in the Hub's
  ``{"translation": {...}}`` schema);
- `write_opus100_shaped_corpus` writes OPUS-100's shape (Zhang et al. 2020): 99 languages paired
  with English, a few pairs with 1M pairs each and a long tail of small ones, scaled to any total,
  one folder per pair named like the Hub's configurations (``de-en/train.jsonl.gz``).

Everything is seeded: the same arguments give the same files. Generation is chunked, so memory stays
small whatever the size.
"""

import gzip
import io
import json
import math
import re
import zlib
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

from .data import _aligned, _numbered_lines, _text_file

ZIPF_EXPONENT = 1.07
CHUNK_PAIRS = 50_000

# Letters of a script as (first code point, how many); languages not listed write in the
# Latin script.
SCRIPTS = {
    "cyrillic": (0x0430, 32),
    "arabic": (0x0627, 36),
    "hebrew": (0x05D0, 27),
    "greek": (0x03B1, 25),
    "devanagari": (0x0915, 37),
    "bengali": (0x0995, 37),
    "gurmukhi": (0x0A15, 37),
    "gujarati": (0x0A95, 37),
    "oriya": (0x0B15, 37),
    "tamil": (0x0B95, 37),
    "telugu": (0x0C15, 37),
    "kannada": (0x0C95, 37),
    "malayalam": (0x0D15, 37),
    "sinhala": (0x0D9A, 45),
    "thai": (0x0E01, 46),
    "georgian": (0x10D0, 33),
    "armenian": (0x0561, 38),
    "ethiopic": (0x1200, 300),
    "myanmar": (0x1000, 33),
    "khmer": (0x1780, 35),
    "tibetan": (0x0F40, 45),
    "hangul": (0xAC00, 2000),
    "han": (0x4E00, 3000),
}
LANGUAGE_SCRIPTS = {
    **dict.fromkeys(("be", "bg", "kk", "ky", "mk", "mn", "ru", "sr", "tg", "tt", "uk"), "cyrillic"),
    **dict.fromkeys(("ar", "fa", "ps", "ug", "ur"), "arabic"),
    **dict.fromkeys(("he", "yi"), "hebrew"),
    **dict.fromkeys(("hi", "mr", "ne"), "devanagari"),
    **dict.fromkeys(("bn", "as"), "bengali"),
    "el": "greek",
    "pa": "gurmukhi",
    "gu": "gujarati",
    "or": "oriya",
    "ta": "tamil",
    "te": "telugu",
    "kn": "kannada",
    "ml": "malayalam",
    "si": "sinhala",
    "th": "thai",
    "ka": "georgian",
    "hy": "armenian",
    "am": "ethiopic",
    "my": "myanmar",
    "km": "khmer",
    "dz": "tibetan",
    "ko": "hangul",
    "zh": "han",
    "ja": "han",
}
LATIN = "etaoinshrdlcumwfgypbvkjxqz"
LATIN_FREQUENCIES = (
    12.7,
    9.1,
    8.2,
    7.5,
    7.0,
    6.7,
    6.3,
    6.1,
    6.0,
    4.3,
    4.0,
    2.8,
    2.8,
    2.4,
    2.4,
    2.2,
    2.0,
    2.0,
    # English letter frequencies, in percent
    1.9,
    1.5,
    1.0,
    0.8,
    0.15,
    0.15,
    0.1,
    0.07,
)
LATIN_EXTRAS = "äöüßéèàçñøåłšžčőűîâêœæ"

# OPUS-100 (Zhang et al. 2020): 99 languages with English, 55M pairs; 44 pairs have 1M pairs, 73 at
# least 100k, 95 at least 10k. The languages are those of the Hub's Helsinki-NLP/opus-100.
OPUS100_LANGUAGES = (
    "af am an ar as az be bg bn br bs ca cs cy da de dz el eo es et eu fa fi fr fy ga gd gl gu "
    "ha he hi hr hu hy id ig is it ja ka kk km kn ko ku ky li lt lv mg mk ml mn mr ms mt my nb "
    "ne nl nn no oc or pa pl ps pt ro ru rw se sh si sk sl sq sr sv ta te tg th tk tr tt ug uk "
    "ur uz vi wa xh yi yo zh zu"
).split()
OPUS100_PAIRS = 55_000_000
OPUS100_BANDS = (
    (44, 1_000_000, 1_000_000),
    (29, 100_000, 1_000_000),
    (22, 10_000, 100_000),
    (4, 1_000, 10_000),
)


def read_length_pairs(
    folder: str | Path, languages: Sequence[str] = ("en", "de"), split: str = "train"
) -> np.ndarray:
    """The (source, target) word counts of each pair of a folder's aligned ``{split}.{lang}[.gz]``
    files, shape (n, 2).

    Only the counts are kept: the sentences themselves are neither copied nor returned.
    """
    paths = [_text_file(Path(folder), split, language) for language in languages]
    lines = [_numbered_lines(path) for path in paths]
    counts = [
        (len(source.split()), len(target.split()))
        for (_, source), (_, target) in _aligned(*lines, *paths)
    ]
    lengths = np.array(counts, dtype=np.int32).reshape(-1, 2)
    if len(lengths) == 0 or lengths.min() < 1:
        raise ValueError(
            f"{paths[0]} and {paths[1]} must hold non-empty sentence pairs to draw lengths from."
        )
    return lengths


def realistic_length_pairs(
    count: int = 100_000, seed: int = 0, median_words: float = 20.0
) -> np.ndarray:
    """(source, target) word counts without a corpus: a log-normal source length (median
    `median_words`, the long right tail of news text) and a target length within about 15% of it."""
    rng = np.random.default_rng(seed)
    source = rng.lognormal(math.log(median_words), 0.6, count)
    target = source * rng.lognormal(0.0, 0.15, count)
    return np.clip(np.rint(np.stack([source, target], axis=1)), 1, None).astype(np.int32)


class ZipfVocabulary:
    """`size` distinct words of one language, word of rank r drawn with probability ~
    r^-`exponent`."""

    def __init__(
        self, language: str, size: int = 50_000, seed: int = 0, exponent: float = ZIPF_EXPONENT
    ):
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ValueError(f"The vocabulary size must be a positive integer, got {size!r}.")
        self.language = language
        rng = np.random.default_rng([seed, zlib.crc32(language.encode())])
        self.words = np.array(_distinct_words(language, size, rng), dtype=object)
        weights = np.arange(1, size + 1, dtype=np.float64) ** -exponent
        self.cumulative = np.cumsum(weights) / weights.sum()

    def draw(self, count: int, rng: np.random.Generator) -> list[str]:
        """`count` words drawn by their Zipfian probabilities."""
        ranks = np.searchsorted(self.cumulative, rng.random(count), side="right")
        return self.words[np.minimum(ranks, len(self.words) - 1)].tolist()

    def sentences(self, lengths: np.ndarray, rng: np.random.Generator) -> list[str]:
        """One sentence per entry of `lengths` (words), capitalised and ending with a full stop."""
        words = self.draw(int(lengths.sum()), rng)
        sentences, start = [], 0
        for end in np.cumsum(lengths).tolist():
            sentence = " ".join(words[start:end])
            sentences.append(sentence[:1].upper() + sentence[1:] + ".")
            start = end
        return sentences


def _distinct_words(language: str, size: int, rng: np.random.Generator) -> list[str]:
    """Words of the language's letters; the mean length grows with the rank, so frequent words
    are short."""
    letters, probabilities = _letters(language, rng)
    words, seen = [], set()
    # draw in bulk; a word drawn twice is dropped and drawn again at the next rank
    while len(words) < size:
        ranks = np.arange(len(words) + 1, len(words) + 1 + 2 * (size - len(words)))
        lengths = 1 + rng.poisson(1.5 + 0.45 * np.log(ranks))
        text = "".join(rng.choice(letters, int(lengths.sum()), p=probabilities).tolist())
        start = 0
        for length in lengths.tolist():
            word = text[start : start + length]
            start += length
            if word not in seen and len(words) < size:
                seen.add(word)
                words.append(word)
    return words


def _letters(language: str, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    script = LANGUAGE_SCRIPTS.get(language)
    # Latin: English frequencies plus a few accented letters of the language's own
    if script is None:
        extras = rng.choice(list(LATIN_EXTRAS), 0 if language == "en" else 3, replace=False)
        letters = np.array(list(LATIN) + list(extras))
        weights = np.array(LATIN_FREQUENCIES + (0.5,) * len(extras))
    else:
        first, count = SCRIPTS[script]
        letters = np.array([chr(first + offset) for offset in range(count)])
        weights = 1.0 / np.arange(1, count + 1) ** 0.7  # a few letters frequent, most rare
    return letters, weights / weights.sum()


def synthetic_pairs(
    count: int,
    languages: tuple[str, str],
    vocabularies: dict[str, ZipfVocabulary],
    length_pairs: np.ndarray,
    seed: int = 0,
    length_scale: float = 1.0,
    length_spread: float = 0.0,
    max_words: int = 250,
) -> Iterator[tuple[list[str], list[str]]]:
    """(source sentences, target sentences) in chunks of `CHUNK_PAIRS`, `count` pairs in all.

    Each pair's word counts are a row of `length_pairs` drawn at random, times a factor drawn per
    pair from a log-normal with median `length_scale` and shape `length_spread` (0: every factor is
    `length_scale`), at most `max_words`.
    """
    _check_count(count, "count")
    if not length_scale > 0 or not length_spread >= 0:
        raise ValueError(
            f"`length_scale` must be positive and `length_spread` at least 0, got {length_scale!r} "
            f"and {length_spread!r}."
        )
    rng = np.random.default_rng([seed, *(zlib.crc32(language.encode()) for language in languages)])
    for start in range(0, count, CHUNK_PAIRS):
        size = min(CHUNK_PAIRS, count - start)
        lengths = length_pairs[rng.integers(0, len(length_pairs), size)].astype(np.float64)
        if length_scale != 1.0 or length_spread:
            lengths *= (length_scale * rng.lognormal(0.0, length_spread, size))[:, None]
        lengths = np.clip(np.rint(lengths), 1, max_words).astype(np.int64)
        yield tuple(
            vocabularies[language].sentences(lengths[:, side], rng)
            for side, language in enumerate(languages)
        )


def write_parallel_corpus(
    folder: str | Path,
    languages: tuple[str, str],
    splits: dict[str, int],
    length_pairs: np.ndarray,
    formats: Sequence[str] = ("text",),
    seed: int = 0,
    vocabulary_size: int = 50_000,
    length_scale: float = 1.0,
    length_spread: float = 0.0,
    vocabularies: dict[str, ZipfVocabulary] | None = None,
) -> dict[str, int]:
    """Write `splits` ({"train": 4_500_000, "val": 3000}) of one language pair into `folder`; return
    the counts.

    `formats`: "text" writes ``{split}.{lang}.gz`` (one sentence per line, aligned), "jsonl" writes
    ``{split}.jsonl.gz`` with one ``{"translation": {source: ..., target: ...}}`` per line (the
    Hub's schema).
    """
    unknown = sorted(set(formats) - {"text", "jsonl"})
    if unknown or not formats:
        raise ValueError(f"`formats` must be 'text' and/or 'jsonl', got {list(formats)!r}.")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    vocabularies = vocabularies or {
        language: ZipfVocabulary(language, vocabulary_size, seed) for language in languages
    }
    for number, (split, count) in enumerate(splits.items()):
        chunks = synthetic_pairs(
            count,
            languages,
            vocabularies,
            length_pairs,
            seed=seed * 1000 + number,
            length_scale=length_scale,
            length_spread=length_spread,
        )
        _write_split(folder, split, languages, chunks, formats)
    return dict(splits)


def _write_split(
    folder: Path, split: str, languages: tuple[str, str], chunks, formats: Sequence[str]
) -> None:
    """Stream the chunks into the files (written under temporary names, renamed when complete)."""
    paths = (
        [folder / f"{split}.{language}.gz" for language in languages] if "text" in formats else []
    ) + ([folder / f"{split}.jsonl.gz"] if "jsonl" in formats else [])
    partial = [path.with_name(path.name + ".tmp") for path in paths]
    files = [gzip_text_writer(path) for path in partial]
    try:
        for sources, targets in chunks:
            if "text" in formats:
                files[0].write("\n".join(sources) + "\n")
                files[1].write("\n".join(targets) + "\n")
            if "jsonl" in formats:
                files[-1].write(_json_lines(sources, targets, languages))
    finally:
        for file in files:
            file.close()
    for temporary, path in zip(partial, paths):
        temporary.replace(path)


def gzip_text_writer(path: Path) -> io.TextIOWrapper:
    """UTF-8 text into a gzip file at level 1 (fast; the corpus is read often), with no time in its
    header: the same corpus is the same bytes whenever it is written."""
    return io.TextIOWrapper(gzip.GzipFile(path, "wb", compresslevel=1, mtime=0), encoding="utf-8")


NEEDS_ESCAPING = re.compile(r'["\\\x00-\x1f]')


def _json_lines(sources: list[str], targets: list[str], languages: tuple[str, str]) -> str:
    """``{"translation": {source: ..., target: ...}}`` lines; written directly when no character
    needs escaping in JSON (letters, spaces and full stops: always, for these vocabularies), which
    is several times faster."""
    if NEEDS_ESCAPING.search("".join(sources)) or NEEDS_ESCAPING.search("".join(targets)):
        return "".join(
            json.dumps(
                {"translation": {languages[0]: source, languages[1]: target}}, ensure_ascii=False
            )
            + "\n"
            for source, target in zip(sources, targets)
        )
    first, second = languages
    return "".join(
        f'{{"translation": {{"{first}": "{source}", "{second}": "{target}"}}}}\n'
        for source, target in zip(sources, targets)
    )


def opus100_pair_sizes(
    total_pairs: int = OPUS100_PAIRS, languages: Sequence[str] = OPUS100_LANGUAGES
) -> dict[str, int]:
    """Pairs per language pair ("de-en": n, named like the Hub's configurations), OPUS-100's shape
    scaled to `total_pairs`: the band sizes of Zhang et al. 2020 (44 pairs of 1M, 29 of 100k-1M, 22
    of 10k-100k, 4 smaller), log-uniform within a band, the middle band set so that the full corpus
    holds 55M pairs."""
    _check_count(total_pairs, "total_pairs")
    sizes = []
    for count, low, high in OPUS100_BANDS:
        sizes += (
            np.geomspace(high, low, count + 2)[1:-1].tolist()
            if low != high
            else [float(high)] * count
        )
    sizes = np.array(sizes)
    middle = slice(OPUS100_BANDS[0][0], OPUS100_BANDS[0][0] + OPUS100_BANDS[1][0])
    others = sizes.sum() - sizes[middle].sum()
    sizes[middle] = _scaled_within(sizes[middle], OPUS100_PAIRS - others, *OPUS100_BANDS[1][1:])
    sizes = _spread_over(sizes, len(languages))
    sizes *= total_pairs / sizes.sum()
    names = ["-".join(sorted((language, "en"))) for language in languages]
    return {name: max(1, round(size)) for name, size in zip(names, sizes)}


def _scaled_within(sizes: np.ndarray, total: float, low: float, high: float) -> np.ndarray:
    """`sizes` times the factor (found by bisection) that makes them sum to `total` once clipped to
    [low, high]."""
    smallest, largest = 0.0, high / sizes.min()
    for _ in range(100):
        factor = (smallest + largest) / 2
        smallest, largest = (
            (factor, largest)
            if np.clip(sizes * factor, low, high).sum() < total
            else (smallest, factor)
        )
    return np.clip(sizes * factor, low, high)


def _spread_over(sizes: np.ndarray, count: int) -> np.ndarray:
    """`sizes` (largest first) for `count` pairs (fewer languages than OPUS-100's, for tests): each
    pair takes the size at its place in the ranking."""
    positions = np.linspace(0, len(sizes) - 1, count).round().astype(int)
    return sizes[positions]


def write_opus100_shaped_corpus(
    root: str | Path,
    total_pairs: int,
    seed: int = 0,
    vocabulary_size: int = 20_000,
    length_pairs: np.ndarray | None = None,
    validation_pairs: int = 0,
    languages: Sequence[str] = OPUS100_LANGUAGES,
) -> dict[str, int]:
    """An OPUS-100-shaped corpus of `total_pairs` training pairs under `root`:
    ``{pair}/train.jsonl.gz`` per language pair with English (plus ``validation.jsonl.gz`` with
    `validation_pairs` pairs); return the training sizes.

    Which language gets which size is drawn with the seed, as OPUS-100's sizes do not follow the
    alphabet.
    """
    sizes = opus100_pair_sizes(total_pairs, languages)
    order = np.random.default_rng(seed).permutation(len(languages))
    shuffled = dict(zip([list(sizes)[index] for index in order], sizes.values()))
    length_pairs = (
        realistic_length_pairs(seed=seed, median_words=10.0)
        if length_pairs is None
        else length_pairs
    )
    english = ZipfVocabulary("en", vocabulary_size, seed)
    for pair, count in shuffled.items():
        languages_of_pair = tuple(pair.split("-"))  # sorted, as the Hub names the configurations
        other = next(language for language in languages_of_pair if language != "en")
        vocabularies = {"en": english, other: ZipfVocabulary(other, vocabulary_size, seed)}
        splits = {"train": count, **({"validation": validation_pairs} if validation_pairs else {})}
        write_parallel_corpus(
            Path(root) / pair,
            languages_of_pair,
            splits,
            length_pairs,
            formats=("jsonl",),
            seed=seed,
            vocabularies=vocabularies,
        )
    return shuffled


def _check_count(value, name: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"`{name}` must be a positive integer, got {value!r}.")


__all__ = [
    "read_length_pairs",
    "realistic_length_pairs",
    "ZipfVocabulary",
    "synthetic_pairs",
    "write_parallel_corpus",
    "opus100_pair_sizes",
    "write_opus100_shaped_corpus",
]
