"""Build a vocabulary shortlist from a parallel corpus: the table
`generate(..., use_shortlist=True)` decodes with (`modeling_dwlstm.generation_translation`), and
CTranslate2's vocabulary map (`use_vmap`) from the same table.

For each source token s, the `top_k` target tokens t with the highest Dice coefficient over the
sentence pairs

    Dice(s, t) = 2 c(s, t) / (c(s) + c(t))

where c(s) counts the pairs whose source holds s, c(t) those whose target holds t and c(s, t) those
that hold both (Dice 1945; as a translation association score: Smadja et al. 1996, Och and Ney
2003), among the pairs seen at least `min_count` times; ties go to the more frequent pair, then the
smaller id. Every batch may also produce the `frequent` most frequent target tokens and the special
tokens. This is the lexical shortlist of Jean et al. 2015 and L'Hostis et al. 2016, as Marian's
`--shortlist` (from alignment probabilities) and Sockeye's `--restrict-lexicon` (top-k per source
token) build it, with Dice in place of a word aligner.

    from nmt_toolkit.shortlist import build_shortlist_for_model shortlist =
    build_shortlist_for_model("runs/m30k/averaged", "path/to/multi30k", "en", "de") # or: python
    scripts/build_shortlist.py --model runs/m30k/averaged --data path/to/multi30k --source_lang en
    --target_lang de

`coverage` says how much of a reference translation a shortlist keeps: the share of the reference's
target tokens inside the union of its batch, and the union's size.
"""

import os
import tempfile
from collections.abc import Sequence
from pathlib import Path

import torch
from safetensors import SafetensorError
from transformers import AutoConfig

from modeling_dwlstm.generation_translation import SHORTLIST_FILE, Shortlist

from .checkpoints import load_saved_tokenizer
from .data import load_parallel_corpus
from .files import (
    CHECKSUMS_NAME,
    atomic_write_text,
    is_no_space_error,
    no_space_reported,
    write_checksums,
)

DEFAULT_TOP_K = 50
DEFAULT_FREQUENT = 100
DEFAULT_MIN_COUNT = 2
PAIRS_PER_CHUNK = 20_000  # pairs counted at once; the counts of the chunks are merged


def cooccurrence_counts(
    source_ids: Sequence[Sequence[int]], target_ids: Sequence[Sequence[int]], vocab_size: int
):
    """(pair keys s * vocab_size + t, c(s, t), c(s) per source id, c(t) per target id, target token
    frequency): every count over sentence pairs, each token counted once per sentence (the frequency
    counts every occurrence)."""
    if len(source_ids) != len(target_ids):
        raise ValueError(
            f"{len(source_ids)} sources but {len(target_ids)} targets: the corpus must be parallel."
        )
    keys, counts = torch.zeros(0, dtype=torch.long), torch.zeros(0, dtype=torch.long)
    source_counts = torch.zeros(vocab_size, dtype=torch.long)
    target_counts = torch.zeros(vocab_size, dtype=torch.long)
    frequency = torch.zeros(vocab_size, dtype=torch.long)
    for start in range(0, len(source_ids), PAIRS_PER_CHUNK):
        sources = sentence_tokens(source_ids[start : start + PAIRS_PER_CHUNK], vocab_size)
        targets = sentence_tokens(target_ids[start : start + PAIRS_PER_CHUNK], vocab_size)
        frequency += torch.bincount(targets[1], minlength=vocab_size)
        (source_sentence, source_token), (target_sentence, target_token) = (
            distinct(*sources),
            distinct(*targets),
        )
        source_counts += torch.bincount(source_token, minlength=vocab_size)
        target_counts += torch.bincount(target_token, minlength=vocab_size)
        # Every (source token, target token) of each pair: each source entry repeated once per
        # target entry.
        sentences = len(source_ids[start : start + PAIRS_PER_CHUNK])
        target_per_sentence = torch.bincount(target_sentence, minlength=sentences)
        target_offsets = torch.cumsum(target_per_sentence, 0) - target_per_sentence
        repeats = target_per_sentence[source_sentence]
        total = int(repeats.sum())
        run_starts = torch.repeat_interleave(torch.cumsum(repeats, 0) - repeats, repeats)
        within = torch.arange(total) - run_starts  # 0 .. (targets of the sentence) - 1
        target_index = torch.repeat_interleave(target_offsets[source_sentence], repeats) + within
        chunk_keys = (
            torch.repeat_interleave(source_token, repeats) * vocab_size + target_token[target_index]
        )
        merged = torch.cat([keys, chunk_keys])
        weights = torch.cat([counts, torch.ones(total, dtype=torch.long)])
        keys, inverse = merged.unique(return_inverse=True)
        counts = torch.zeros(len(keys), dtype=torch.long).scatter_add_(0, inverse, weights)
    return keys, counts, source_counts, target_counts, frequency


def sentence_tokens(
    sentences: Sequence[Sequence[int]], vocab_size: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """(sentence index, token id) of every token of `sentences`, checked against the vocabulary."""
    tokens = torch.as_tensor(
        [token for sentence in sentences for token in sentence], dtype=torch.long
    )
    check_ids(tokens, vocab_size)
    lengths = torch.as_tensor([len(sentence) for sentence in sentences], dtype=torch.long)
    return torch.repeat_interleave(torch.arange(len(sentences)), lengths), tokens


def distinct(sentence: torch.Tensor, token: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Each (sentence, token) once, sorted by sentence then token."""
    vocab_size = int(token.max()) + 1 if len(token) else 1
    keys = (sentence * vocab_size + token).unique()
    return keys // vocab_size, keys % vocab_size


def check_ids(ids: torch.Tensor, vocab_size: int) -> None:
    if len(ids) and (int(ids.min()) < 0 or int(ids.max()) >= vocab_size):
        raise ValueError(
            f"Token ids must lie in [0, {vocab_size}); got {int(ids.min())} to {int(ids.max())}."
        )


def build_shortlist(
    source_ids: Sequence[Sequence[int]],
    target_ids: Sequence[Sequence[int]],
    vocab_size: int,
    top_k: int = DEFAULT_TOP_K,
    frequent: int = DEFAULT_FREQUENT,
    min_count: int = DEFAULT_MIN_COUNT,
    special_ids: Sequence[int] = (),
    metadata: dict | None = None,
) -> Shortlist:
    """The shortlist of a tokenized parallel corpus (see the module docstring): per source id the
    `top_k` target ids by Dice among pairs seen `min_count` times or more, and always the `frequent`
    most frequent target ids and `special_ids`."""
    for name, value, smallest in (
        ("top_k", top_k, 1),
        ("frequent", frequent, 0),
        ("min_count", min_count, 1),
    ):
        if isinstance(value, bool) or not isinstance(value, int) or value < smallest:
            raise ValueError(f"`{name}` must be an integer >= {smallest}, got {value!r}.")
    keys, counts, source_counts, target_counts, frequency = cooccurrence_counts(
        source_ids, target_ids, vocab_size
    )
    keep = counts >= min_count
    keys, counts = keys[keep], counts[keep]
    sources, targets = keys // vocab_size, keys % vocab_size
    dice = 2 * counts.double() / (source_counts[sources] + target_counts[targets]).double()
    # Within each source id: Dice, then the pair count, descending; then the target id (stable
    # sorts, last key first). keys are sorted by (s, t): t ascending within ties
    order = torch.argsort(counts, descending=True, stable=True)
    order = order[torch.argsort(dice[order], descending=True, stable=True)]
    order = order[torch.argsort(sources[order], stable=True)]
    sources, targets = sources[order], targets[order]
    first = torch.searchsorted(sources, sources, side="left")  # where each source id's run starts
    rank = torch.arange(len(sources)) - first
    chosen = rank < top_k
    table = torch.full((vocab_size, top_k), -1, dtype=torch.long)
    table[sources[chosen], rank[chosen]] = targets[chosen]
    by_frequency = torch.argsort(frequency, descending=True, stable=True)
    most_frequent = by_frequency[:frequent][frequency[by_frequency[:frequent]] > 0]
    always = torch.cat(
        [most_frequent, torch.as_tensor(list(special_ids), dtype=torch.long)]
    ).unique()
    details = {
        "score": "dice",
        "top_k": top_k,
        "frequent": frequent,
        "min_count": min_count,
        "pairs": len(source_ids),
    }
    return Shortlist(table, always, {**details, **(metadata or {})})


def special_token_ids(tokenizer) -> list[int]:
    """The ids every batch may produce whatever its sources: beginning, end, padding and unknown
    (CTranslate2's vocabulary map always allows these four)."""
    return [
        token
        for token in (
            tokenizer.bos_token_id,
            tokenizer.eos_token_id,
            tokenizer.pad_token_id,
            tokenizer.unk_token_id,
        )
        if token is not None
    ]


def shortlist_from_texts(
    tokenizer,
    sources: Sequence[str],
    targets: Sequence[str],
    vocab_size: int | None = None,
    **options,
) -> Shortlist:
    """`build_shortlist` of raw sentence pairs, tokenized as the model reads them (special tokens
    included)."""
    source_ids = tokenizer(list(sources))["input_ids"]
    target_ids = tokenizer(list(targets))["input_ids"]
    return build_shortlist(
        source_ids,
        target_ids,
        vocab_size or len(tokenizer),
        special_ids=special_token_ids(tokenizer),
        **options,
    )


def build_shortlist_for_model(
    model_dir: str,
    data: str,
    source_lang: str,
    target_lang: str,
    split: str = "train",
    max_pairs: int | None = None,
    output_dir: str | None = None,
    overwrite: bool = False,
    **options,
) -> Path:
    """Build the shortlist of `data`'s `split` for the saved model in `model_dir` (its tokenizer and
    vocabulary size) and write it as `shortlist.safetensors` into `output_dir` (default:
    `model_dir`, where `from_pretrained` finds it); a folder with a checksum manifest gets it
    recorded. A shortlist already there is replaced only with `overwrite`. Returns the file's
    path."""
    tokenizer = load_saved_tokenizer(model_dir, "--model")
    config = AutoConfig.from_pretrained(model_dir)
    folder = Path(output_dir or model_dir)
    direction = f"{source_lang}-{target_lang}"
    if config.language_pairs and direction not in config.language_pairs:
        raise ValueError(
            f"--source_lang {source_lang} --target_lang {target_lang}: the model translates "
            f"{', '.join(config.language_pairs)} (its config's language_pairs), not {direction}; "
            "a shortlist of another direction allows the wrong language's words. Pass one of "
            "its directions."
        )
    # before the counting, not after
    check_writable(folder, "--output_dir" if output_dir else "--model")
    if (folder / SHORTLIST_FILE).exists() and not overwrite:
        raise ValueError(
            f"{folder / SHORTLIST_FILE} exists: pass --overwrite to replace it, or --output_dir "
            "to write "
            "the new shortlist elsewhere."
        )
    pairs = load_parallel_corpus(data, source_lang, target_lang, split, max_pairs=max_pairs)[
        "translation"
    ]
    shortlist = shortlist_from_texts(
        tokenizer,
        [pair[source_lang] for pair in pairs],
        [pair[target_lang] for pair in pairs],
        config.vocab_size,
        metadata={"corpus": f"{data} {split} {direction}", "direction": direction},
        **options,
    )
    path = folder / SHORTLIST_FILE
    # renamed when complete: never half a shortlist
    partial = folder / f".{SHORTLIST_FILE}.{os.getpid()}.tmp"
    try:
        with no_space_reported(
            f"the shortlist {path}", "free space, or pass --output_dir on another disk"
        ):
            try:
                shortlist.save(partial)
            # safetensors' own error type for an OS error while writing
            except SafetensorError as error:
                if is_no_space_error(error):
                    raise
                raise ValueError(
                    f"Cannot write the shortlist {path}: {error}; choose a writable --output_dir."
                ) from error
        partial.replace(path)
    finally:
        partial.unlink(missing_ok=True)
    if (folder / CHECKSUMS_NAME).is_file():
        write_checksums(folder)
    return path


def check_writable(folder: Path, flag: str) -> None:
    """Refuse, in one line, a folder the shortlist cannot be written into (read-only, not a
    folder)."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as error:
        raise ValueError(
            f"Cannot write into {folder} ({flag}): {error.strerror or error}; pass --output_dir, a "
            "writable folder (from_pretrained reads the shortlist beside the weights: copy it "
            "there "
            "later)."
        ) from error


def shortlist_direction(shortlist: Shortlist) -> str | None:
    """The direction ("en-de") whose corpus built `shortlist`: its `direction` metadata, or the last
    word of its `corpus` (shortlists built before the direction was recorded); None when
    neither says."""
    direction = (
        shortlist.metadata.get("direction")
        or shortlist.metadata.get("corpus", "").rpartition(" ")[2]
    )
    return direction if direction.count("-") == 1 and all(direction.split("-")) else None


def check_shortlist_direction(shortlist: Shortlist | None, directions: Sequence[str]) -> None:
    """Refuse to decode `directions` with a shortlist built for another one: its table allows the
    words of another target language (a multilingual model's en-de table restricting en-fr)."""
    built_for = shortlist_direction(shortlist) if shortlist is not None else None
    others = [direction for direction in directions if built_for and direction != built_for]
    if others:
        raise ValueError(
            f"--use_shortlist: the model's shortlist was built for {built_for} ("
            f"{shortlist.metadata.get('corpus')}) and would restrict {', '.join(others)} to "
            f"{built_for}'s words. Leave out --use_shortlist for "
            f"{'them' if len(others) > 1 else 'it'}, or evaluate {built_for} only."
        )


def corpus_coverage(
    shortlist: Shortlist,
    tokenizer,
    data: str,
    source_lang: str,
    target_lang: str,
    split: str,
    batch_sizes: Sequence[int] = (1, 32),
    max_pairs: int | None = None,
) -> dict:
    """`coverage` of `data`'s `split` for each batch size: {batch size: coverage}."""
    pairs = load_parallel_corpus(data, source_lang, target_lang, split, max_pairs=max_pairs)[
        "translation"
    ]
    source_ids = tokenizer([pair[source_lang] for pair in pairs])["input_ids"]
    target_ids = tokenizer([pair[target_lang] for pair in pairs])["input_ids"]
    return {size: coverage(shortlist, source_ids, target_ids, size) for size in batch_sizes}


def coverage(
    shortlist: Shortlist,
    source_ids: Sequence[Sequence[int]],
    target_ids: Sequence[Sequence[int]],
    batch_size: int = 1,
    extra: Sequence[int] = (),
) -> dict:
    """How much of the references a shortlist keeps, over batches of `batch_size` consecutive pairs:
    `tokens`, the share of reference target tokens inside their batch's union; `sentences`, the
    share of references entirely inside it; `union_size`, the union's mean size."""
    kept = total = whole = 0
    sizes = []
    for start in range(0, len(source_ids), batch_size):
        sources = source_ids[start : start + batch_size]
        allowed = shortlist.candidates(
            torch.as_tensor([token for ids in sources for token in ids])[None],
            extra=torch.as_tensor(list(extra), dtype=torch.long),
        )
        sizes.append(len(allowed))
        for target in target_ids[start : start + batch_size]:
            inside = torch.isin(torch.as_tensor(list(target), dtype=torch.long), allowed)
            kept, total, whole = (
                kept + int(inside.sum()),
                total + len(inside),
                whole + bool(inside.all()),
            )
    return {
        "tokens": kept / max(total, 1),
        "sentences": whole / max(len(target_ids), 1),
        "union_size": sum(sizes) / max(len(sizes), 1),
        "batch_size": batch_size,
    }


def vocabulary_map_lines(shortlist: Shortlist, tokens: Sequence[str]) -> list[str]:
    """CTranslate2's vocabulary map of the shortlist: `source<TAB>target target ...` per source
    token with a row, and `<TAB>always ...` (the empty source, whose targets are always allowed);
    `tokens[i]` is token i's string."""
    if len(tokens) < shortlist.vocab_size:
        raise ValueError(
            f"{len(tokens)} token strings for a shortlist of {shortlist.vocab_size} source tokens."
        )
    for token in tokens:
        if any(space in token for space in " \t\n"):
            raise ValueError(
                f"Token {token!r} holds whitespace, which CTranslate2's vocabulary map cannot hold."
            )
    lines = ["\t" + " ".join(tokens[i] for i in shortlist.always.tolist())]
    for source, row in enumerate(shortlist.table.tolist()):
        targets = [tokens[i] for i in row if i >= 0]
        if targets:
            lines.append(f"{tokens[source]}\t{' '.join(targets)}")
    return lines


def write_vocabulary_map(shortlist: Shortlist, tokens: Sequence[str], path: str | Path) -> Path:
    """Write `vocabulary_map_lines` to `path` (the file CTranslate2's converter takes as `vmap`)."""
    return atomic_write_text(path, "\n".join(vocabulary_map_lines(shortlist, tokens)) + "\n")


__all__ = [
    "build_shortlist",
    "build_shortlist_for_model",
    "cooccurrence_counts",
    "corpus_coverage",
    "coverage",
    "shortlist_from_texts",
    "special_token_ids",
    "vocabulary_map_lines",
    "write_vocabulary_map",
]
