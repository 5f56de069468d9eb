"""Many-to-many translation with one model: directions, tags, temperature sampling and per-direction scores.

A multilingual model (001 §3.5; Johnson et al. 2017) is an ordinary translation model trained on the pairs
of many directions at once, with the target language named by a tag ``<2xx>`` in front of every source.
This module holds what that adds to the bilingual setup:

- `parse_language_pairs`: ``"en-de,de-en"`` or ``"all"`` (every ordered pair of the corpus's languages)
  into a list of (source, target) directions;
- `load_multilingual_corpus`: the pairs of many directions, from one or several sources (local folders,
  JSON lines, Hub corpora), as one Dataset with ``source_lang``, ``target_lang``, ``source``, ``target``;
- `tokenize_directions`: the target tag on the source side, a ``direction`` column kept for the sampler;
- `temperature_probabilities` and `TemperatureTokenBatchSampler`: directions drawn with probability
  proportional to (size share)^(1/T) (T = 1: proportional to the data, T = 5: the common OPUS-100 setting),
  packed into the usual token-count batches, so that a batch may mix directions;
- `group_averages`, `win_ratio` and `off_target_rate` for the evaluation of many directions at once.
"""

import json
import logging
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import datasets
import torch

from .batching import TokenBatchSampler, _length_order, pack_by_tokens, split_to_multiple
from .data import LANGUAGE_CODE, load_parallel_corpus
from .files import prepare_output_dir

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


def parse_language_pairs(pairs: str | Sequence[str], languages: Sequence[str] | None = None) -> list[tuple[str, str]]:
    """Directions from ``"en-de,de-en"`` (or a list of "xx-yy"); ``"all"`` gives every ordered pair of `languages`.

    Duplicates are refused (they would silently double a direction's share of the data).
    """
    if isinstance(pairs, str):
        if pairs.strip() == ALL_PAIRS:
            if not languages or len(set(languages)) < 2:
                raise ValueError(f"--language_pairs all needs a corpus with at least two languages, got {languages!r}.")
            codes = sorted(set(languages))
            return [(source, target) for source in codes for target in codes if source != target]
        pairs = [pair.strip() for pair in pairs.split(",") if pair.strip()]
    directions = []
    for pair in pairs:
        codes = pair.split("-") if isinstance(pair, str) else list(pair)
        if len(codes) != 2 or not all(LANGUAGE_CODE.fullmatch(code) for code in codes) or codes[0] == codes[1]:
            raise ValueError(f"A language pair looks like 'en-de' (two different codes and a hyphen), got {pair!r}.")
        directions.append((codes[0], codes[1]))
    if not directions:
        raise ValueError("No language pair given: pass e.g. --language_pairs en-de,de-en (or 'all').")
    repeated = sorted({f"{s}-{t}" for s, t in directions if directions.count((s, t)) > 1})
    if repeated:
        raise ValueError(f"Language pairs given more than once: {repeated}.")
    return directions


def pair_name(direction: tuple[str, str]) -> str:
    return f"{direction[0]}-{direction[1]}"


def corpus_languages(source: str | Path, split: str = "train") -> list[str]:
    """The languages of a local folder (its ``{split}.{lang}[.gz]`` files) or of a JSON-lines file (first line)."""
    path = Path(source)
    if path.is_dir():
        names = [file.name.removesuffix(".gz") for file in path.iterdir() if file.name.startswith(f"{split}.")]
        return sorted({name.rsplit(".", 1)[-1] for name in names})
    if path.is_file():
        from .data import _numbered_lines

        for _, line in _numbered_lines(path):
            if line.strip():
                record = json.loads(line)
                return sorted(record.get("translation", record))
    raise ValueError(f"--language_pairs all needs a local folder or JSON-lines file to list languages; {source!r} is "
                     "neither. Name the pairs instead, e.g. --language_pairs en-de,de-en.")


def parse_sources(dataset: str, language_pairs: str, more_datasets: Sequence[str] = (),
                  split: str = "train") -> list[tuple[str, list[tuple[str, str]]]]:
    """[(source, directions), ...] from `--dataset` + `--language_pairs` and each ``SOURCE=PAIRS`` of `more_datasets`."""
    specs = [(dataset, language_pairs)]
    for spec in more_datasets:
        source, separator, pairs = spec.rpartition("=")
        if not separator or not source:
            raise ValueError(f"--more_datasets entries look like 'opus100=en-fr,fr-en', got {spec!r}.")
        specs.append((source, pairs))
    return [
        (source, parse_language_pairs(pairs, corpus_languages(source, split) if pairs.strip() == ALL_PAIRS else None))
        for source, pairs in specs
    ]


def load_multilingual_corpus(
    sources: Sequence[tuple[str, Sequence[tuple[str, str]]]],
    split: str = "train",
    max_pairs: int | None = None,
    hub_config: str | None = None,
) -> datasets.Dataset:
    """The pairs of every (source, directions) entry in one Dataset: ``source_lang, target_lang, source, target``.

    Each source is anything `data.load_parallel_corpus` reads (a folder of aligned files gives any pair of its
    languages, a JSON-lines file any two of each line's languages, "opus100" one configuration per pair with
    English, serving both directions). `max_pairs` applies per direction and source.
    """
    parts = []
    for source, directions in sources:
        for source_lang, target_lang in directions:
            pairs = load_parallel_corpus(source, source_lang, target_lang, split, max_pairs=max_pairs,
                                         hub_config=hub_config)["translation"]
            parts.append(datasets.Dataset.from_dict({
                "source_lang": [source_lang] * len(pairs), "target_lang": [target_lang] * len(pairs),
                "source": [pair[source_lang] for pair in pairs], "target": [pair[target_lang] for pair in pairs],
            }))
            logger.info("%s %s-%s (%s): %d pairs.", source, source_lang, target_lang, split, len(pairs))
    return datasets.concatenate_datasets(parts)


def tokenize_directions(dataset: datasets.Dataset, tokenizer, max_length: int | None = 256,
                        num_proc: int | None = None) -> datasets.Dataset:
    """``input_ids`` (target tag first), ``attention_mask``, ``labels`` and a ``direction`` column ("en-de").

    Every target language must have its tag reserved in the tokenizer (`train_tokenizer.py --language_pairs`).
    """
    from .data import filter_long_pairs

    vocabulary = tokenizer.get_vocab()
    missing = sorted({language_tag(t) for t in dataset.unique("target_lang")} - set(vocabulary))
    if missing:
        raise ValueError(f"The tokenizer has no language tags {missing}: train it with scripts/train_tokenizer.py "
                         "--language_pairs (same pairs), which reserves a tag per target language.")

    def encode(batch):
        sources = [tag_source(text, target) for text, target in zip(batch["source"], batch["target_lang"])]
        encoded = tokenizer(sources, text_target=batch["target"])
        encoded["direction"] = [f"{s}-{t}" for s, t in zip(batch["source_lang"], batch["target_lang"])]
        return encoded

    tokenized = dataset.map(encode, batched=True, remove_columns=dataset.column_names, num_proc=num_proc,
                            desc="Tokenizing")
    return filter_long_pairs(tokenized, max_length, num_proc=num_proc)


def split_by_direction(dataset: datasets.Dataset) -> dict[str, datasets.Dataset]:
    """{"en-de": the rows of that direction, ...}: the Trainer logs a loss per entry (``eval_en-de_loss``)."""
    directions = dataset["direction"]
    names = list(dict.fromkeys(directions))
    return {name: dataset.select([i for i, d in enumerate(directions) if d == name]) for name in names}


def balanced_sentences(corpus: datasets.Dataset, temperature: float = 5.0, seed: int = 0) -> list[str]:
    """The distinct sentences of each language of `corpus`, resampled to `temperature_counts` shares.

    A joint BPE learns its merges from frequencies, so a small language would get few merges of its own;
    drawing each language's sentences with temperature-based probabilities (a small language's sentences
    repeated, a large one's subsampled) gives it its share, as for the training directions.
    """
    per_language: dict[str, dict[str, None]] = {}
    for column, language_column in (("source", "source_lang"), ("target", "target_lang")):
        for text, language in zip(corpus[column], corpus[language_column]):
            per_language.setdefault(language, {})[text] = None  # aligned corpora repeat a side per direction
    sentences = {language: list(texts) for language, texts in per_language.items()}
    counts = temperature_counts({language: len(texts) for language, texts in sentences.items()}, temperature)
    generator = torch.Generator().manual_seed(seed)
    sample = []
    for language, texts in sorted(sentences.items()):
        repeats, remainder = divmod(counts[language], len(texts))
        chosen = torch.randperm(len(texts), generator=generator)[:remainder].tolist()
        sample += texts * repeats + [texts[i] for i in chosen]
        logger.info("Tokenizer sample: %d sentences of %s (%d distinct).", counts[language], language, len(texts))
    return sample


# --- Temperature sampling ------------------------------------------------------------------------------------


def temperature_probabilities(sizes: Mapping[str, int], temperature: float) -> dict[str, float]:
    """p_i = q_i^(1/T) / sum_j q_j^(1/T), q_i = n_i / sum_j n_j (Arivazhagan et al. 2019; 001 §3.5 with T = 5)."""
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not temperature > 0:
        raise ValueError(f"`sampling_temperature` must be a positive number (1 = proportional), got {temperature!r}.")
    if not sizes or any(size < 1 for size in sizes.values()):
        raise ValueError(f"Every direction needs at least one pair, got sizes {dict(sizes)}.")
    total = sum(sizes.values())
    weights = {name: (size / total) ** (1.0 / temperature) for name, size in sizes.items()}
    norm = sum(weights.values())
    return {name: weight / norm for name, weight in weights.items()}


def temperature_counts(sizes: Mapping[str, int], temperature: float) -> dict[str, int]:
    """How many pairs of each direction one epoch holds: the same total, shared by `temperature_probabilities`."""
    total = sum(sizes.values())
    return {name: max(1, round(p * total)) for name, p in temperature_probabilities(sizes, temperature).items()}


class TemperatureTokenBatchSampler(TokenBatchSampler):
    """`TokenBatchSampler` over pairs drawn per epoch with temperature-based probabilities per direction.

    Each epoch (seeded by ``seed + epoch``, so every rank and every resumed run draws the same) takes
    `temperature_counts` pairs of each direction: a random subset of a large direction, every pair of a small
    one repeated as often as needed plus a random remainder. The drawn pairs are sorted by length and packed
    by `max_tokens` as in `TokenBatchSampler`, so a batch mixes directions of similar length. The number of
    batches per epoch is fixed at that of epoch 0 (the Trainer's step counting and resuming rely on it): the
    largest batches are halved when an epoch packs fewer, random ones are left out when it packs more.
    """

    def __init__(self, source_lengths, target_lengths, directions: Sequence[str], max_tokens: int,
                 temperature: float = 1.0, num_replicas: int = 1, rank: int = 0, seed: int = 0):
        if len(directions) != len(source_lengths):
            raise ValueError(f"Got {len(directions)} directions for {len(source_lengths)} pairs.")
        super().__init__(source_lengths, target_lengths, max_tokens, num_replicas=num_replicas, rank=rank, seed=seed)
        self.source_lengths, self.target_lengths = torch.as_tensor(source_lengths), torch.as_tensor(target_lengths)
        names = list(dict.fromkeys(directions))
        self.direction_indices = {name: [] for name in names}
        for index, name in enumerate(directions):
            self.direction_indices[name].append(index)
        self.counts = temperature_counts({name: len(ids) for name, ids in self.direction_indices.items()},
                                         temperature)
        self._epoch_batches = {}
        self.batches = self._draw_batches(0, count=None)

    def _draw_batches(self, epoch: int, count: int | None) -> list[list[int]]:
        generator = torch.Generator().manual_seed(self.seed + epoch)
        drawn = []
        for name, indices in self.direction_indices.items():
            indices = torch.as_tensor(indices)
            repeats, remainder = divmod(self.counts[name], len(indices))
            drawn += [indices] * repeats + [indices[torch.randperm(len(indices), generator=generator)[:remainder]]]
        drawn = torch.cat(drawn)
        order = drawn[_length_order(self.source_lengths[drawn], self.target_lengths[drawn], self.seed + epoch)]
        sizes = torch.maximum(self.source_lengths, self.target_lengths).tolist()
        batches = pack_by_tokens(order.tolist(), sizes, self.max_tokens)
        if count is None:
            return split_to_multiple(batches, self.num_replicas)
        while len(batches) < count:  # halve the largest (fewer tokens a batch, nothing dropped)
            largest = max(range(len(batches)), key=lambda position: len(batches[position]))
            batch = batches.pop(largest)
            batches[largest:largest] = [batch[: len(batch) // 2], batch[len(batch) // 2:]]
        if len(batches) > count:  # leave random batches out: the draw was random anyway
            keep = sorted(torch.randperm(len(batches), generator=generator)[:count].tolist())
            batches = [batches[position] for position in keep]
        return batches

    def batches_of_epoch(self, epoch: int) -> list[list[int]]:
        if epoch not in self._epoch_batches:
            self._epoch_batches = {epoch: self.batches if epoch == 0 else self._draw_batches(epoch, len(self.batches))}
        return self._epoch_batches[epoch]

    def __iter__(self) -> Iterator[list[int]]:
        batches = self.batches_of_epoch(self.epoch)
        order = torch.randperm(len(batches), generator=torch.Generator().manual_seed(self.seed + self.epoch)).tolist()
        for position in range(self.rank, len(batches), self.num_replicas):
            yield list(batches[order[position]])


# --- Evaluation over many directions --------------------------------------------------------------------------


def direction_groups(directions: Sequence[str], subset: Sequence[str] = (), pivot: str = PIVOT) -> dict[str, list]:
    """{"out_of_english": [...], "into_english": [...], "zero_shot": [...], "subset": [...]} (empty groups left out)."""
    pairs = [direction.split("-") for direction in directions]
    groups = {
        f"out_of_{_name(pivot)}": [f"{s}-{t}" for s, t in pairs if s == pivot],
        f"into_{_name(pivot)}": [f"{s}-{t}" for s, t in pairs if t == pivot],
        "zero_shot": [f"{s}-{t}" for s, t in pairs if pivot not in (s, t)],
        "all": list(directions),
    }
    unknown = sorted(set(subset) - set(directions))
    if unknown:
        raise ValueError(f"--average_subset names directions that were not evaluated: {unknown}; "
                         f"evaluated: {list(directions)}.")
    if subset:
        groups["subset"] = list(subset)
    return {name: members for name, members in groups.items() if members}


def _name(code: str) -> str:
    return "english" if code == "en" else code


def group_averages(scores: Mapping[str, Mapping[str, float]], groups: Mapping[str, Sequence[str]],
                   metrics: Sequence[str] = ("sacrebleu", "tokenized_bleu", "chrf", "off_target_rate")) -> dict:
    """{group: {"directions": n, metric: mean over the group's directions}} (the BLEU94 / BLEU4 style)."""
    averages = {}
    for group, members in groups.items():
        averages[group] = {"directions": len(members)}
        for metric in metrics:
            values = [scores[member][metric] for member in members if scores[member].get(metric) is not None]
            if values:
                averages[group][metric] = round(sum(values) / len(values), 4 if metric == "off_target_rate" else 2)
    return averages


def win_ratio(system: Mapping[str, float], baseline: Mapping[str, float]) -> dict:
    """Share of the common directions where `system` scores higher than `baseline` (001 Table 7 "WR")."""
    common = [direction for direction in system if direction in baseline]
    if not common:
        raise ValueError(f"The baseline has none of the evaluated directions {list(system)}; it has {list(baseline)}.")
    wins = [direction for direction in common if system[direction] > baseline[direction]]
    ties = [direction for direction in common if system[direction] == baseline[direction]]
    return {"directions": len(common), "wins": len(wins), "ties": len(ties),
            "win_ratio": round(len(wins) / len(common), 4)}


# --- Off-target translation -------------------------------------------------------------------------------------


class LanguageIdentifier:
    """Offline language identification with py3langid (its model ships inside the wheel: no download).

    Restricted to `languages` (the model's languages): the question is "which of the model's languages is
    this", and a restricted classifier is far more reliable on short sentences than one over 97 languages.
    `languages=None` keeps all of py3langid's languages.
    """

    def __init__(self, languages: Sequence[str] | None):
        try:
            from py3langid.langid import MODEL_FILE
            from py3langid.langid import LanguageIdentifier as Identifier
        except ImportError as error:
            raise ImportError("Off-target rates need py3langid: pip install 'modeling_dwlstm[langid]' "
                              "(or pip install py3langid).") from error
        self.identifier = Identifier.from_model_file(MODEL_FILE)
        if languages is None:
            return
        unknown = sorted(set(languages) - set(self.identifier.nb_classes))
        if unknown:
            raise ValueError(f"py3langid does not know the languages {unknown}; off-target rates cannot be measured "
                             "for them.")
        self.identifier.set_languages(sorted(set(languages)))

    def classify(self, texts: Sequence[str]) -> list[str]:
        return [self.identifier.classify(text)[0] for text in texts]


def off_target_rate(hypotheses: Sequence[str], target_lang: str, identifier: LanguageIdentifier) -> float:
    """Share of `hypotheses` not identified as `target_lang` (an empty output counts as off target)."""
    if not hypotheses:
        raise ValueError("No hypotheses to check.")
    languages = identifier.classify(hypotheses)
    off = sum(1 for text, language in zip(hypotheses, languages) if not text.strip() or language != target_lang)
    return round(off / len(hypotheses), 4)


def score_off_target(hypotheses: Sequence[str], target_lang: str | None,
                     languages: Sequence[str] | None = None) -> dict:
    """``{"off_target_rate", "language_id"}`` of `hypotheses` for `target_lang`: the `evaluate` module's
    "off_target" configuration. `languages`: the candidates (the model's languages; None: py3langid's 97)."""
    if not target_lang:
        raise ValueError("The off-target rate needs the target language: pass target_lang='de' (an ISO 639-1 code).")
    identifier = LanguageIdentifier(None if languages is None else sorted({*languages, target_lang}))
    return {"off_target_rate": off_target_rate(list(hypotheses), target_lang, identifier),
            "language_id": "py3langid" + (f", restricted to {sorted({*languages, target_lang})}" if languages else "")}


__all__ = [
    "language_tag", "tag_source", "parse_language_pairs", "parse_sources", "corpus_languages",
    "load_multilingual_corpus", "tokenize_directions", "balanced_sentences", "split_by_direction", "temperature_probabilities",
    "temperature_counts", "TemperatureTokenBatchSampler", "direction_groups", "group_averages", "win_ratio",
    "LanguageIdentifier", "off_target_rate", "score_off_target", "evaluate_directions", "results_table",
]


def evaluate_directions(args) -> dict:
    """`run_evaluation` for many directions (`args.language_pairs`): one decoding pass, batches mixing directions.

    Writes ``output_dir/DIRECTION/hypotheses.txt`` and ``output_dir/results.json`` with the settings,
    ``directions`` (the scores of `evaluation.score_translations` plus ``off_target_rate`` per direction),
    ``averages`` per group (`direction_groups`) and, given `args.baseline_results`, ``win_ratio`` (over
    sacreBLEU) with ``paired_bootstrap`` per direction (against the baseline's hypotheses of that direction).
    """
    from .checkpoints import load_saved_tokenizer
    from .evaluation import (
        check_parallel,
        load_model_for_evaluation,
        paired_bootstrap,
        read_lines,
        score_translations,
        translate_sentences,
        write_json,
        write_lines,
    )

    if args.data is None or args.source_lang or args.target_lang or args.source_file or args.baseline_hypotheses:
        raise ValueError("--language_pairs takes the test set from --data (with --split) and replaces --source_lang/"
                         "--target_lang, --source_file/--reference_file and --baseline_hypotheses (use "
                         "--baseline_results).")
    languages = corpus_languages(args.data, args.split) if args.language_pairs.strip() == ALL_PAIRS else None
    names = [pair_name(direction) for direction in parse_language_pairs(args.language_pairs, languages)]
    subset = [pair_name(direction) for direction in parse_language_pairs(args.average_subset)] if args.average_subset \
        else []
    groups = direction_groups(names, subset)
    baseline = _read_baseline(args.baseline_results, names) if args.baseline_results else None
    tests = {name: load_parallel_corpus(args.data, *name.split("-"), args.split, max_pairs=args.max_pairs)["translation"]
             for name in names}
    identifier = None
    if args.off_target:
        identifier = LanguageIdentifier(sorted({code for name in names for code in name.split("-")}))
    empty = [f"{name} line {number}" for name in names
             for number, pair in enumerate(tests[name], start=1) if not pair[name.split("-")[0]].strip()]
    if empty:
        logger.warning("%d empty source line(s) (the first: %s) get an empty translation.", len(empty), empty[0])
    baseline_hypotheses = {name: read_lines(path) for name, path in baseline.items()} if baseline else None
    for name in baseline_hypotheses or ():
        check_parallel(baseline_hypotheses[name], [pair[name.split("-")[1]] for pair in tests[name]],
                       f"baseline hypotheses in {baseline[name]}", f"the {name} references")
    prepare_output_dir(args.output_dir, args.overwrite_output_dir)  # before loading and decoding, not after
    tokenizer = load_saved_tokenizer(args.model, "--model", trust_remote_code=args.trust_remote_code)
    model = load_model_for_evaluation(args)
    tagged = [tag_source(pair[name.split("-")[0]], name.split("-")[1]) for name in names for pair in tests[name]]
    translations = translate_sentences(
        model, tokenizer, tagged, num_beams=args.num_beams, length_penalty=args.length_penalty,
        max_tokens=args.max_tokens, **({} if args.max_new_tokens is None else {"max_new_tokens": args.max_new_tokens}),
    )
    directions, start = {}, 0
    for name in names:
        source_lang, target_lang = name.split("-")
        hypotheses = translations.hypotheses[start: start + len(tests[name])]
        references = [pair[target_lang] for pair in tests[name]]
        start += len(tests[name])
        directions[name] = score_translations(hypotheses, references, target_lang)
        directions[name]["off_target_rate"] = off_target_rate(hypotheses, target_lang, identifier) if identifier \
            else None
        if baseline is not None:
            directions[name]["paired_bootstrap"] = {
                "baseline": str(baseline[name]),
                **paired_bootstrap(hypotheses, baseline_hypotheses[name], references,
                                   num_samples=args.bootstrap_samples),
            }
        write_lines(hypotheses, Path(args.output_dir) / name / "hypotheses.txt")
    results = {
        "model": args.model, "test_set": args.data, "split": args.split, "num_beams": args.num_beams,
        "length_penalty": args.length_penalty, "max_tokens": args.max_tokens,
        "language_id": "py3langid, restricted to the evaluated languages" if identifier else None,
        "seconds": round(translations.seconds, 3), "sentences_per_second": round(translations.sentences_per_second, 2),
        "device": str(model.device), "dtype": args.dtype, "quantize": args.quantize,
        "directions": directions, "averages": group_averages(directions, groups),
    }
    if baseline is not None:
        baseline_scores = json.loads(Path(args.baseline_results).read_text())["directions"]
        results["win_ratio"] = {
            "baseline": args.baseline_results, "metric": "sacrebleu",
            **win_ratio({name: scores["sacrebleu"] for name, scores in directions.items()},
                        {name: baseline_scores[name]["sacrebleu"] for name in names}),
        }
    write_json(results, Path(args.output_dir) / "results.json")
    return results


def _read_baseline(path: str, names: Sequence[str]) -> dict[str, Path]:
    """{direction: the baseline's hypotheses file}, checked before decoding starts."""
    try:
        evaluated = json.loads(Path(path).read_text())["directions"]
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise ValueError(f"--baseline_results {path}: not the results.json of a multilingual evaluation ({error}).") \
            from error
    missing = [name for name in names if name not in evaluated]
    files = {name: Path(path).parent / name / "hypotheses.txt" for name in names}
    missing += [f"{name} (no {file})" for name, file in files.items() if name in evaluated and not file.is_file()]
    if missing:
        raise ValueError(f"--baseline_results {path} lacks the directions {missing}; it has {sorted(evaluated)}.")
    return files


def results_table(results: Mapping, baseline: Mapping | None = None) -> list[str]:
    """Markdown lines: one row per direction of a multilingual results.json, then one per group average.

    With `baseline` (another results.json of the same directions) each row adds its sacreBLEU and the paired
    bootstrap p-value stored in `results` (evaluated with --baseline_results).
    """
    with_baseline = baseline is not None
    header = "| direction | sacreBLEU | chrF | off-target |" + (" baseline sacreBLEU | p (bootstrap) |" if with_baseline
                                                               else "")
    lines = [header, "|" + "---|" * (header.count("|") - 1)]

    def cell(value, percent=False):
        if value is None:
            return "-"
        return f"{100 * value:.1f}%" if percent else f"{value:.2f}"

    for name, scores in results["directions"].items():
        row = [name, cell(scores["sacrebleu"]), cell(scores["chrf"]), cell(scores.get("off_target_rate"), True)]
        if with_baseline:
            bootstrap = scores.get("paired_bootstrap", {})
            row += [cell(baseline["directions"][name]["sacrebleu"]), cell(bootstrap.get("p_value"))]
        lines.append("| " + " | ".join(row) + " |")
    for group, scores in results["averages"].items():
        row = [f"**{group.replace('_', ' ')}** ({scores['directions']})", cell(scores.get("sacrebleu")),
               cell(scores.get("chrf")), cell(scores.get("off_target_rate"), True)]
        if with_baseline:
            row += [cell(baseline["averages"].get(group, {}).get("sacrebleu")), ""]
        lines.append("| " + " | ".join(row) + " |")
    if "win_ratio" in results:
        ratio = results["win_ratio"]
        lines += ["", f"Win ratio over the baseline ({ratio['metric']}): {ratio['wins']} of {ratio['directions']} "
                      f"directions ({ratio['win_ratio']:.2f}), {ratio['ties']} ties."]
    return lines
