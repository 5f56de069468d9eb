"""Training on a corpus too large to tokenise up front (OPUS-100's 55M pairs): read, tokenise and
batch as a stream.

The map-style path (`data.tokenize_pairs`, `batching.TokenBatchSampler`) tokenises the whole corpus
before the first update and keeps every pair's length in memory; for OPUS-100 that is hours of
preprocessing and tens of GB of cache. Here nothing is done ahead:

1. each direction is a `datasets.IterableDataset` over its files (local ``{split}.{lang}[.gz]``
   pairs or ``{split}.jsonl[.gz]``, one folder per language pair as OPUS-100 is laid out, or a Hub
   corpus in streaming mode), read again from the start when it ends;
2. the directions are mixed with `datasets.interleave_datasets`, direction i drawn with the
   temperature-based probability of `multilingual.temperature_probabilities` (Arivazhagan et al.
   2019), from the directions' sizes;
3. `StreamingTokenBatches` reads the mixed stream in windows of `buffer_pairs` pairs, tokenises each
   window (`data.encode_pairs`, the target tag in front of multilingual sources, pairs longer than
   `max_length` dropped), sorts it by length, packs it into `max_tokens` batches as
   `batching.pack_by_tokens` does and yields them in a seeded random order: memory is bounded by the
   window, whatever the corpus size;
4. the position is exact: `state_dict()` is the stream's own state (`datasets`) at the start of the
   current window plus how many of its batches were used; `load_state_dict` re-reads that window and
   continues with the next batch. The Trainer saves it in each checkpoint (``stream_state.json``).

Resuming re-reads each local direction from its start up to its position (not re-tokenised): about a
second per million pairs of text read. Under several processes every process reads the whole stream
and keeps every N-th batch (`num_replicas`, `rank`): exact and simple, with the reading and
tokenising repeated by each process.
"""

import gzip
import hashlib
import itertools
import json
import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import datasets
import pyarrow as pa
import pyarrow.compute as pc
import torch

from .batching import _length_order, pack_by_tokens
from .data import (
    JSON_LINES_SUFFIXES,
    _aligned,
    _numbered_lines,
    check_max_length,
    corpus_cache_dir,
    encode_pairs,
    hub_corpus_location,
    local_corpus_files,
)
from .files import atomic_write_json
from .multilingual import tag_source, temperature_probabilities

logger = logging.getLogger(__name__)

STREAM_FEATURES = datasets.Features(
    {
        "source": datasets.Value("string"),
        "target": datasets.Value("string"),
        "direction": datasets.Value("string"),
    }
)
STATE_VERSION = 1
STATE_FILE = "stream_state.json"  # the stream position, in each checkpoint of a streaming run
TOKENIZE_BATCH = 2000


@dataclass(frozen=True)
class StreamDirection:
    """One direction of the stream: its languages, its local files (none for a Hub corpus) or Hub
    location, and how many pairs it has (which sets its sampling probability)."""

    source_lang: str
    target_lang: str
    pairs: int
    files: tuple[str, ...] = ()
    hub: tuple[str, str, str] | None = None  # (repository, configuration, split)

    @property
    def name(self) -> str:
        return f"{self.source_lang}-{self.target_lang}"


def stream_directions(
    sources: Sequence[tuple[str, Sequence[tuple[str, str]]]],
    split: str = "train",
    hub_config: str | None = None,
) -> list[StreamDirection]:
    """The `StreamDirection` of every (source, directions) entry; local files are checked (aligned
    line counts) and counted once, the counts cached with the corpora (`data.corpus_cache_dir`)."""
    found = []
    for source, directions in sources:
        for source_lang, target_lang in directions:
            path = Path(source)
            if path.is_dir() or path.is_file() or str(source).endswith(JSON_LINES_SUFFIXES):
                files = (
                    local_corpus_files(path, split, (source_lang, target_lang))
                    if path.is_dir()
                    else (path,)
                )
                found.append(
                    StreamDirection(
                        source_lang,
                        target_lang,
                        count_pairs(files),
                        files=tuple(str(file) for file in files),
                    )
                )
            else:
                repository, config = hub_corpus_location(
                    source, (source_lang, target_lang), hub_config
                )
                found.append(
                    StreamDirection(
                        source_lang,
                        target_lang,
                        _hub_size(repository, config, split),
                        hub=(repository, config, split),
                    )
                )
    names = [direction.name for direction in found]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise ValueError(
            f"Directions given more than once: {repeated}; each direction streams from one source."
        )
    return found


def count_pairs(files: Sequence[Path]) -> int:
    """Pairs in local files (lines; non-blank lines of a JSON-lines file), counted once and cached
    by the files' path, size and modification time. Aligned files with different line counts are
    refused here, before training (the stream would only meet the difference at their end)."""
    identity = json.dumps(
        [
            (str(Path(file).resolve()), Path(file).stat().st_size, Path(file).stat().st_mtime_ns)
            for file in files
        ]
    )
    cache = (
        corpus_cache_dir()
        / "pair-counts"
        / (hashlib.sha256(identity.encode()).hexdigest()[:32] + ".json")
    )
    if cache.is_file():
        return json.loads(cache.read_text())["pairs"]
    counts = [_count_lines(Path(file), blank=len(files) == 1) for file in files]
    if len(set(counts)) > 1:
        raise ValueError(
            f"Line counts differ: {files[0]} has {counts[0]} lines, {files[1]} has {counts[1]}. "
            "The files "
            "must hold the same number of lines, one sentence pair per line."
        )
    if counts[0] == 0:
        raise ValueError(f"{files[0]} holds no sentence pairs.")
    cache.parent.mkdir(parents=True, exist_ok=True)
    # never read back half-written
    atomic_write_json(cache, {"pairs": counts[0], "files": json.loads(identity)})
    return counts[0]


def _count_lines(path: Path, blank: bool) -> int:
    """Lines of a (gzipped) text file; with `blank`, blank lines (skipped in JSON lines) are not
    counted."""
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rb") as file:
            if blank:
                return sum(1 for line in file if line.strip())
            count, last = 0, b"\n"
            # aligned text files: newlines counted in blocks, fast
            while block := file.read(1 << 22):
                count, last = count + block.count(b"\n"), block[-1:]
            return count + (last != b"\n")  # a last line without its line end
    except (OSError, EOFError) as error:
        raise ValueError(f"{path}: cannot be read ({error}).") from error


def _hub_size(repository: str, config: str, split: str) -> int:
    info = datasets.load_dataset_builder(repository, config).info
    if not info.splits or split not in info.splits:
        raise ValueError(
            f"{repository} ({config}) lists no size for split {split!r}, which temperature "
            "sampling needs."
        )
    return info.splits[split].num_examples


# --- The mixed stream of pairs --------------------------------------------------------------------


def pair_stream(
    directions: Sequence[StreamDirection], temperature: float = 1.0, seed: int = 0
) -> datasets.IterableDataset:
    """An endless `IterableDataset` of ``source``, ``target``, ``direction``: the directions mixed
    by temperature sampling, each read again from its start when it ends."""
    if not directions:
        raise ValueError("No direction to stream.")
    local = [direction for direction in directions if direction.files]
    streams = {}
    # one generator dataset, one shard per direction: building 198 datasets one by one takes minutes
    if local:
        shared = datasets.IterableDataset.from_generator(
            _local_pairs,
            features=STREAM_FEATURES,
            gen_kwargs={
                "files": [list(direction.files) for direction in local],
                "languages": [
                    [direction.source_lang, direction.target_lang] for direction in local
                ],
            },
        )
        for index, direction in enumerate(local):
            streams[direction.name] = shared.shard(
                num_shards=len(local), index=index, contiguous=True
            )
    for direction in directions:
        if direction.hub:
            streams[direction.name] = _hub_stream(direction)
    ordered = [streams[direction.name].repeat(None) for direction in directions]
    if len(ordered) == 1:
        return ordered[0]
    probabilities = temperature_probabilities(
        {direction.name: direction.pairs for direction in directions}, temperature
    )
    return datasets.interleave_datasets(
        ordered,
        probabilities=[probabilities[d.name] for d in directions],
        seed=seed,
        stopping_strategy="all_exhausted",
    )


def _local_pairs(files: list[list[str]], languages: list[list[str]]) -> Iterator[dict]:
    """The pairs of each shard's files (aligned text files or JSON lines), checked as
    `data.load_parallel_corpus` checks them: an empty side or a bad line stops with the file and
    the line."""
    for shard_files, (source_lang, target_lang) in zip(files, languages):
        direction = f"{source_lang}-{target_lang}"
        paths = [Path(file) for file in shard_files]
        if len(paths) == 2:
            lines = _aligned(_numbered_lines(paths[0]), _numbered_lines(paths[1]), *paths)
            for (number, source), (_, target) in lines:
                _check_sides(paths, number, source, target)
                yield {"source": source, "target": target, "direction": direction}
        else:
            for number, line in _numbered_lines(paths[0]):
                if line.strip():
                    source, target = _json_pair(paths[0], number, line, source_lang, target_lang)
                    yield {"source": source, "target": target, "direction": direction}


def _check_sides(paths: list[Path], number: int, source: str, target: str) -> None:
    for path, text in zip(paths, (source, target)):
        if not text.strip():
            raise ValueError(
                f"{path}, line {number}: the sentence is empty. Remove the pair from both files."
            )


def _json_pair(
    path: Path, number: int, line: str, source_lang: str, target_lang: str
) -> tuple[str, str]:
    try:
        record = json.loads(line)
    except json.JSONDecodeError as error:
        raise ValueError(f"{path}, line {number}: not valid JSON ({error.msg}).") from error
    record = record.get("translation", record) if isinstance(record, dict) else None
    sides = tuple(
        record.get(language) if isinstance(record, dict) else None
        for language in (source_lang, target_lang)
    )
    if not all(isinstance(side, str) and side.strip() for side in sides):
        raise ValueError(
            f'{path}, line {number}: expected {{"translation": {{"{source_lang}": ..., '
            f'"{target_lang}": ...}}}} with both sides non-empty.'
        )
    return sides


def _hub_stream(direction: StreamDirection) -> datasets.IterableDataset:
    """A Hub corpus in streaming mode as ``source``, ``target``, ``direction`` (pairs with an empty
    side dropped)."""
    repository, config, split = direction.hub
    stream = datasets.load_dataset(repository, config, split=split, streaming=True)
    source_lang, target_lang, name = direction.source_lang, direction.target_lang, direction.name

    def columns(table: pa.Table) -> pa.Table:
        pairs = table.column("translation")
        source, target = (
            pc.struct_field(pairs, language).cast(pa.string())
            for language in (source_lang, target_lang)
        )
        kept = pc.and_(
            pc.greater(pc.utf8_length(pc.utf8_trim_whitespace(source)), 0),
            pc.greater(pc.utf8_length(pc.utf8_trim_whitespace(target)), 0),
        )
        table = pa.table(
            {
                "source": source,
                "target": target,
                "direction": pa.array([name] * len(table), pa.string()),
            }
        )
        return table.filter(kept)

    stream = stream.select_columns(["translation"]).with_format("arrow")
    return stream.map(
        columns, batched=True, remove_columns=["translation"], features=STREAM_FEATURES
    ).with_format(None)


# --- Tokenised and batched on the fly -------------------------------------------------------------


class StreamingTokenBatches(torch.utils.data.IterableDataset):
    """Token-count batches of a stream of pairs, tokenised and built in windows of `buffer_pairs`
    pairs; exactly resumable.

    Each window of `pairs` (``source``, ``target``, ``direction``) is tokenised
    (`data.encode_pairs`: the tokenizer's own ids; with `add_language_tag` the target tag ``<2xx>``
    in front of each source; pairs longer than `max_length` on a side dropped), sorted by length
    (target, then source; ties in a seeded random order), packed greedily while ``pairs x longest
    side <= max_tokens`` (`batching.pack_by_tokens`), and its batches are yielded in a random order
    seeded by the seed and the window's number. A batch is a list of ``{"input_ids", "labels"}``
    dicts, for the data collator (which adds the attention mask). Under `num_replicas` processes,
    process `rank` keeps the batches ``rank, rank + N, ...`` of the one sequence every
    process reads.

    `state_dict()` after a batch says where the next round of batches starts (the same for every
    process); `load_state_dict` on a freshly built object continues there: the stream's own state
    (`datasets`) at the start of that window, the window's number and how many of its batches are
    used. The stream is iterated as Python examples, whose state `datasets` tracks exactly (it warns
    that batched Arrow maps may skip a batch on resume).

    Each window that drops pairs says so in the log (`dropped`, `read`: the counts so far).
    `stream_pairs`, the pairs of one pass of the stream: a whole pass without a pair kept (every one
    too long) stops with a ValueError instead of reading for ever.
    """

    def __init__(
        self,
        pairs: datasets.IterableDataset,
        tokenizer,
        max_tokens: int,
        max_length: int | None = 256,
        add_language_tag: bool = False,
        buffer_pairs: int = 20_000,
        seed: int = 0,
        num_replicas: int = 1,
        rank: int = 0,
        fingerprint: str = "",
        stream_pairs: int | None = None,
    ):
        for name, value in (
            ("max_tokens", max_tokens),
            ("buffer_pairs", buffer_pairs),
            ("num_replicas", num_replicas),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"`{name}` must be a positive integer, got {value!r}.")
        if not 0 <= rank < num_replicas:
            raise ValueError(f"`rank` must be in [0, num_replicas={num_replicas}), got {rank}.")
        check_max_length(max_length)
        self.pairs, self.tokenizer = pairs, tokenizer
        self.max_tokens, self.max_length, self.add_language_tag = (
            max_tokens,
            max_length,
            add_language_tag,
        )
        self.buffer_pairs, self.seed = buffer_pairs, seed
        self.num_replicas, self.rank = num_replicas, rank
        self.fingerprint, self.stream_pairs = fingerprint, stream_pairs
        # where the next iteration begins
        self._start = {"window": 0, "stream": None, "batches_done": 0}
        self._position = dict(self._start)  # where the batches yielded so far end
        self.dropped = 0  # pairs longer than max_length, so far
        self.read = 0  # pairs read, so far

    def state_dict(self) -> dict:
        """Where the next round of batches starts: the stream's state at its window's start, the
        window's number, and how many of the window's batches (of all processes) come before it."""
        return {
            "version": STATE_VERSION,
            "fingerprint": self.fingerprint,
            "max_tokens": self.max_tokens,
            "buffer_pairs": self.buffer_pairs,
            "seed": self.seed,
            **self._position,
        }

    def load_state_dict(self, state: dict) -> None:
        if state.get("version") != STATE_VERSION:
            raise ValueError(
                f"The stream position was saved by another version ({state.get('version')!r}, "
                f"this one reads {STATE_VERSION}): start a new run from the checkpoint's weights "
                "instead."
            )
        changed = [
            name
            for name in ("fingerprint", "max_tokens", "buffer_pairs", "seed")
            if state.get(name) != getattr(self, name)
        ]
        if changed:
            listed = ", ".join(
                f"{name} {state.get(name)!r} then, {getattr(self, name)!r} now" for name in changed
            )
            raise ValueError(
                f"The stream position belongs to another stream ({listed}): resume with the "
                "run's own "
                "data, tokenizer and settings."
            )
        self._start = {name: state[name] for name in ("window", "stream", "batches_done")}
        self._position = dict(self._start)
        if self._start["stream"] is not None:
            self.pairs.load_state_dict(self._start["stream"])

    def __iter__(self) -> Iterator[list[dict]]:
        window, skip = self._start["window"], self._start["batches_done"]
        # global number of the window's first batch: rounds of N batches start at multiples of N
        base = -skip
        examples = iter(self.pairs)
        window_start = self._start["stream"]
        # pairs since the last one kept: a whole pass of them means nothing can be kept
        dropped_in_a_row = 0
        while True:
            table = self._read_window(examples)
            if table is None:
                return
            dropped_in_a_row = 0 if len(table) else dropped_in_a_row + self._window_read
            self._check_something_kept(dropped_in_a_row)
            self.read, self.dropped = (
                self.read + self._window_read,
                self.dropped + self._window_dropped,
            )
            if self._window_dropped:  # as the map-style path logs its count (`data.tokenize_pairs`)
                logger.info(
                    "Window %d: dropped %d of %d pairs longer than %d tokens on a side (%d of %d "
                    "so far).",
                    window,
                    self._window_dropped,
                    self._window_read,
                    self.max_length,
                    self.dropped,
                    self.read,
                )
            window_end = self.pairs.state_dict()
            batches = self._window_batches(table, window)
            for number in range(min(skip, len(batches)), len(batches)):
                if (base + number) % self.num_replicas == self.rank:
                    self._position = self._after(
                        base + number, base, len(batches), window, window_start, window_end
                    )
                    yield self._batch(table, batches[number])
            skip = max(0, skip - len(batches))
            window, base, window_start = window + 1, base + len(batches), window_end

    def _after(
        self, number: int, base: int, count: int, window: int, window_start, window_end
    ) -> dict:
        """The position of the round after the one of global batch `number`."""
        # within this window
        following = number - number % self.num_replicas + self.num_replicas - base
        if following < count:
            return {"window": window, "stream": window_start, "batches_done": following}
        return {"window": window + 1, "stream": window_end, "batches_done": following - count}

    def _check_something_kept(self, dropped_in_a_row: int) -> None:
        """Stop a stream that keeps no pair: it repeats for ever, so it would be read for ever
        without a batch."""
        if dropped_in_a_row and self.stream_pairs and dropped_in_a_row >= self.stream_pairs:
            raise ValueError(
                f"Every one of the stream's {self.stream_pairs} pairs is longer than --max_length "
                f"{self.max_length} tokens on a side (</s> and tags included): raise --max_length."
            )

    def _read_window(self, examples: Iterator[dict]) -> pa.Table | None:
        """The next `buffer_pairs` pairs, tokenised, long pairs dropped (None at the end of a finite
        stream); how many were read and dropped is left in `_window_read` and `_window_dropped`."""
        rows = list(itertools.islice(examples, self.buffer_pairs))
        self._window_read, self._window_dropped = len(rows), 0
        if not rows:
            return None
        parts = []
        for start in range(0, len(rows), TOKENIZE_BATCH):
            chunk = rows[start : start + TOKENIZE_BATCH]
            sources = [row["source"] for row in chunk]
            if self.add_language_tag:
                sources = [
                    tag_source(text, row["direction"].split("-")[1])
                    for text, row in zip(sources, chunk)
                ]
            encoded, keep = encode_pairs(
                self.tokenizer, sources, [row["target"] for row in chunk], self.max_length
            )
            self._window_dropped += len(keep) - len(encoded)
            directions = pa.array(
                [row["direction"] for row, kept in zip(chunk, keep) if kept], pa.string()
            )
            parts.append(
                encoded.select(["input_ids", "labels"]).append_column("direction", directions)
            )
        return pa.concat_tables(parts).combine_chunks()

    def first_window(self) -> datasets.Dataset:
        """The pairs of the window where iteration starts, tokenised (``input_ids``, ``labels``,
        ``direction``): a sample of the stream for checks before training (the stream's position is
        not moved)."""
        examples, dropped_in_a_row = iter(self.pairs), 0
        table = self._read_window(examples)
        # the first window with a pair kept
        while table is not None and not len(table) and self.stream_pairs:
            dropped_in_a_row += self._window_read
            self._check_something_kept(dropped_in_a_row)
            table = self._read_window(examples)
        if table is not None and not len(table):
            raise ValueError(
                f"Every one of the first {self._window_read} pairs of the stream is longer than "
                f"--max_length {self.max_length} tokens on a side: raise --max_length."
            )
        if table is None:
            raise ValueError(
                "The training stream holds no pairs"
                + (
                    f" shorter than --max_length {self.max_length} "
                    "tokens on a side: raise --max_length."
                    if dropped_in_a_row
                    else "."
                )
            )
        if self._window_dropped:
            logger.info(
                "The first window drops %d of %d pairs longer than %d tokens on a side; the "
                "stream drops such pairs throughout (a log line per window).",
                self._window_dropped,
                self._window_read,
                self.max_length,
            )
        return datasets.Dataset(datasets.table.InMemoryTable(table))

    def _window_batches(self, table: pa.Table, window: int) -> list[list[int]]:
        source_lengths = torch.from_numpy(
            pc.list_value_length(table["input_ids"]).to_numpy().astype("int64")
        )
        target_lengths = torch.from_numpy(
            pc.list_value_length(table["labels"]).to_numpy().astype("int64")
        )
        sizes = torch.maximum(source_lengths, target_lengths)
        if len(sizes) and int(sizes.max()) > self.max_tokens:
            raise ValueError(
                f"A pair has {int(sizes.max())} tokens on one side, more than `max_tokens`="
                f"{self.max_tokens}: raise --max_tokens or lower --max_length."
            )
        order = _length_order(source_lengths, target_lengths, self.seed + window)
        batches = pack_by_tokens(order.tolist(), sizes.tolist(), self.max_tokens)
        shuffled = torch.randperm(
            len(batches), generator=torch.Generator().manual_seed(self.seed + window)
        ).tolist()
        return [batches[position] for position in shuffled]

    @staticmethod
    def _batch(table: pa.Table, indices: list[int]) -> list[dict]:
        return table.select(["input_ids", "labels"]).take(pa.array(indices, pa.int64())).to_pylist()


def stream_fingerprint(directions: Sequence[StreamDirection], tokenizer, settings: dict) -> str:
    """What a checkpoint's stream position belongs to: the directions (files by path, size and
    modification time, or Hub locations), the tokenizer and the settings that change the batches."""
    identities = [
        (
            direction.name,
            direction.pairs,
            direction.hub,
            [
                (file, Path(file).stat().st_size, Path(file).stat().st_mtime_ns)
                for file in direction.files
            ],
        )
        for direction in directions
    ]
    key = json.dumps(
        [identities, tokenizer.backend_tokenizer.to_str(), settings], sort_keys=True, default=str
    )
    return (
        f"{sum(direction.pairs for direction in directions)} pairs in {len(directions)} "
        f"directions, sha256 {hashlib.sha256(key.encode()).hexdigest()[:16]}"
    )


__all__ = [
    "STATE_FILE",
    "StreamDirection",
    "stream_directions",
    "count_pairs",
    "pair_stream",
    "StreamingTokenBatches",
    "stream_fingerprint",
]
