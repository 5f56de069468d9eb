"""Many-to-many translation with one model: directions, tags, temperature sampling and
per-direction scores.

A multilingual model (Xu et al. 2024, §3.5; Johnson et al. 2017) is an ordinary translation model
trained on the pairs of many directions at once, with the target language named by a tag ``<2xx>``
in front of every source. This module holds what that adds to the bilingual setup:

- `parse_language_pairs`: ``"en-de,de-en"`` or ``"all"`` (every ordered pair of the corpus's
  languages) into a list of (source, target) directions;
- `load_multilingual_corpus`: the pairs of many directions, from one or several sources (local
  folders, JSON lines, Hub corpora), as one Dataset with ``source_lang``, ``target_lang``,
  ``source``, ``target``;
- `tokenize_directions`: the target tag on the source side, a ``direction`` column kept for the
  sampler;
- `temperature_probabilities` and `TemperatureTokenBatchSampler`: directions drawn with probability
  proportional to (size share)^(1/T) (T = 1: proportional to the data, T = 5: the common OPUS-100
  setting), packed into the usual token-count batches, so that a batch may mix directions;

The evaluation of many directions at once (`evaluate_directions`, group averages, win ratio,
off-target rates) is in `evaluation`.
"""

import json
import logging
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import datasets
import pyarrow as pa
import pyarrow.compute as pc
import torch

from .batching import TokenBatchSampler, _length_order, pack_by_tokens, split_to_multiple
from .data import (
    LANGUAGE_CODE,
    _numbered_lines,
    check_max_length,
    load_parallel_corpus,
    pair_folders,
    tokenize_texts,
)

logger = logging.getLogger(__name__)

PIVOT = "en"
ALL_PAIRS = "all"


def language_tag(language: str) -> str:
    """The target-language tag the tokenizer reserves: "<2de>" for "de"."""
    return f"<2{language}>"


def tag_source(text: str, target_lang: str) -> str:
    """`text` with the target tag in front ("<2de> A man."), unless it already starts with it."""
    tag = language_tag(target_lang)
    return text if text.startswith(tag) else f"{tag} {text}"


def parse_language_pairs(
    pairs: str | Sequence[str], languages: Sequence[str] | None = None
) -> list[tuple[str, str]]:
    """Directions from ``"en-de,de-en"`` (or a list of "xx-yy"); ``"all"`` gives every ordered pair
    of `languages`.

    Duplicates are refused (they would silently double a direction's share of the data).
    """
    if isinstance(pairs, str):
        if pairs.strip() == ALL_PAIRS:
            if not languages or len(set(languages)) < 2:
                raise ValueError(
                    "--language_pairs all needs a corpus with at least two languages, got "
                    f"{languages!r}."
                )
            codes = sorted(set(languages))
            return [(source, target) for source in codes for target in codes if source != target]
        pairs = [pair.strip() for pair in pairs.split(",") if pair.strip()]
    directions = []
    for pair in pairs:
        codes = pair.split("-") if isinstance(pair, str) else list(pair)
        if (
            len(codes) != 2
            or not all(LANGUAGE_CODE.fullmatch(code) for code in codes)
            or codes[0] == codes[1]
        ):
            raise ValueError(
                "A language pair looks like 'en-de' (two different codes and a hyphen), got "
                f"{pair!r}."
            )
        directions.append((codes[0], codes[1]))
    if not directions:
        raise ValueError(
            "No language pair given: pass e.g. --language_pairs en-de,de-en (or 'all')."
        )
    repeated = sorted({f"{s}-{t}" for s, t in directions if directions.count((s, t)) > 1})
    if repeated:
        raise ValueError(f"Language pairs given more than once: {repeated}.")
    return directions


def pair_name(direction: tuple[str, str]) -> str:
    return f"{direction[0]}-{direction[1]}"


def corpus_languages(source: str | Path, split: str = "train") -> list[str]:
    """The languages of a local folder (its ``{split}.{lang}[.gz]`` files) or of a JSON-lines file
    (first line)."""
    path = Path(source)
    if path.is_dir():
        names = [
            file.name.removesuffix(".gz")
            for file in path.iterdir()
            if file.name.startswith(f"{split}.")
        ]
        return sorted({name.rsplit(".", 1)[-1] for name in names})
    if path.is_file():
        for _, line in _numbered_lines(path):
            if line.strip():
                try:
                    record = json.loads(line)
                    return sorted(record.get("translation", record))
                except (json.JSONDecodeError, AttributeError) as error:
                    raise ValueError(
                        f"{path}, first line: not a JSON object of translations ({error})."
                    ) from error
    raise ValueError(
        "--language_pairs all needs a local folder or JSON-lines file to list languages; "
        f"{source!r} is "
        "neither. Name the pairs instead, e.g. --language_pairs en-de,de-en."
    )


def parse_sources(
    dataset: str, language_pairs: str, more_datasets: Sequence[str] = (), split: str = "train"
) -> list[tuple[str, list[tuple[str, str]]]]:
    """[(source, directions), ...] from `--dataset` + `--language_pairs` and each ``SOURCE=PAIRS``
    of `more_datasets`."""
    specs = [(dataset, language_pairs)]
    for spec in more_datasets:
        source, separator, pairs = spec.rpartition("=")
        if not separator or not source:
            raise ValueError(
                f"--more_datasets entries look like 'opus100=en-fr,fr-en', got {spec!r}."
            )
        specs.append((source, pairs))
    sources = [(source, _source_directions(source, pairs, split)) for source, pairs in specs]
    # One source's direction named twice would be read twice: every pair doubled, and the
    # direction's share of the batches with it. (Two sources of one direction are more data for it,
    # read once each.)
    given = [
        (_source_identity(source), f"{s}-{t}")
        for source, directions in sources
        for s, t in directions
    ]
    repeated = sorted(
        {f"{name} of {source}" for source, name in given if given.count((source, name)) > 1}
    )
    if repeated:
        raise ValueError(
            "Directions of one source given more than once (--dataset and --more_datasets "
            f"together): {', '.join(repeated)}; each would be read twice. Drop the repeat."
        )
    return sources


def _source_identity(source: str) -> str:
    """A source as it is read: a local path resolved (``data`` and ``./data/`` are one), a Hub id
    as given."""
    return str(Path(source).resolve()) if Path(source).exists() else source


def _source_directions(source: str, pairs: str, split: str) -> list[tuple[str, str]]:
    """`pairs` of one source; "all" of a folder with one subfolder per language pair (OPUS-100's
    layout) is both directions of each of its pairs, "all" of other local corpora every ordered pair
    of their languages."""
    if pairs.strip() != ALL_PAIRS:
        return parse_language_pairs(pairs)
    folders = pair_folders(source)
    if folders:
        return [
            direction
            for name in folders
            for direction in (tuple(name.split("-")), tuple(name.split("-")[::-1]))
        ]
    return parse_language_pairs(pairs, corpus_languages(source, split))


def load_multilingual_corpus(
    sources: Sequence[tuple[str, Sequence[tuple[str, str]]]],
    split: str = "train",
    max_pairs: int | None = None,
    hub_config: str | None = None,
) -> datasets.Dataset:
    """The pairs of every (source, directions) entry in one Dataset: ``source_lang, target_lang,
    source, target``.

    Each source is anything `data.load_parallel_corpus` reads (a folder of aligned files gives any
    pair of its languages, a JSON-lines file any two of each line's languages, "opus100" one
    configuration per pair with English, serving both directions). `max_pairs` applies per direction
    and source.
    """
    parts = []
    for source, directions in sources:
        for source_lang, target_lang in directions:
            pairs = load_parallel_corpus(
                source, source_lang, target_lang, split, max_pairs=max_pairs, hub_config=hub_config
            )
            parts.append(_direction_columns(pairs, source_lang, target_lang))
            logger.info(
                "%s %s-%s (%s): %d pairs.", source, source_lang, target_lang, split, len(pairs)
            )
    return datasets.concatenate_datasets(parts)


def _direction_columns(
    pairs: datasets.Dataset, source_lang: str, target_lang: str
) -> datasets.Dataset:
    """``source_lang, target_lang, source, target`` from a ``translation`` column (cached beside the
    corpus)."""

    def columns(table: pa.Table) -> pa.Table:
        translation = table.column("translation")
        return pa.table(
            {
                "source_lang": pa.array([source_lang] * len(table), pa.string()),
                "target_lang": pa.array([target_lang] * len(table), pa.string()),
                "source": pc.struct_field(translation, source_lang).cast(pa.string()),
                "target": pc.struct_field(translation, target_lang).cast(pa.string()),
            }
        )

    return (
        pairs.with_format("arrow")
        .map(
            columns,
            batched=True,
            batch_size=10_000,
            remove_columns=pairs.column_names,
            desc=f"{source_lang}-{target_lang}",
        )
        .with_format(None)
    )


def check_language_tags(tokenizer, targets) -> None:
    """Every target language's tag must be reserved in the tokenizer
    (`train_tokenizer.py --language_pairs`)."""
    missing = sorted({language_tag(target) for target in targets} - set(tokenizer.get_vocab()))
    if missing:
        raise ValueError(
            f"The tokenizer has no language tags {missing}: train it with "
            "scripts/train_tokenizer.py "
            "--language_pairs (same pairs), which reserves a tag per target language."
        )


def tokenize_directions(
    dataset: datasets.Dataset, tokenizer, max_length: int | None = 256, num_proc: int | None = None
) -> datasets.Dataset:
    """``input_ids`` (target tag first), ``attention_mask``, ``labels`` and a ``direction`` column
    ("en-de").

    Every target language must have its tag reserved in the tokenizer
    (`train_tokenizer.py --language_pairs`).
    """
    check_language_tags(tokenizer, dataset.unique("target_lang"))
    check_max_length(max_length)

    def texts(table: pa.Table) -> tuple[list[str], list[str]]:
        sources = [
            tag_source(text, target)
            for text, target in zip(table["source"].to_pylist(), table["target_lang"].to_pylist())
        ]
        return sources, table["target"].to_pylist()

    def directions(table: pa.Table) -> dict[str, list[str]]:
        return {
            "direction": [
                f"{s}-{t}"
                for s, t in zip(table["source_lang"].to_pylist(), table["target_lang"].to_pylist())
            ]
        }

    return tokenize_texts(
        dataset,
        tokenizer,
        texts,
        max_length,
        num_proc,
        settings=("directions",),
        extra_columns=directions,
    )


def split_by_direction(dataset: datasets.Dataset) -> dict[str, datasets.Dataset]:
    """{"en-de": the rows of that direction, ...}: the Trainer logs a loss per entry
    (``eval_en-de_loss``)."""
    directions = dataset["direction"]
    names = list(dict.fromkeys(directions))
    return {
        name: dataset.select([i for i, d in enumerate(directions) if d == name]) for name in names
    }


def balanced_sentences(
    corpus: datasets.Dataset, temperature: float = 5.0, seed: int = 0
) -> list[str]:
    """The distinct sentences of each language of `corpus`, resampled to
    `temperature_counts` shares.

    A joint BPE learns its merges from frequencies, so a small language would get few merges of its
    own; drawing each language's sentences with temperature-based probabilities (a small language's
    sentences repeated, a large one's subsampled) gives it its share, as for the training
    directions.
    """
    per_language: dict[str, dict[str, None]] = {}
    for column, language_column in (("source", "source_lang"), ("target", "target_lang")):
        for text, language in zip(corpus[column], corpus[language_column]):
            # aligned corpora repeat a side per direction
            per_language.setdefault(language, {})[text] = None
    sentences = {language: list(texts) for language, texts in per_language.items()}
    counts = temperature_counts(
        {language: len(texts) for language, texts in sentences.items()}, temperature
    )
    generator = torch.Generator().manual_seed(seed)
    sample = []
    for language, texts in sorted(sentences.items()):
        repeats, remainder = divmod(counts[language], len(texts))
        chosen = torch.randperm(len(texts), generator=generator)[:remainder].tolist()
        sample += texts * repeats + [texts[i] for i in chosen]
        logger.info(
            "Tokenizer sample: %d sentences of %s (%d distinct).",
            counts[language],
            language,
            len(texts),
        )
    return sample


# --- Temperature sampling -------------------------------------------------------------------------


def temperature_probabilities(sizes: Mapping[str, int], temperature: float) -> dict[str, float]:
    """p_i = q_i^(1/T) / sum_j q_j^(1/T), q_i = n_i / sum_j n_j (Arivazhagan et al. 2019; Xu et al. 2024, §3.5
    with T = 5)."""  # noqa: E501
    if (
        isinstance(temperature, bool)
        or not isinstance(temperature, (int, float))
        or not temperature > 0
    ):
        raise ValueError(
            "`sampling_temperature` must be a positive number (1 = proportional), got "
            f"{temperature!r}."
        )
    if not sizes or any(size < 1 for size in sizes.values()):
        raise ValueError(f"Every direction needs at least one pair, got sizes {dict(sizes)}.")
    total = sum(sizes.values())
    weights = {name: (size / total) ** (1.0 / temperature) for name, size in sizes.items()}
    norm = sum(weights.values())
    return {name: weight / norm for name, weight in weights.items()}


def temperature_counts(sizes: Mapping[str, int], temperature: float) -> dict[str, int]:
    """How many pairs of each direction one epoch holds: the same total, shared by
    `temperature_probabilities`."""
    total = sum(sizes.values())
    return {
        name: max(1, round(p * total))
        for name, p in temperature_probabilities(sizes, temperature).items()
    }


class TemperatureTokenBatchSampler(TokenBatchSampler):
    """`TokenBatchSampler` over pairs drawn per epoch with temperature-based probabilities per
    direction.

    Each epoch (seeded by ``seed + epoch``, so every rank and every resumed run draws the same)
    takes `temperature_counts` pairs of each direction: a random subset of a large direction, every
    pair of a small one repeated as often as needed plus a random remainder. The drawn pairs are
    sorted by length and packed by `max_tokens` as in `TokenBatchSampler`, so a batch mixes
    directions of similar length. The number of batches per epoch is fixed at that of epoch 0 (the
    Trainer's step counting and resuming rely on it): the largest batches are halved when an epoch
    packs fewer, random ones are left out when it packs more.
    """

    def __init__(
        self,
        source_lengths,
        target_lengths,
        directions: Sequence[str],
        max_tokens: int,
        temperature: float = 1.0,
        num_replicas: int = 1,
        rank: int = 0,
        seed: int = 0,
    ):
        if len(directions) != len(source_lengths):
            raise ValueError(f"Got {len(directions)} directions for {len(source_lengths)} pairs.")
        super().__init__(
            source_lengths,
            target_lengths,
            max_tokens,
            num_replicas=num_replicas,
            rank=rank,
            seed=seed,
        )
        self.source_lengths, self.target_lengths = (
            torch.as_tensor(source_lengths),
            torch.as_tensor(target_lengths),
        )
        names = list(dict.fromkeys(directions))
        self.direction_indices = {name: [] for name in names}
        for index, name in enumerate(directions):
            self.direction_indices[name].append(index)
        self.counts = temperature_counts(
            {name: len(ids) for name, ids in self.direction_indices.items()}, temperature
        )
        self._epoch_batches = {}
        self.batches = self._draw_batches(0, count=None)

    def _draw_batches(self, epoch: int, count: int | None) -> list[list[int]]:
        generator = torch.Generator().manual_seed(self.seed + epoch)
        drawn = []
        for name, indices in self.direction_indices.items():
            indices = torch.as_tensor(indices)
            repeats, remainder = divmod(self.counts[name], len(indices))
            drawn += [indices] * repeats + [
                indices[torch.randperm(len(indices), generator=generator)[:remainder]]
            ]
        drawn = torch.cat(drawn)
        order = drawn[
            _length_order(self.source_lengths[drawn], self.target_lengths[drawn], self.seed + epoch)
        ]
        sizes = torch.maximum(self.source_lengths, self.target_lengths).tolist()
        batches = pack_by_tokens(order.tolist(), sizes, self.max_tokens)
        if count is None:
            return split_to_multiple(batches, self.num_replicas)
        while len(batches) < count:  # halve the largest (fewer tokens a batch, nothing dropped)
            largest = max(range(len(batches)), key=lambda position: len(batches[position]))
            batch = batches.pop(largest)
            batches[largest:largest] = [batch[: len(batch) // 2], batch[len(batch) // 2 :]]
        if len(batches) > count:  # leave random batches out: the draw was random anyway
            keep = sorted(torch.randperm(len(batches), generator=generator)[:count].tolist())
            batches = [batches[position] for position in keep]
        return batches

    def batches_of_epoch(self, epoch: int) -> list[list[int]]:
        if epoch not in self._epoch_batches:
            self._epoch_batches = {
                epoch: self.batches if epoch == 0 else self._draw_batches(epoch, len(self.batches))
            }
        return self._epoch_batches[epoch]

    def __iter__(self) -> Iterator[list[int]]:
        batches = self.batches_of_epoch(self.epoch)
        order = torch.randperm(
            len(batches), generator=torch.Generator().manual_seed(self.seed + self.epoch)
        ).tolist()
        for position in range(self.rank, len(batches), self.num_replicas):
            yield list(batches[order[position]])


__all__ = [
    "language_tag",
    "tag_source",
    "parse_language_pairs",
    "parse_sources",
    "corpus_languages",
    "load_multilingual_corpus",
    "check_language_tags",
    "tokenize_directions",
    "balanced_sentences",
    "split_by_direction",
    "temperature_probabilities",
    "temperature_counts",
    "TemperatureTokenBatchSampler",
]
