"""Translate a file or standard input, one line in and one line out, in input order
(`dwlstm-translate`).

The lines are decoded as the evaluation decodes a test set: sorted by length into batches bounded by
source tokens (`evaluation.source_batches`), with the same settings
(`evaluation.decoding_settings`), so that a test set translated here gives the lines of the
evaluation's hypotheses.txt.

- Output to a file is written under a temporary name beside it and renamed when complete; an
  existing file is replaced only with --overwrite. While it runs, each finished batch is appended to
  a journal beside the output (`.NAME.partial`), so that a run stopped by Ctrl-C, a kill or a full
  disk leaves no truncated output under the final name, and --resume continues from the last
  complete batch.
- An empty line translates to an empty line; a line longer than the model's positions is cut to fit,
  with one warning that says how many were cut.
- A multilingual model (its tokenizer reserves `<2xx>` target tags, Johnson et al. 2017) takes
  --source_lang/--target_lang for the whole input, or JSON lines `{"text": ..., "src_lang": ...,
  "tgt_lang": ...}` (the translation pipeline's convention) with --json_lines; a direction the model
  lacks is refused before decoding.
"""

import hashlib
import json
import logging
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from tqdm import tqdm
from transformers.utils.logging import disable_progress_bar

from .checkpoints import load_saved_tokenizer
from .evaluation import (
    DecodingArguments,
    check_decoding_arguments,
    check_directions,
    decode_batches,
    decoding_settings,
    encode_sources,
    lines_text,
    load_model_for_evaluation,
    position_limit,
    prepare_decoding_process,
    source_batches,
    tagged_languages,
    write_lines,
)
from .files import atomic_write_text, no_space_reported, read_lines, text_lines

logger = logging.getLogger(__name__)

STANDARD_STREAM = "-"
JOURNAL_SUFFIX = ".partial"


@dataclass(kw_only=True)
class TranslationArguments(DecodingArguments):
    """What the translate command reads from its command line (HfArgumentParser)."""

    input: str = field(
        default=STANDARD_STREAM,
        metadata={
            "help": (
                "The sentences, one per line (UTF-8, gzip allowed); '-' (the default): standard "
                "input."
            )
        },
    )
    output: str = field(
        default=STANDARD_STREAM,
        metadata={
            "help": ("The translations, one per input line; '-' (the default): standard output.")
        },
    )
    source_lang: str | None = field(default=None, metadata={"help": "Source language, e.g. en."})
    target_lang: str | None = field(
        default=None,
        metadata={
            "help": (
                "Target language, e.g. de (a multilingual model needs it, unless each JSON line "
                "has one)."
            )
        },
    )
    json_lines: bool = field(
        default=False,
        metadata={
            "help": (
                'Read JSON lines {"text": ..., "src_lang": ..., "tgt_lang": ...} (the languages '
                "fall back "
                "to --source_lang/--target_lang)."
            )
        },
    )
    overwrite: bool = field(
        default=False, metadata={"help": ("Replace an existing --output (refused otherwise).")}
    )
    resume: bool = field(
        default=False,
        metadata={
            "help": (
                "Continue an interrupted translation into --output from its last complete batch."
            )
        },
    )
    quiet: bool = field(
        default=False,
        metadata={
            "help": (
                "No progress bar and no summary on standard error (neither shows when it is no "
                "terminal)."
            )
        },
    )


@dataclass
class Request:
    """The input read: the texts and, per line, the source and target language (None where none is
    given)."""

    texts: list[str]
    source_langs: list[str | None]
    target_langs: list[str | None]

    def fingerprint(self) -> str:
        text = json.dumps(asdict(self), ensure_ascii=False)
        return hashlib.sha256(text.encode("utf-8")).hexdigest()


class TranslationInterrupted(Exception):
    """Ctrl-C or a termination signal during decoding; the journal keeps the batches finished
    so far."""


def run_translation(args: TranslationArguments) -> dict:
    """Translate `args.input` into `args.output` (see the module docstring); return a summary: the
    lines, how many were decoded in this run, taken from the journal (--resume) and cut to fit, the
    seconds and lines per second."""
    prepare_decoding_process(args)
    check_decoding_arguments(args)
    disable_progress_bar()  # transformers' bar while loading the weights: this command has its own
    output = None if args.output == STANDARD_STREAM else Path(args.output)
    journal = None if output is None else Journal(output)
    check_output(args, output, journal)
    request = read_request(args)
    tokenizer = load_saved_tokenizer(
        args.model, "--model", trust_remote_code=args.trust_remote_code
    )
    model = load_model_for_evaluation(args)
    targets = check_request_directions(model, tokenizer, request, args.json_lines)
    start = time.perf_counter()
    encoded = encode_sources(
        tokenizer, request.texts, targets if tagged_languages(tokenizer) else None
    )
    encoded, cut = fit_positions(encoded, position_limit(model), tokenizer.eos_token_id)
    settings = decoding_settings(args)
    batches = source_batches(request.texts, encoded, settings.pop("max_tokens"))
    advice = "free space and run again with --resume" if journal else "free space and run again"
    try:
        with no_space_reported(f"the translations of {args.input}", advice):
            hypotheses, resumed = _decode_lines(
                model,
                tokenizer,
                encoded,
                batches,
                settings,
                journal,
                _run_fingerprint(args, request) if journal else None,
                args,
            )
            write_output(hypotheses, output)
    except KeyboardInterrupt:
        raise TranslationInterrupted(_interrupted_message(journal)) from None
    total = sum(map(len, batches))
    if journal is not None:
        journal.remove()
    seconds = time.perf_counter() - start
    summary = {
        "lines": len(hypotheses),
        "decoded": total - resumed,
        "resumed": resumed,
        "cut": cut,
        "seconds": round(seconds, 3),
        "lines_per_second": round((total - resumed) / seconds, 2),
    }
    if not args.quiet and sys.stderr.isatty():
        print(
            f"{summary['decoded']:,} lines translated in {seconds:.1f} s ("
            f"{summary['lines_per_second']} lines/s){f', {resumed:,} resumed' if resumed else ''}"
            f": {args.output}",
            file=sys.stderr,
        )
    return summary


def _decode_lines(
    model,
    tokenizer,
    encoded,
    batches,
    settings: dict,
    journal: "Journal | None",
    fingerprint: dict | None,
    args: TranslationArguments,
) -> tuple[list[str], int]:
    """Every line's translation ("" for a blank one), the batches decoded one by one and recorded in
    the journal (those of an interrupted run read back from it with --resume); returns them and how
    many were read back."""
    hypotheses = [""] * len(encoded)
    finished = set() if journal is None else journal.start(fingerprint, hypotheses, args.resume)
    remaining = [batch for batch in batches if not finished.issuperset(batch)]
    resumed = sum(map(len, batches)) - sum(map(len, remaining))
    with tqdm(
        total=sum(map(len, batches)),
        initial=resumed,
        unit=" lines",
        file=sys.stderr,
        desc="translating",
        leave=False,
        disable=args.quiet or not sys.stderr.isatty(),
    ) as bar:
        for batch, texts in decode_batches(model, tokenizer, encoded, remaining, **settings):
            for index, text in zip(batch, texts):
                hypotheses[index] = text
            if journal is not None:
                journal.record(batch, texts)
            bar.update(len(batch))
    return hypotheses, resumed


def check_output(
    args: TranslationArguments, output: Path | None, journal: "Journal | None"
) -> None:
    """Refuse, before any work, an output that would replace something unasked: an existing file
    (without --overwrite), the input itself, a folder; and an unfinished run's journal neither
    resumed nor overwritten."""
    if output is None:
        if args.resume:
            raise ValueError(
                "--resume continues a translation into a file: give --output FILE (standard output "
                "cannot be continued)."
            )
        return
    if args.resume and args.overwrite:
        raise ValueError(
            "--resume continues an unfinished translation, --overwrite starts it again: give one."
        )
    if output.is_dir():
        raise ValueError(f"--output {output} is a folder: give a file name.")
    if args.input != STANDARD_STREAM and Path(args.input).resolve() == output.resolve():
        raise ValueError(f"--output {output} is the input file: give another --output.")
    if output.exists() and not args.overwrite:
        raise ValueError(
            f"--output {output} exists: pass --overwrite to replace it, or give another --output."
        )
    if journal.path.exists() and not (args.resume or args.overwrite):
        raise ValueError(
            f"An unfinished translation into {output} left {journal.path}: continue it with "
            "--resume, "
            "or start again with --overwrite."
        )
    if not output.parent.is_dir():
        raise ValueError(
            f"--output {output}: the folder {output.parent} does not exist; create it first."
        )


def read_request(args: TranslationArguments) -> Request:
    """The lines of --input (a file or standard input) and their languages; a binary or non-UTF-8
    input, or a JSON line without a text, is refused naming the line."""
    if args.input == STANDARD_STREAM:
        name = "standard input"
        if sys.stdin.isatty() and not args.quiet:
            print(
                "Reading standard input, one sentence per line (end with Ctrl-D).", file=sys.stderr
            )
        lines = text_lines(sys.stdin.buffer.read(), name)
    else:
        name = args.input
        if not Path(name).is_file():
            raise ValueError(
                f"--input {name} is not a file: give a text file with one sentence per line, or "
                "'-'."
            )
        lines = read_lines(name)
    binary = next((number for number, line in enumerate(lines, start=1) if "\x00" in line), None)
    if binary is not None:
        raise ValueError(
            f"{name} holds NUL bytes (line {binary}): it is a binary file, not text with one "
            "sentence "
            "per line."
        )
    if not args.json_lines:
        count = len(lines)
        return Request(lines, [args.source_lang] * count, [args.target_lang] * count)
    request = Request([], [], [])
    for number, line in enumerate(lines, start=1):
        text, source, target = _json_line(line, name, number) if line.strip() else ("", None, None)
        request.texts.append(text)
        request.source_langs.append(source or args.source_lang)
        request.target_langs.append(target or args.target_lang)
    return request


def _json_line(line: str, name: str, number: int) -> tuple[str, str | None, str | None]:
    example = '{"text": "A man rides a horse.", "src_lang": "en", "tgt_lang": "de"}'
    try:
        value = json.loads(line)
    except json.JSONDecodeError as error:
        raise ValueError(
            f"{name} line {number} is not JSON ({error.msg}): --json_lines reads lines like "
            f"{example}."
        ) from None
    if not isinstance(value, dict) or not isinstance(value.get("text"), str):
        raise ValueError(
            f'{name} line {number} has no "text" string: --json_lines reads lines like {example}.'
        )
    languages = [value.get(key) for key in ("src_lang", "tgt_lang")]
    if not all(language is None or isinstance(language, str) for language in languages):
        raise ValueError(
            f'{name} line {number}: src_lang and tgt_lang are language codes like "de".'
        )
    return value["text"], *languages


def check_request_directions(
    model, tokenizer, request: Request, json_lines: bool
) -> list[str | None]:
    """The target language of every line, after refusing a direction the model lacks: a multilingual
    model (with `<2xx>` tags) needs a target it has a tag for (one with a single tag takes that one
    by default) and a source among its languages (`evaluation.check_directions`); a model without
    tags translates only the directions of its config's `language_pairs`, when they are listed."""
    tagged = tagged_languages(tokenizer)
    targets = list(request.target_langs)
    if len(tagged) == 1:
        targets = [target or tagged[0] for target in targets]
    directions = {
        (source, target)
        for text, source, target in zip(request.texts, request.source_langs, targets)
        if text.strip()
    }
    if tagged:
        if any(target is None for _, target in directions):
            raise ValueError(
                f"The model is multilingual (it translates into {tagged}): give --target_lang"
                f"{' or a tgt_lang on every JSON line' if json_lines else ''}."
            )
        check_directions(model, tokenizer, sorted(directions, key=str), with_tags=True)
        return targets
    pairs = list(getattr(model.config, "language_pairs", None) or [])
    for source, target in sorted(directions, key=str):
        known = {pair.split("-")[0] for pair in pairs}, {pair.split("-")[1] for pair in pairs}
        fits = (source is None or source in known[0]) and (target is None or target in known[1])
        if pairs and (not fits or (source and target and f"{source}-{target}" not in pairs)):
            raise ValueError(
                f"The model translates {pairs} (its config's language_pairs), not "
                f"{source or '?'}-{target or '?'}: give --source_lang/--target_lang of one of "
                "them, "
                "or another model."
            )
    return targets


def fit_positions(
    encoded: list[list[int]], limit, eos_token_id: int | None
) -> tuple[list[list[int]], int]:
    """Sources longer than the model's positions cut to `limit` tokens (the end of sentence kept),
    with one warning saying how many; returns the sources and that number."""
    long = [index for index, ids in enumerate(encoded) if len(ids) > limit]
    for index in long:
        ids = encoded[index]
        end = ids[-1:] if eos_token_id is not None and ids[-1] == eos_token_id else []
        encoded[index] = ids[: limit - len(end)] + end
    if long:
        logger.warning(
            "%d line(s) longer than the model's %d positions were cut to fit (the first: line "
            "%d); their translations cover only the start.",
            len(long),
            limit,
            long[0] + 1,
        )
    return encoded, len(long)


def write_output(hypotheses: Sequence[str], output: Path | None) -> None:
    """The translations into `output` (atomically, `evaluation.write_lines`) or onto
    standard output."""
    if output is not None:
        write_lines(hypotheses, output)
        return
    text = lines_text(hypotheses)
    if getattr(sys.stdout, "buffer", None) is not None:  # UTF-8 whatever the terminal's locale says
        sys.stdout.flush()
        sys.stdout.buffer.write(text.encode("utf-8"))
        sys.stdout.buffer.flush()
    else:
        sys.stdout.write(text)


class Journal:
    """The batches of an unfinished translation into `output`, one JSON line each after a first line
    that fingerprints the run (input, model, settings): what --resume reads back. A line cut short
    by a kill is ignored, so the journal always gives whole batches."""

    def __init__(self, output: Path):
        self.path = output.parent / f".{output.name}{JOURNAL_SUFFIX}"
        self._file = None

    def start(self, fingerprint: dict, hypotheses: list[str], resume: bool) -> set[int]:
        """Open the journal for this run; with `resume`, fill `hypotheses` from a journal of the
        same run and return the indices found. A journal of another run is refused; none at all
        starts from the beginning."""
        finished, lines = set(), [json.dumps(fingerprint, ensure_ascii=False)]
        if resume and self.path.exists():
            finished, lines = self._read(fingerprint, hypotheses)
        elif resume:
            logger.warning(
                "--resume: no unfinished translation (%s); translating from the beginning.",
                self.path,
            )
        # The whole batches read back, without a line cut short, replace the journal in one rename.
        atomic_write_text(self.path, "".join(line + "\n" for line in lines))
        self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115  (closed by `remove`)
        return finished

    def _read(self, fingerprint: dict, hypotheses: list[str]) -> tuple[set[int], list[str]]:
        lines = self.path.read_text(encoding="utf-8").split("\n")
        try:
            recorded = json.loads(lines[0])
        except json.JSONDecodeError:
            recorded = {}
        if recorded != fingerprint:
            changed = [
                key
                for key in fingerprint
                if not isinstance(recorded, dict) or recorded.get(key) != fingerprint[key]
            ]
            raise ValueError(
                f"{self.path} is from a translation with another {', '.join(changed) or 'format'}: "
                "--resume continues only the same input, model and settings; start again with "
                "--overwrite."
            )
        finished, kept = set(), lines[:1]
        for line in filter(None, lines[1:]):
            try:
                batch = json.loads(line)
            except json.JSONDecodeError:
                break  # the last line, cut short by a kill: that batch is decoded again
            for index, text in zip(batch["lines"], batch["translations"]):
                hypotheses[index] = text
                finished.add(index)
            kept.append(line)
        return finished, kept

    def record(self, batch: list[int], translations: list[str]) -> None:
        self._write_lines(
            [json.dumps({"lines": batch, "translations": translations}, ensure_ascii=False)]
        )

    def _write_lines(self, lines: list[str]) -> None:
        self._file.write("".join(line + "\n" for line in lines))
        self._file.flush()
        os.fsync(self._file.fileno())

    def remove(self) -> None:
        if self._file is not None:
            self._file.close()
        self.path.unlink(missing_ok=True)


def _run_fingerprint(args: TranslationArguments, request: Request) -> dict:
    """What must be the same for a journal to be continued: the input, the model and every decoding
    setting."""
    return {
        "input": request.fingerprint(),
        "model": str(Path(args.model).resolve()) if Path(args.model).exists() else args.model,
        "settings": decoding_settings(args),
        "dtype": args.dtype,
        "quantize": args.quantize,
        "precision": args.precision,
    }


def _interrupted_message(journal: Journal | None) -> str:
    if journal is None:
        return "interrupted: nothing was written; run again to translate the input."
    return (
        f"interrupted: the finished batches are in {journal.path}; continue with the same "
        "command and --resume."
    )


__all__ = ["Request", "TranslationArguments", "TranslationInterrupted", "run_translation"]
