"""A fresh set of mistakes a user makes, run against every script and the Python API, each outcome
classified.

    OMP_NUM_THREADS=1 PYTHONPATH=. python experiments/probes/probes.py [--data PATH] [--only NAME ...]

Each probe makes one mistake (a wrong value, path, encoding or kind of file, swapped arguments, an
interrupted or concurrent run, a folder that cannot be written, ...) with tiny models and a few
hundred lines of Multi30k, and records the exit code, the last line of stderr (or the exception),
whether a file it guards was lost or overwritten, and whether the result is wrong by its own check
(line counts, which model was evaluated, what an output folder holds). The outcome is one of

- "clear error": refused with one line that matches what the probe expects it to say (what was wrong
  and what to do); argparse's usage errors count as one line;
- "handled": it did the right thing (the probe's check passes), perhaps saying so in a warning;
- "unclear": a traceback, or a message that does not say what was wrong;
- "silent wrong": it succeeded with a wrong result, without a word;
- "data lost": a guarded file (an input, a checkpoint, a model) was deleted or overwritten.

Scripts run in this process (as `python scripts/NAME.py ARGV` would: `runpy`, stderr captured, exit
code from SystemExit), except where a second process is the point (concurrent and interrupted runs,
another user). Writes results.md (the command, the counts, one row per probe) and results.json into
--output_dir.
"""  # noqa: E501

import argparse
import contextlib
import gzip
import hashlib
import io
import json
import logging
import os
import re
import runpy
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[2]
# The shared Multi30k folder ({split}.{lang}.gz) beside the repository, as the tests find it.
DEFAULT_DATA = REPOSITORY.parent / "shared" / "data" / "multi30k"
OUTCOMES = ("clear error", "handled", "unclear", "silent wrong", "data lost")
# as root, a probe of folders it may not write runs its script as this user (root writes anywhere)
NOBODY = 65534

os.environ.setdefault("TQDM_DISABLE", "1")
os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(REPOSITORY))


# --- Running a mistake ----------------------------------------------------------------------------


@dataclass
class Run:
    """What one run of a script or an API call gave."""

    code: int  # the exit code (API calls: 0 returned, 1 raised)
    stderr: str
    stdout: str = ""
    error: BaseException | None = None
    traceback: str | None = None
    value: object = None
    seconds: float = 0.0

    @property
    def failed(self) -> bool:
        return self.code != 0

    @property
    def message(self) -> str:
        """The error line: the exception's first line, or the last line of stderr that is not a
        log line."""
        if self.error is not None and self.traceback is None:
            text = str(self.error).strip().splitlines()
            return f"{type(self.error).__name__}: {text[0] if text else ''}"
        lines = [line.strip() for line in self.stderr.strip().splitlines() if line.strip()]
        for line in reversed(lines):
            if line.startswith("error:") or ": error:" in line:
                return line
        return lines[-1] if lines else ""

    @property
    def has_traceback(self) -> bool:
        return self.traceback is not None or "Traceback (most recent call last)" in self.stderr


class CurrentStderr(logging.StreamHandler):
    """A log handler that writes to whatever sys.stderr is now, so that each probe captures its own
    warnings."""

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value):
        pass


def release_claims():
    """What the end of a script's process does: its claims on output folders go."""
    from nmt_toolkit import files

    for folder in list(files._claims):
        files.release_output_dir(folder)


def script(name: str, *argv, cwd: Path | None = None) -> Run:
    """Run scripts/NAME.py with `argv` in this process, as `python scripts/NAME.py ARGV` would."""
    path = REPOSITORY / "scripts" / f"{name}.py"
    stdout, stderr = io.StringIO(), io.StringIO()
    saved_argv, saved_cwd = sys.argv, os.getcwd()
    sys.argv = [str(path), *map(str, argv)]
    code, error, trace, start = 0, None, None, time.perf_counter()
    try:
        if cwd is not None:
            os.chdir(cwd)
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            try:
                runpy.run_path(str(path), run_name="__main__")
            except SystemExit as exit_info:
                code = _exit_code(exit_info.code, stderr)
            # what escapes the script's error handling: a traceback
            except Exception as raised:  # noqa: BLE001
                code, error, trace = 1, raised, traceback.format_exc()
                stderr.write(trace)
    finally:
        sys.argv = saved_argv
        os.chdir(saved_cwd)
        release_claims()
    return Run(
        code,
        stderr.getvalue(),
        stdout.getvalue(),
        error,
        trace,
        seconds=time.perf_counter() - start,
    )


def _exit_code(code, stderr) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    stderr.write(f"{code}\n")  # sys.exit("message") prints it
    return 1


def api(function, *args, **kwargs) -> Run:
    """Call `function`; an exception it raises is the run's error (its message is judged as is)."""
    stderr, start = io.StringIO(), time.perf_counter()
    with contextlib.redirect_stderr(stderr):
        try:
            value = function(*args, **kwargs)
        except Exception as raised:  # noqa: BLE001
            run = Run(1, stderr.getvalue(), error=raised)
            # an IndexError etc.: a traceback to a user
            if not isinstance(raised, (ValueError, OSError, TypeError)):
                run.traceback = traceback.format_exc()
            run.seconds = time.perf_counter() - start
            return run
        finally:
            release_claims()
    return Run(0, stderr.getvalue(), value=value, seconds=time.perf_counter() - start)


def environment(**extra) -> dict:
    return {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": str(REPOSITORY),
        "TQDM_DISABLE": "1",
        "HF_DATASETS_DISABLE_PROGRESS_BARS": "1",
        **extra,
    }


def spawn(name: str, *argv, user: int | None = None, home: Path | None = None) -> subprocess.Popen:
    """Start scripts/NAME.py in a process of its own (as another `user`, e.g. NOBODY, if given)."""
    command = [sys.executable, str(REPOSITORY / "scripts" / f"{name}.py"), *map(str, argv)]
    extra = {} if home is None else {"HOME": str(home), "HF_HOME": str(home / "hf")}
    if user is not None and os.geteuid() == 0:
        command = ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups", *command]
    return subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=environment(**extra),
        cwd=REPOSITORY,
    )


def other_user_home(ctx, name: str) -> Path:
    """A writable home for a probe's process that must not write elsewhere: NOBODY's when running
    as root."""
    home = ctx.folder(name)
    if os.geteuid() == 0:
        os.chown(home, NOBODY, NOBODY)
    return home


def read_only(*paths: Path) -> Path:
    """Make `paths` (folders and files) readable and not writable, for every user but root."""
    for path in paths:
        path.chmod(0o555 if path.is_dir() else 0o444)
    return paths[0]


def finish(process: subprocess.Popen, timeout: float = 300) -> Run:
    start = time.perf_counter()
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        stdout, stderr = process.communicate()
        return Run(
            -9,
            stderr + f"\n(killed after {timeout:.0f} s)",
            stdout,
            seconds=time.perf_counter() - start,
        )
    return Run(process.returncode, stderr, stdout, seconds=time.perf_counter() - start)


# --- Guards: files that must survive --------------------------------------------------------------


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def snapshot(*paths) -> dict[str, str]:
    """{file: digest} of every file under `paths`."""
    found = {}
    for path in map(Path, paths):
        files = (
            [path]
            if path.is_file()
            else sorted(p for p in path.rglob("*") if p.is_file())
            if path.is_dir()
            else []
        )
        found.update({str(file): sha256(file) for file in files})
    return found


def changed(before: dict[str, str]) -> list[str]:
    """The files of a `snapshot` that are gone or different now."""
    return [
        name
        for name, digest in before.items()
        if not Path(name).is_file() or sha256(Path(name)) != digest
    ]


# --- Probes ---------------------------------------------------------------------------------------


@dataclass
class Observed:
    """What a probe saw: the run, and its own verdict on the result."""

    run: Run
    wrong: str | None = None  # how the result is wrong (counts when the run succeeded)
    lost: list[str] = field(default_factory=list)  # guarded files gone or changed
    note: str = ""  # the judgement behind the expectation, where it is not obvious


@dataclass
class Probe:
    name: str
    group: str
    what: str
    function: object
    error: str | None  # the regular expression a clear refusal matches
    refuse: bool  # success is wrong (the mistake must be refused)


PROBES: list[Probe] = []


def probe(group: str, what: str, error: str | None = None, refuse: bool | None = None):
    """Register a probe. `error`: what a clear refusal says (a regular expression over the error
    line). With `refuse` (the default when `error` is given) a run that succeeds is a silent wrong
    result, unless the probe's own check says otherwise."""

    def register(function):
        PROBES.append(
            Probe(
                function.__name__,
                group,
                what,
                function,
                error,
                error is not None if refuse is None else refuse,
            )
        )
        return function

    return register


WORK_PATH = re.compile(
    r"/\S*?/probes-[^/\s]+(/(probes|pairs|copies|models|evaluations)/[^/\s':,)]+)?"
)


def without_work_paths(text: str) -> str:
    """`text` with the work folder (and a probe's own folder, whose name could match a pattern)
    as $WORK."""
    return WORK_PATH.sub("$WORK", text)


def classify(item: Probe, observed: Observed) -> str:
    if observed.lost:
        return "data lost"
    run = observed.run
    if run.failed:
        if run.has_traceback:
            return "unclear"
        if item.error and re.search(item.error, without_work_paths(run.message)):
            return "clear error"
        return "unclear"
    if observed.wrong:
        return "silent wrong"
    return "handled"


def accepted(run: Run, why: str) -> Observed:
    """A run of a mistake that must be refused: succeeding is the silent wrong result `why`."""
    return Observed(run, wrong=None if run.failed else why)


# --- Fixtures: a tiny corpus, tokenizers, trained runs, saved models ------------------------------


class Context:
    """The shared material, built once; each probe works in a folder of its own (`folder`)."""

    def __init__(self, work: Path, data: Path):
        self.work, self.source_data = work, data
        self._cache = {}

    def folder(self, name: str) -> Path:
        path = self.work / "probes" / name
        path.mkdir(parents=True)
        return path

    def cached(self, key, build):
        if key not in self._cache:
            self._cache[key] = build()
        return self._cache[key]

    def lines(self, split: str, language: str, count: int) -> list[str]:
        with gzip.open(self.source_data / f"{split}.{language}.gz", "rt", encoding="utf-8") as file:
            return [next(file).rstrip("\n") for _ in range(count)]

    @property
    def data(self) -> Path:
        """A small Multi30k: train 300, val 30, test_2016_flickr 20 lines of en, de, fr, cs
        (gzip)."""

        def build():
            folder = self.work / "m30k"
            folder.mkdir()
            for split, count in (("train", 300), ("val", 30), ("test_2016_flickr", 20)):
                for language in ("en", "de", "fr", "cs"):
                    write_gz(folder / f"{split}.{language}.gz", self.lines(split, language, count))
            return folder

        return self.cached("data", build)

    def pair_folder(self, name: str, split: str = "test", count: int = 8, **changes) -> Path:
        """A folder with SPLIT.en and SPLIT.de (plain text) from Multi30k's test set; `changes`
        replace lines."""
        folder = self.work / "pairs" / name
        folder.mkdir(parents=True)
        for language in ("en", "de"):
            text = "".join(line + "\n" for line in self.lines("test_2016_flickr", language, count))
            (folder / f"{split}.{language}").write_text(
                changes.get(language, text), encoding="utf-8"
            )
        return folder

    @property
    def tokenizer(self) -> Path:
        def build():
            run = script(
                "train_tokenizer",
                "--dataset",
                self.data,
                "--source_lang",
                "en",
                "--target_lang",
                "de",
                "--merges",
                300,
                "--output_dir",
                self.work / "tok",
            )
            assert run.code == 0, run.stderr
            return self.work / "tok"

        return self.cached("tokenizer", build)

    @property
    def tiny_config(self) -> Path:
        def build():
            path = self.work / "tiny.json"
            path.write_text(json.dumps(TINY))
            return path

        return self.cached("tiny_config", build)

    def train_arguments(self, output_dir: Path, *extra, config: Path | None = None) -> list:
        return [
            "--model_name_or_path",
            config or self.tiny_config,
            "--tokenizer_name_or_path",
            self.tokenizer,
            "--dataset",
            self.data,
            "--source_lang",
            "en",
            "--target_lang",
            "de",
            "--max_train_pairs",
            200,
            "--max_tokens",
            600,
            "--max_steps",
            4,
            "--save_steps",
            2,
            "--warmup_steps",
            0,
            "--learning_rate",
            1e-3,
            "--logging_steps",
            2,
            "--disable_tqdm",
            "true",
            "--output_dir",
            output_dir,
            *extra,
        ]

    def trained(self, name: str, *extra) -> Path:
        def build():
            run = script(
                "train_translation",
                *self.train_arguments(
                    self.work / name,
                    "--validation_split",
                    "val",
                    "--max_validation_pairs",
                    10,
                    "--eval_strategy",
                    "steps",
                    "--eval_steps",
                    2,
                    *extra,
                ),
            )
            assert run.code == 0, run.stderr[-3000:]
            return self.work / name

        return self.cached(("run", name), build)

    @property
    def run(self) -> Path:
        """A finished run: checkpoint-2, checkpoint-4 and the final model (en-de)."""
        return self.trained("run")

    @property
    def other_run(self) -> Path:
        """The same command with another seed."""
        return self.trained("run-seed2", "--seed", 2)

    def copy(self, source: Path, name: str) -> Path:
        destination = self.work / "copies" / name
        shutil.copytree(source, destination, symlinks=True)
        return destination

    def saved_model(
        self,
        name: str,
        config_class: str = "DwLstmConfig",
        tags: tuple = (),
        pairs: tuple = ("en-de",),
    ) -> Path:
        """A tiny untrained model saved like a trained one (checksums, fingerprint), with its
        tokenizer."""

        def build():
            import torch
            from transformers import AutoModelForSeq2SeqLM

            import modeling_dwlstm
            from modeling_dwlstm.tokenization_dwlstm import (
                tokenizer_model_kwargs,
                train_joint_bpe_tokenizer,
            )
            from nmt_toolkit.checkpoints import record_saved_folder

            languages = sorted({code for pair in pairs for code in pair.split("-")})
            texts = [text for language in languages for text in self.lines("train", language, 200)]
            tokenizer = train_joint_bpe_tokenizer(texts, vocab_size=400, language_tags=list(tags))
            torch.manual_seed(0)
            config = getattr(modeling_dwlstm, config_class)(
                **tokenizer_model_kwargs(tokenizer),
                **{key: value for key, value in TINY.items() if key != "model_type"},
                language_pairs=list(pairs),
            )
            folder = self.work / "models" / name
            AutoModelForSeq2SeqLM.from_config(config).save_pretrained(folder)
            tokenizer.save_pretrained(folder)
            record_saved_folder(folder)
            return folder

        return self.cached(("model", name), build)

    @property
    def multilingual(self) -> Path:
        return self.saved_model(
            "multilingual",
            tags=("<2de>", "<2en>", "<2fr>"),
            pairs=("en-de", "de-en", "en-fr", "fr-en"),
        )

    @property
    def residual(self) -> Path:
        return self.saved_model("residual", "ResidualTransformerConfig")

    def evaluated(self, model: Path, name: str, *extra) -> Path:
        """An evaluation of `model` on 8 test pairs (beam 1, 3 new tokens): its output folder."""

        def build():
            output = self.work / "evaluations" / name
            run = script(
                "evaluate_translation",
                "--model",
                model,
                *evaluation_data(self),
                "--output_dir",
                output,
                *extra,
            )
            assert run.code == 0, run.stderr[-3000:]
            return output

        return self.cached(("evaluation", name), build)


TINY = {
    "model_type": "dwlstm",
    "d_model": 16,
    "ffn_dim": 16,
    "encoder_layers": 1,
    "decoder_layers": 1,
    "encoder_attention_heads": 2,
    "decoder_attention_heads": 2,
    "max_position_embeddings": 128,
}


def write_gz(path: Path, lines: list[str]):
    with gzip.open(path, "wt", encoding="utf-8") as file:
        file.write("".join(line + "\n" for line in lines))


def evaluation_data(ctx: Context, source: str = "en", target: str = "de", pairs: int = 8) -> list:
    return [
        "--data",
        ctx.data,
        "--split",
        "test_2016_flickr",
        "--source_lang",
        source,
        "--target_lang",
        target,
        "--max_pairs",
        pairs,
        "--num_beams",
        1,
        "--max_new_tokens",
        3,
    ]


def quick_decoding() -> list:
    return ["--num_beams", 1, "--max_new_tokens", 3]


def results(folder: Path) -> dict:
    return json.loads((folder / "results.json").read_text())


# --- The report -----------------------------------------------------------------------------------


def run_probes(ctx: Context, only: list[str] | None) -> list[dict]:
    records = []
    for item in PROBES:
        if only and not any(name in item.name or name == item.group for name in only):
            continue
        start = time.perf_counter()
        try:
            observed = item.function(ctx)
        except Exception:  # noqa: BLE001  (a bug of the probe itself: reported, not hidden)
            observed = Observed(Run(1, traceback.format_exc()), note="PROBE FAILED")
        outcome = classify(item, observed)
        lost = [os.path.relpath(path, ctx.work) for path in observed.lost]
        message = (
            f"deleted or changed: {', '.join(lost[:4])}{', ...' if len(lost) > 4 else ''}"
            if lost
            else observed.run.message
            if observed.run.failed
            else observed.wrong or _last_warning(observed.run)
        )
        record = {
            "probe": item.name,
            "group": item.group,
            "what": item.what,
            "outcome": outcome,
            "message": _shorten(without_work_paths(message)),
            "exit_code": observed.run.code,
            "lost": lost,
            "note": observed.note,
            "seconds": round(time.perf_counter() - start, 1),
        }
        if observed.note == "PROBE FAILED":
            record["probe_error"] = observed.run.stderr[-2000:]
        records.append(record)
        print(f"{outcome:>13}  {item.name}: {record['message'][:150]}", flush=True)
    return records


def _last_warning(run: Run) -> str:
    warnings = [
        line for line in run.stderr.splitlines() if "WARNING" in line or "warn" in line.lower()
    ]
    return warnings[-1] if warnings else ""


def _shorten(text: str, limit: int = 400) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def write_report(
    records: list[dict], output_dir: Path, command: str, seconds: float, before: Path | None = None
):
    counts = Counter(record["outcome"] for record in records)
    earlier = (
        {record["probe"]: record["outcome"] for record in json.loads(before.read_text())["probes"]}
        if before
        else {}
    )
    output_dir.mkdir(parents=True, exist_ok=True)
    (output_dir / "results.json").write_text(
        json.dumps(
            {
                "command": command,
                "seconds": round(seconds),
                "counts": {name: counts.get(name, 0) for name in OUTCOMES},
                "probes": records,
            },
            indent=2,
            ensure_ascii=False,
        )
        + "\n"
    )
    lines = [
        "# Probes: a fresh set of user mistakes",
        "",
        "```",
        command,
        "```",
        "",
        f"{len(records)} probes in {seconds / 60:.1f} minutes: "
        + ", ".join(f"{counts.get(name, 0)} {name}" for name in OUTCOMES)
        + ".",
        "",
        "Each probe makes one mistake with tiny models and a few hundred lines of Multi30k (see "
        "the docstring of `probes.py` for the classes). The message is the error line, the "
        "silent wrong result, the files lost, or the last warning; the note is the judgement "
        "where the expectation is not obvious.",
        "",
    ]
    if earlier:
        before_counts = Counter(earlier.values())
        changed = sum(
            1 for record in records if earlier.get(record["probe"]) not in (None, record["outcome"])
        )
        lines += [
            f"Before the fixes ({before.name}, the same probes): "
            + ", ".join(f"{before_counts.get(name, 0)} {name}" for name in OUTCOMES)
            + f"; {changed} outcomes changed since "
            "(the column *before*).",
            "",
        ]
    lines += [
        "| probe | group | what was done | outcome | before | message | note |",
        "|---|---|---|---|---|---|---|",
    ]
    for record in records:
        cells = [
            record["probe"],
            record["group"],
            record["what"],
            f"**{record['outcome']}**",
            earlier.get(record["probe"], ""),
            record["message"],
            record["note"],
        ]
        lines.append(
            "| "
            + " | ".join(cell.replace("|", "\\|").replace("\n", " ") for cell in map(str, cells))
            + " |"
        )
    (output_dir / "results.md").write_text("\n".join(lines) + "\n")


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--data", type=Path, default=DEFAULT_DATA, help="The Multi30k folder ({split}.{lang}.gz)."
    )
    parser.add_argument(
        "--only", nargs="+", help="Run the probes whose names contain one of these (or a group)."
    )
    parser.add_argument("--output_dir", type=Path, default=Path(__file__).resolve().parent)
    parser.add_argument("--keep", action="store_true", help="Keep the work folder (printed).")
    parser.add_argument(
        "--compare",
        type=Path,
        default=None,
        help="An earlier results.json: its outcomes go beside the new ones in results.md.",
    )
    args = parser.parse_args()
    import torch
    import transformers

    torch.set_num_threads(1)
    logging.basicConfig(
        level=logging.INFO, handlers=[CurrentStderr()], format="%(levelname)s %(name)s: %(message)s"
    )
    transformers.utils.logging.disable_default_handler()
    transformers.utils.logging.enable_propagation()
    work = Path(tempfile.mkdtemp(prefix="probes-"))
    os.chmod(work, 0o755)  # a probe running as another user reads the fixtures
    command = "OMP_NUM_THREADS=1 PYTHONPATH=. python experiments/probes/probes.py" + (
        f" --only {' '.join(args.only)}" if args.only else ""
    )
    start = time.perf_counter()
    try:
        records = run_probes(Context(work, args.data), args.only)
    finally:
        if args.keep:
            print(f"work folder: {work}")
        else:
            # the read-only folders of the probes, deletable again
            for folder, _, _ in os.walk(work):
                os.chmod(folder, 0o755)
            shutil.rmtree(work, ignore_errors=True)
    seconds = time.perf_counter() - start
    if not args.only:
        write_report(
            records,
            args.output_dir,
            command + (f" --compare {args.compare}" if args.compare else ""),
            seconds,
            args.compare,
        )
    counts = Counter(record["outcome"] for record in records)
    print(
        f"\n{len(records)} probes in {seconds:.0f} s: "
        + ", ".join(f"{counts.get(n, 0)} {n}" for n in OUTCOMES)
    )


# ==================================================================================================
# The probes, script by script, then the Python API. Each says what the user did; `error` is what a
# clear refusal says; a probe that expects the mistake to be handled checks the result itself.
# ==================================================================================================


def tokenizer_arguments(ctx: Context, output: Path, *extra, dataset=None) -> list:
    return [
        "--dataset",
        dataset or ctx.data,
        "--source_lang",
        "en",
        "--target_lang",
        "de",
        "--merges",
        100,
        "--output_dir",
        output,
        *extra,
    ]


# --- train_tokenizer.py ---------------------------------------------------------------------------


@probe("train_tokenizer", "--merges -5", r"merges.* must be a positive integer")
def tokenizer_negative_merges(ctx):
    folder = ctx.folder("tokenizer_negative_merges")
    return accepted(
        script("train_tokenizer", *tokenizer_arguments(ctx, folder / "tok", "--merges", -5)),
        "a tokenizer with -5 merges",
    )


@probe(
    "train_tokenizer",
    "--language_pairs en-de,de-en --sampling_temperature 0",
    r"sampling_temperature.* must be a positive number",
)
def tokenizer_zero_temperature(ctx):
    folder = ctx.folder("tokenizer_zero_temperature")
    return accepted(
        script(
            "train_tokenizer",
            "--dataset",
            ctx.data,
            "--language_pairs",
            "en-de,de-en",
            "--sampling_temperature",
            0,
            "--merges",
            100,
            "--output_dir",
            folder / "tok",
        ),
        "temperature 0 accepted",
    )


@probe(
    "train_tokenizer",
    "--language_pairs en-de,de-en --sampling_temperature nan",
    r"sampling_temperature.* must be a (positive|finite) number",
)
def tokenizer_nan_temperature(ctx):
    folder = ctx.folder("tokenizer_nan_temperature")
    return accepted(
        script(
            "train_tokenizer",
            "--dataset",
            ctx.data,
            "--language_pairs",
            "en-de,de-en",
            "--sampling_temperature",
            "nan",
            "--merges",
            100,
            "--output_dir",
            folder / "tok",
        ),
        "temperature nan accepted",
    )


@probe(
    "train_tokenizer",
    "--language_tags de fr (bare codes, not <2de> <2fr>)",
    r"Language tags look like '<2de>'",
)
def tokenizer_bare_language_tags(ctx):
    folder = ctx.folder("tokenizer_bare_language_tags")
    return accepted(
        script(
            "train_tokenizer",
            *tokenizer_arguments(ctx, folder / "tok", "--language_tags", "de", "fr"),
        ),
        "'de' and 'fr' became unsplittable special tokens",
    )


@probe("train_tokenizer", "--language_pairs en-de,en-de (a direction twice)", r"more than once")
def tokenizer_duplicate_pairs(ctx):
    folder = ctx.folder("tokenizer_duplicate_pairs")
    return accepted(
        script(
            "train_tokenizer",
            "--dataset",
            ctx.data,
            "--language_pairs",
            "en-de,en-de",
            "--merges",
            100,
            "--output_dir",
            folder / "tok",
        ),
        "en-de counted twice",
    )


@probe("train_tokenizer", "--language_pairs en_de (underscore)", r"looks like 'en-de'")
def tokenizer_underscore_pair(ctx):
    folder = ctx.folder("tokenizer_underscore_pair")
    return accepted(
        script(
            "train_tokenizer",
            "--dataset",
            ctx.data,
            "--language_pairs",
            "en_de",
            "--merges",
            100,
            "--output_dir",
            folder / "tok",
        ),
        "en_de accepted",
    )


@probe(
    "train_tokenizer",
    "--source_lang EN --target_lang DE (upper case)",
    r"must be a language code such as 'en'",
)
def tokenizer_uppercase_codes(ctx):
    folder = ctx.folder("tokenizer_uppercase_codes")
    return accepted(
        script(
            "train_tokenizer",
            "--dataset",
            ctx.data,
            "--source_lang",
            "EN",
            "--target_lang",
            "DE",
            "--output_dir",
            folder / "tok",
        ),
        "EN accepted",
    )


@probe(
    "train_tokenizer",
    "--dataset train.en (one language's text file instead of the folder)",
    r"train\.en.*(folder|JSON-lines file)",
)
def tokenizer_text_file_as_dataset(ctx):
    folder = ctx.folder("tokenizer_text_file_as_dataset")
    text = folder / "train.en"
    text.write_text("".join(line + "\n" for line in ctx.lines("train", "en", 20)))
    return accepted(
        script("train_tokenizer", *tokenizer_arguments(ctx, folder / "tok", dataset=text)),
        "a tokenizer from a text file",
    )


@probe(
    "train_tokenizer",
    "--source_lang en --target_lang es on a folder without Spanish",
    r"Unknown language 'es'.*has the languages",
)
def tokenizer_missing_language(ctx):
    folder = ctx.folder("tokenizer_missing_language")
    return accepted(
        script(
            "train_tokenizer",
            "--dataset",
            ctx.data,
            "--source_lang",
            "en",
            "--target_lang",
            "es",
            "--output_dir",
            folder / "tok",
        ),
        "trained without Spanish",
    )


@probe(
    "train_tokenizer",
    "train.de.gz that is plain text (renamed, not compressed)",
    r"train\.de\.gz.*gzip",
)
def tokenizer_fake_gzip(ctx):
    folder = ctx.folder("tokenizer_fake_gzip")
    data = folder / "data"
    data.mkdir()
    write_gz(data / "train.en.gz", ctx.lines("train", "en", 50))
    (data / "train.de.gz").write_text("".join(line + "\n" for line in ctx.lines("train", "de", 50)))
    return accepted(
        script("train_tokenizer", *tokenizer_arguments(ctx, folder / "tok", dataset=data)),
        "read a file that is not gzip",
    )


@probe("train_tokenizer", "empty train.en and train.de", r"hold no sentence pairs")
def tokenizer_empty_corpus(ctx):
    folder = ctx.folder("tokenizer_empty_corpus")
    (folder / "data").mkdir()
    (folder / "data" / "train.en").write_text("")
    (folder / "data" / "train.de").write_text("")
    return accepted(
        script(
            "train_tokenizer", *tokenizer_arguments(ctx, folder / "tok", dataset=folder / "data")
        ),
        "a tokenizer from nothing",
    )


@probe("train_tokenizer", "--split trian (typo)", r"No split 'trian'.*the folder has the splits")
def tokenizer_split_typo(ctx):
    folder = ctx.folder("tokenizer_split_typo")
    return accepted(
        script("train_tokenizer", *tokenizer_arguments(ctx, folder / "tok", "--split", "trian")),
        "split typo accepted",
    )


@probe("train_tokenizer", "--output_dir an existing file", r"is a file; choose another folder")
def tokenizer_output_is_file(ctx):
    folder = ctx.folder("tokenizer_output_is_file")
    (folder / "notes.txt").write_text("my notes")
    guard = snapshot(folder / "notes.txt")
    run = script("train_tokenizer", *tokenizer_arguments(ctx, folder / "notes.txt"))
    return Observed(run, wrong=None if run.failed else "wrote over a file", lost=changed(guard))


@probe("train_tokenizer", "--output_dir a dangling symbolic link", r"symbolic link")
def tokenizer_dangling_symlink_output(ctx):
    folder = ctx.folder("tokenizer_dangling_symlink_output")
    (folder / "tok").symlink_to(folder / "gone")
    run = script("train_tokenizer", *tokenizer_arguments(ctx, folder / "tok"))
    saved = (folder / "tok" / "tokenizer.json").is_file()
    return Observed(
        run,
        wrong=None if run.failed or saved else "exit 0 but no tokenizer at --output_dir",
        note="saving through the link into the folder it names is handled too",
    )


@probe(
    "train_tokenizer",
    "--output_dir in a folder this user cannot write (another user's)",
    r"Cannot write to output folder .*Permission denied",
)
def tokenizer_unwritable_output(ctx):
    folder = read_only(ctx.folder("tokenizer_unwritable_output"))
    home = other_user_home(ctx, "tokenizer_unwritable_output_home")
    run = finish(
        spawn("train_tokenizer", *tokenizer_arguments(ctx, folder / "tok"), user=NOBODY, home=home)
    )
    return accepted(run, "wrote where it may not")


@probe(
    "train_tokenizer",
    "--min_frequency 100000 --merges 300 (no pair is that frequent)",
    refuse=False,
)
def tokenizer_min_frequency_too_high(ctx):
    folder = ctx.folder("tokenizer_min_frequency_too_high")
    run = script(
        "train_tokenizer", *tokenizer_arguments(ctx, folder / "tok", "--min_frequency", 100000)
    )
    said = re.search(
        r"merges", run.stderr.split("Saved")[0] if "Saved" in run.stderr else run.stderr
    )
    return Observed(
        run,
        wrong=None if said else "0 of 300 merges learnt (a character tokenizer), not a word said",
        note="fewer merges than asked is allowed (small corpora), but far fewer must be said",
    )


@probe(
    "train_tokenizer",
    "--more_datasets extra=en-de with --source_lang/--target_lang (bilingual)",
    r"--more_datasets.*--language_pairs",
)
def tokenizer_more_datasets_bilingual(ctx):
    folder = ctx.folder("tokenizer_more_datasets_bilingual")
    extra = ctx.pair_folder("tokenizer_more_datasets_bilingual", split="train")
    return accepted(
        script(
            "train_tokenizer",
            *tokenizer_arguments(ctx, folder / "tok", "--more_datasets", f"{extra}=en-de"),
        ),
        "--more_datasets silently left out of the tokenizer",
    )


@probe(
    "train_tokenizer",
    "--output_dir a training run's folder, with --overwrite_output_dir (wrong folder)",
    r"(?i)(training run|checkpoint).*choose another",
)
def tokenizer_overwrite_run_folder(ctx):
    run_copy = ctx.copy(ctx.run, "tokenizer_overwrite_run_folder")
    guard = snapshot(run_copy)
    run = script("train_tokenizer", *tokenizer_arguments(ctx, run_copy, "--overwrite_output_dir"))
    return Observed(
        run,
        lost=changed(guard),
        note="--overwrite_output_dir replaces an earlier tokenizer, not a "
        "run's checkpoints (as the quickstart's --overwrite)",
    )


@probe("train_tokenizer", "--output_dir inside the corpus folder (data/tok)", refuse=False)
def tokenizer_output_inside_dataset(ctx):
    data = ctx.copy(ctx.data, "tokenizer_output_inside_dataset")
    guard = snapshot(data)
    run = script("train_tokenizer", *tokenizer_arguments(ctx, data / "tok", dataset=data))
    return Observed(
        run,
        wrong=None if (data / "tok" / "tokenizer.json").is_file() else "no tokenizer",
        lost=changed(guard),
    )


@probe("train_tokenizer", "a corpus folder of symbolic links to the gzip files", refuse=False)
def tokenizer_symlinked_corpus(ctx):
    folder = ctx.folder("tokenizer_symlinked_corpus")
    (folder / "data").mkdir()
    for name in ("train.en.gz", "train.de.gz"):
        (folder / "data" / name).symlink_to(ctx.data / name)
    run = script(
        "train_tokenizer", *tokenizer_arguments(ctx, folder / "tok", dataset=folder / "data")
    )
    return Observed(run, wrong=None if "300 pairs" in run.stderr else "not all 300 pairs read")


@probe("train_tokenizer", "--max_pairs 0", r"max_pairs.* must be a positive integer")
def tokenizer_max_pairs_zero(ctx):
    folder = ctx.folder("tokenizer_max_pairs_zero")
    return accepted(
        script("train_tokenizer", *tokenizer_arguments(ctx, folder / "tok", "--max_pairs", 0)),
        "max_pairs 0 accepted",
    )


@probe(
    "train_tokenizer", "a .jsonl corpus whose line 2 has no German side", r"line 2: no 'de' side"
)
def tokenizer_jsonl_missing_side(ctx):
    folder = ctx.folder("tokenizer_jsonl_missing_side")
    (folder / "pairs.jsonl").write_text(
        '{"en": "a man", "de": "ein mann"}\n{"en": "a dog", "fr": "un chien"}\n'
    )
    return accepted(
        script(
            "train_tokenizer",
            *tokenizer_arguments(ctx, folder / "tok", dataset=folder / "pairs.jsonl"),
        ),
        "line 2 skipped",
    )


@probe("train_tokenizer", "Windows (CRLF) line ends in the corpus", refuse=False)
def tokenizer_crlf_corpus(ctx):
    folder = ctx.folder("tokenizer_crlf_corpus")
    (folder / "data").mkdir()
    for language in ("en", "de"):
        (folder / "data" / f"train.{language}").write_bytes(
            "".join(line + "\r\n" for line in ctx.lines("train", language, 100)).encode()
        )
    run = script(
        "train_tokenizer", *tokenizer_arguments(ctx, folder / "tok", dataset=folder / "data")
    )
    vocabulary = (
        json.loads((folder / "tok" / "tokenizer.json").read_text())["model"]["vocab"]
        if not run.failed
        else {}
    )
    return Observed(
        run, wrong="\\r in the vocabulary" if any("\r" in token for token in vocabulary) else None
    )


@probe("train_tokenizer", "--source_lang en --target_lang en", r"both 'en'; they must differ")
def tokenizer_same_language(ctx):
    folder = ctx.folder("tokenizer_same_language")
    return accepted(
        script(
            "train_tokenizer",
            "--dataset",
            ctx.data,
            "--source_lang",
            "en",
            "--target_lang",
            "en",
            "--output_dir",
            folder / "tok",
        ),
        "en-en accepted",
    )


# --- train_translation.py -------------------------------------------------------------------------


def config_file(folder: Path, **changes) -> Path:
    path = folder / "config.json"
    path.write_text(json.dumps({**TINY, **changes}))
    return path


def final_step(run_dir: Path) -> int | None:
    state = run_dir / "trainer_state.json"
    return json.loads(state.read_text())["global_step"] if state.is_file() else None


@probe(
    "train_translation",
    'a config file with "num_layers": 3 (not a field of the config)',
    r"num_layers.*(not a field|unknown)",
)
def train_unknown_config_key(ctx):
    folder = ctx.folder("train_unknown_config_key")
    run = script(
        "train_translation",
        *ctx.train_arguments(
            folder / "run",
            "--max_steps",
            1,
            "--save_steps",
            10,
            config=config_file(folder, num_layers=3),
        ),
    )
    return accepted(run, "num_layers ignored: trained the config's 1+1 layers")


@probe("train_translation", 'a config file with "dropout": 1.5', r"dropout.*\[0, 1\)")
def train_config_bad_value(ctx):
    folder = ctx.folder("train_config_bad_value")
    return accepted(
        script(
            "train_translation",
            *ctx.train_arguments(folder / "run", config=config_file(folder, dropout=1.5)),
        ),
        "dropout 1.5 accepted",
    )


@probe("train_translation", "a config file holding a JSON list", r"has no `model_type`")
def train_config_is_list(ctx):
    folder = ctx.folder("train_config_is_list")
    (folder / "config.json").write_text("[]")
    return accepted(
        script(
            "train_translation", *ctx.train_arguments(folder / "run", config=folder / "config.json")
        ),
        "a list taken as a config",
    )


@probe("train_translation", "--model_name_or_path the tokenizer folder", r"holds no config.json")
def train_model_is_tokenizer_folder(ctx):
    folder = ctx.folder("train_model_is_tokenizer_folder")
    return accepted(
        script("train_translation", *ctx.train_arguments(folder / "run", config=ctx.tokenizer)),
        "a tokenizer trained as a model",
    )


@probe(
    "train_translation",
    "--model_name_or_path TOKENIZER --tokenizer_name_or_path CONFIG.json (swapped)",
    r"is a file; give the folder",
)
def train_tokenizer_is_json(ctx):
    folder = ctx.folder("train_tokenizer_is_json")
    arguments = ctx.train_arguments(folder / "run", config=ctx.tokenizer)
    arguments[arguments.index("--tokenizer_name_or_path") + 1] = ctx.tiny_config
    return accepted(script("train_translation", *arguments), "trained with a config as tokenizer")


@probe(
    "train_translation",
    "--tokenizer_name_or_path a checkpoint folder (it holds the run's tokenizer)",
    refuse=False,
)
def train_checkpoint_as_tokenizer(ctx):
    folder = ctx.folder("train_checkpoint_as_tokenizer")
    arguments = ctx.train_arguments(folder / "run", "--max_steps", 1, "--save_steps", 10)
    arguments[arguments.index("--tokenizer_name_or_path") + 1] = ctx.run / "checkpoint-4"
    run = script("train_translation", *arguments)
    same = (
        not run.failed
        and json.loads((folder / "run" / "tokenizer.json").read_text())["model"]
        == json.loads((ctx.tokenizer / "tokenizer.json").read_text())["model"]
    )
    return Observed(run, wrong=None if run.failed or same else "trained with another tokenizer")


@probe("train_translation", "--source_lang de --target_lang de", r"both 'de'; they must differ")
def train_same_languages(ctx):
    folder = ctx.folder("train_same_languages")
    arguments = ctx.train_arguments(folder / "run")
    arguments[arguments.index("--source_lang") + 1] = "de"
    return accepted(script("train_translation", *arguments), "de-de accepted")


@probe(
    "train_translation",
    "--validation_split val where val has English only",
    r"Unknown language 'de' for split 'val'.*has the languages",
)
def train_validation_split_lacks_language(ctx):
    folder = ctx.folder("train_validation_split_lacks_language")
    data = ctx.copy(ctx.data, "train_validation_split_lacks_language")
    for language in ("de", "fr", "cs"):
        (data / f"val.{language}.gz").unlink()
    arguments = ctx.train_arguments(folder / "run", "--validation_split", "val")
    arguments[arguments.index("--dataset") + 1] = data
    return accepted(script("train_translation", *arguments), "trained without validation")


@probe(
    "train_translation",
    "--more_datasets extra=en-de with --source_lang/--target_lang (bilingual)",
    r"--more_datasets.*--language_pairs",
)
def train_more_datasets_bilingual(ctx):
    folder = ctx.folder("train_more_datasets_bilingual")
    extra = ctx.pair_folder("train_more_datasets_bilingual", split="train")
    return accepted(
        script(
            "train_translation",
            *ctx.train_arguments(folder / "run", "--more_datasets", f"{extra}=en-de"),
        ),
        "--more_datasets silently left out of training",
    )


@probe(
    "train_translation",
    "--num_train_epochs 1 without --max_steps (expecting one epoch)",
    r"--num_train_epochs.*--max_steps",
)
def train_epochs_ignored(ctx):
    folder = ctx.folder("train_epochs_ignored")
    arguments = ctx.train_arguments(
        folder / "run", "--num_train_epochs", 1, "--max_train_pairs", 20
    )
    index = arguments.index("--max_steps")
    del arguments[index : index + 2]
    run = finish(spawn("train_translation", *arguments), timeout=90)
    steps = final_step(folder / "run")
    wrong = None if run.failed and run.code != -9 else f"trained {steps} updates, not one epoch"
    if run.code == -9:
        run.code, wrong = (
            0,
            "still training after 90 s: --max_steps 100,000 (the default) wins over "
            "--num_train_epochs",
        )
    return Observed(run, wrong=wrong)


@probe("train_translation", "--learning_rate nan", r"--learning_rate must be a positive number")
def train_learning_rate_nan(ctx):
    folder = ctx.folder("train_learning_rate_nan")
    return accepted(
        script("train_translation", *ctx.train_arguments(folder / "run", "--learning_rate", "nan")),
        "trained with a NaN learning rate",
    )


@probe(
    "train_translation", "--learning_rate -0.001", r"--learning_rate must be (a positive|at least)"
)
def train_learning_rate_negative(ctx):
    folder = ctx.folder("train_learning_rate_negative")
    return accepted(
        script(
            "train_translation", *ctx.train_arguments(folder / "run", "--learning_rate", -0.001)
        ),
        "gradient ascent",
    )


@probe("train_translation", "--warmup_steps -5", r"warmup_steps")
def train_warmup_negative(ctx):
    folder = ctx.folder("train_warmup_negative")
    return accepted(
        script("train_translation", *ctx.train_arguments(folder / "run", "--warmup_steps", -5)),
        "negative warm-up accepted",
    )


@probe(
    "train_translation",
    "--eval_strategy steps --eval_steps 2 without any validation data",
    r"(--validation_split|eval_dataset|validation data)",
)
def train_eval_without_validation(ctx):
    folder = ctx.folder("train_eval_without_validation")
    return accepted(
        script(
            "train_translation",
            *ctx.train_arguments(folder / "run", "--eval_strategy", "steps", "--eval_steps", 2),
        ),
        "no validation run",
    )


@probe(
    "train_translation",
    "--validation_bleu without --validation_split",
    r"--validation_bleu needs validation data",
)
def train_validation_bleu_without_split(ctx):
    folder = ctx.folder("train_validation_bleu_without_split")
    return accepted(
        script(
            "train_translation", *ctx.train_arguments(folder / "run", "--validation_bleu", "true")
        ),
        "no BLEU computed",
    )


@probe("train_translation", "--max_length 2 (every pair is longer)", r"longer than `max_length`=2")
def train_max_length_tiny(ctx):
    folder = ctx.folder("train_max_length_tiny")
    return accepted(
        script("train_translation", *ctx.train_arguments(folder / "run", "--max_length", 2)),
        "trained on nothing",
    )


@probe("train_translation", "--config_overrides encoder_layers=0", r"encoder_layers.*>= 1")
def train_override_zero_layers(ctx):
    folder = ctx.folder("train_override_zero_layers")
    return accepted(
        script(
            "train_translation",
            *ctx.train_arguments(folder / "run", "--config_overrides", "encoder_layers=0"),
        ),
        "no encoder",
    )


@probe("train_translation", "--config_overrides d_model=15 (2 heads)", r"divisible")
def train_override_indivisible_heads(ctx):
    folder = ctx.folder("train_override_indivisible_heads")
    return accepted(
        script(
            "train_translation",
            *ctx.train_arguments(folder / "run", "--config_overrides", "d_model=15"),
        ),
        "d_model 15 with 2 heads",
    )


@probe(
    "train_translation",
    "--config_overrides dropout=0.2 when fine-tuning a saved model",
    r"applies to a fresh model",
)
def train_overrides_with_saved_model(ctx):
    folder = ctx.folder("train_overrides_with_saved_model")
    arguments = ctx.train_arguments(
        folder / "run", "--config_overrides", "dropout=0.2", config=ctx.run
    )
    return accepted(script("train_translation", *arguments), "override ignored")


@probe(
    "train_translation",
    "bilingual training with a multilingual tokenizer (it reserves <2de> ...)",
    r"reserves the language tag",
)
def train_bilingual_with_tagged_tokenizer(ctx):
    folder = ctx.folder("train_bilingual_with_tagged_tokenizer")
    arguments = ctx.train_arguments(folder / "run")
    arguments[arguments.index("--tokenizer_name_or_path") + 1] = ctx.multilingual
    return accepted(script("train_translation", *arguments), "the tags never seen in training")


@probe(
    "train_translation",
    "--add_language_tag with a tokenizer that has no tags",
    r"has no language tag",
)
def train_add_tag_without_tags(ctx):
    folder = ctx.folder("train_add_tag_without_tags")
    return accepted(
        script(
            "train_translation", *ctx.train_arguments(folder / "run", "--add_language_tag", "true")
        ),
        "a tag encoded as <unk>",
    )


@probe("train_translation", "--seed -1", r"[Ss]eed")
def train_seed_negative(ctx):
    folder = ctx.folder("train_seed_negative")
    return accepted(
        script("train_translation", *ctx.train_arguments(folder / "run", "--seed", -1)), "seed -1"
    )


@probe("train_translation", "--logging_steps 0", r"logging_steps")
def train_logging_steps_zero(ctx):
    folder = ctx.folder("train_logging_steps_zero")
    return accepted(
        script("train_translation", *ctx.train_arguments(folder / "run", "--logging_steps", 0)),
        "logging_steps 0 accepted",
    )


@probe("train_translation", "--max_steps 1.5", r"--max_steps.*: invalid int value")
def train_max_steps_float(ctx):
    folder = ctx.folder("train_max_steps_float")
    return accepted(
        script("train_translation", *ctx.train_arguments(folder / "run", "--max_steps", 1.5)),
        "1.5 steps",
    )


@probe(
    "train_translation",
    "resume a run at checkpoint-4 with --max_steps 2 (fewer than done)",
    r"checkpoint-4.*--max_steps 2",
)
def train_resume_below_checkpoint(ctx):
    run_copy = ctx.copy(ctx.run, "train_resume_below_checkpoint")
    arguments = ctx.train_arguments(run_copy, "--resume_from_checkpoint", "last")
    arguments[arguments.index("--max_steps") + 1] = 2
    run = script("train_translation", *arguments)
    return accepted(
        run, f"exit 0; the 'final' model is the step-{final_step(run_copy)} model, not a 2-step one"
    )


@probe(
    "train_translation",
    "--resume_from_checkpoint another run's checkpoint-2, into a new folder",
    refuse=False,
)
def train_resume_into_new_folder(ctx):
    folder = ctx.folder("train_resume_into_new_folder")
    run_copy = ctx.copy(ctx.run, "train_resume_into_new_folder")
    run = script(
        "train_translation",
        *ctx.train_arguments(folder / "run", "--resume_from_checkpoint", run_copy / "checkpoint-2"),
    )
    steps = final_step(folder / "run")
    return Observed(
        run,
        wrong=None if steps == 4 else f"ended at step {steps}, not 4",
        note="continuing a run in another folder is allowed; the settings are compared",
    )


@probe("train_translation", "a 3,000-character line in the training corpus", refuse=False)
def train_very_long_line(ctx):
    folder = ctx.folder("train_very_long_line")
    data = ctx.copy(ctx.data, "train_very_long_line")
    for language in ("en", "de"):
        lines = ctx.lines("train", language, 300)
        lines[5] = " ".join([lines[5]] * 60)[:3000]
        write_gz(data / f"train.{language}.gz", lines)
    arguments = ctx.train_arguments(
        folder / "run", "--max_length", 128, "--max_steps", 1, "--save_steps", 10
    )
    arguments[arguments.index("--dataset") + 1] = data
    run = script("train_translation", *arguments)
    return Observed(
        run,
        wrong=None
        if re.search(r"Dropped 1 of 200 pairs longer", run.stderr)
        else "the long pair was neither used nor said to be dropped",
    )


@probe(
    "train_translation",
    'a .jsonl corpus with "de": null on one line',
    r"line 2: the 'de' side is empty",
)
def train_jsonl_null_side(ctx):
    folder = ctx.folder("train_jsonl_null_side")
    (folder / "pairs.jsonl").write_text(
        '{"en": "a man", "de": "ein mann"}\n{"en": "a dog", "de": null}\n'
    )
    arguments = ctx.train_arguments(folder / "run")
    arguments[arguments.index("--dataset") + 1] = folder / "pairs.jsonl"
    return accepted(script("train_translation", *arguments), "a null sentence trained on")


@probe(
    "train_translation",
    "--dataset multi30k (a bare name: no such folder here, and no network)",
    r"multi30k.*(no such|cannot be reached|neither)",
)
def train_dataset_bare_name(ctx):
    folder = ctx.folder("train_dataset_bare_name")
    arguments = ctx.train_arguments(folder / "run")
    arguments[arguments.index("--dataset") + 1] = "multi30k"
    return accepted(script("train_translation", *arguments), "trained on something")


@probe("train_translation", "--output_dir a corpus file (data/train.en.gz)", r"is a file")
def train_output_is_data_file(ctx):
    data = ctx.copy(ctx.data, "train_output_is_data_file")
    guard = snapshot(data)
    run = script("train_translation", *ctx.train_arguments(data / "train.en.gz"))
    return Observed(run, wrong=None if run.failed else "accepted", lost=changed(guard))


@probe(
    "train_translation", "--validation_dataset an en-fr .jsonl for an en-de run", r"no 'de' side"
)
def train_validation_dataset_other_languages(ctx):
    folder = ctx.folder("train_validation_dataset_other_languages")
    (folder / "val.jsonl").write_text('{"en": "a man", "fr": "un homme"}\n')
    return accepted(
        script(
            "train_translation",
            *ctx.train_arguments(folder / "run", "--validation_dataset", folder / "val.jsonl"),
        ),
        "validated on nothing",
    )


@probe(
    "train_translation", "--language_pairs en-de,de-en with a tokenizer without tags", r"<2(de|en)>"
)
def train_language_pairs_untagged_tokenizer(ctx):
    folder = ctx.folder("train_language_pairs_untagged_tokenizer")
    arguments = ctx.train_arguments(folder / "run")
    for flag in ("--source_lang", "--target_lang"):
        index = arguments.index(flag)
        del arguments[index : index + 2]
    return accepted(
        script("train_translation", *arguments, "--language_pairs", "en-de,de-en"),
        "tags encoded as <unk>",
    )


@probe(
    "train_translation",
    "--language_pairs with --validation_dataset",
    r"--validation_dataset is for one direction",
)
def train_multilingual_validation_dataset(ctx):
    folder = ctx.folder("train_multilingual_validation_dataset")
    arguments = ctx.train_arguments(folder / "run", "--validation_dataset", ctx.data)
    arguments[arguments.index("--tokenizer_name_or_path") + 1] = ctx.multilingual
    for flag in ("--source_lang", "--target_lang"):
        index = arguments.index(flag)
        del arguments[index : index + 2]
    return accepted(
        script("train_translation", *arguments, "--language_pairs", "en-de,de-en"), "ignored"
    )


@probe(
    "train_translation",
    "two runs into the same new --output_dir at once",
    r"is in use by another run",
)
def train_concurrent_runs(ctx):
    folder = ctx.folder("train_concurrent_runs")
    arguments = ctx.train_arguments(folder / "run", "--max_steps", 6)
    first, second = (
        spawn("train_translation", *arguments),
        spawn("train_translation", *arguments, "--seed", 2),
    )
    runs = [finish(first), finish(second)]
    refused = [run for run in runs if run.failed]
    if len(refused) == 1 and not runs[runs.index(refused[0]) - 1].failed:
        return Observed(refused[0], note="the other run finished its 6 steps")
    return Observed(
        runs[1], wrong=None if refused else "both runs wrote the same folder and exited 0"
    )


def interrupted_run(ctx) -> Path:
    """A run killed with Ctrl-C (SIGINT) after its first checkpoint."""

    def build():
        folder = ctx.work / "interrupted"
        process = spawn("train_translation", *ctx.train_arguments(folder, "--max_steps", 400))
        deadline = time.monotonic() + 240
        while (
            not (folder / "checkpoint-2" / "checksums.json").is_file()
            and time.monotonic() < deadline
        ):
            time.sleep(0.2)
        process.send_signal(signal.SIGINT)
        finish(process)
        return folder

    return ctx.cached("interrupted", build)


@probe(
    "train_translation",
    "Ctrl-C during training, then the same command again (without resuming)",
    r"already holds checkpoints .*--resume_from_checkpoint last",
)
def train_interrupted_then_rerun(ctx):
    folder = interrupted_run(ctx)
    guard = snapshot(folder / "checkpoint-2")
    run = script("train_translation", *ctx.train_arguments(folder, "--max_steps", 400))
    return Observed(run, wrong=None if run.failed else "started over", lost=changed(guard))


@probe(
    "train_translation",
    "Ctrl-C during training, then --resume_from_checkpoint last (2 more steps)",
    refuse=False,
)
def train_interrupted_then_resumed(ctx):
    folder = interrupted_run(ctx)
    target = 2 + max(
        int(path.parent.name.split("-")[1]) for path in folder.glob("checkpoint-*/checksums.json")
    )
    run = script(
        "train_translation",
        *ctx.train_arguments(folder, "--max_steps", target, "--resume_from_checkpoint", "last"),
    )
    steps = final_step(folder)
    return Observed(
        run,
        wrong=None
        if steps == target and (folder / "model.safetensors").is_file()
        else f"final step {steps}, not {target}",
    )


# --- evaluate_translation.py ----------------------------------------------------------------------


def evaluate(model: Path, output: Path, *extra) -> Run:
    return script("evaluate_translation", "--model", model, "--output_dir", output, *extra)


def files_evaluation(folder: Path, source: str = "test.en", reference: str = "test.de") -> list:
    return [
        "--source_file",
        folder / source,
        "--reference_file",
        folder / reference,
        "--source_lang",
        "en",
        "--target_lang",
        "de",
        *quick_decoding(),
    ]


def scored(output: Path, sentences: int) -> str | None:
    """None if results.json scores `sentences` sentences; what is wrong otherwise."""
    if not (output / "results.json").is_file():
        return "no results.json"
    found = results(output).get("sentences")
    return None if found == sentences else f"scored {found} sentences, not {sentences}"


@probe("evaluate_translation", "--source_file and --reference_file the same file", r"same file")
def eval_same_source_and_reference(ctx):
    folder = ctx.pair_folder("eval_same_source_and_reference")
    run = evaluate(ctx.run, folder / "eval", *files_evaluation(folder, reference="test.en"))
    return accepted(run, "scored the translations against their own sources")


@probe(
    "evaluate_translation",
    "--source_lang de --target_lang en on an en-de model (swapped)",
    r"en-de",
    refuse=False,
)
def eval_swapped_direction(ctx):
    folder = ctx.folder("eval_swapped_direction")
    run = evaluate(ctx.run, folder / "eval", *evaluation_data(ctx, "de", "en"))
    warned = re.search(r"lists the direction\(s\) \['en-de'\], not de-en", run.stderr)
    return Observed(
        run,
        wrong=None if warned else "de-en scored without a word",
        note="a warning: a fine-tuned model's config may still list its old direction",
    )


@probe(
    "evaluate_translation",
    "--source_file test.en.gz --reference_file test.de.gz (gzip files)",
    r"compressed",
    refuse=False,
)
def eval_gzip_files(ctx):
    folder = ctx.folder("eval_gzip_files")
    for language in ("en", "de"):
        write_gz(folder / f"test.{language}.gz", ctx.lines("test_2016_flickr", language, 8))
    run = evaluate(ctx.run, folder / "eval", *files_evaluation(folder, "test.en.gz", "test.de.gz"))
    return Observed(run, wrong=None if run.failed else scored(folder / "eval", 8))


@probe("evaluate_translation", "a reference file in Latin-1, not UTF-8", r"UTF-8.*(convert|iconv)")
def eval_latin1_reference(ctx):
    folder = ctx.pair_folder("eval_latin1_reference")
    german = (folder / "test.de").read_text(encoding="utf-8")
    (folder / "test.de").write_bytes(german.encode("latin-1", errors="replace"))
    return accepted(
        evaluate(ctx.run, folder / "eval", *files_evaluation(folder)), "read as something else"
    )


@probe(
    "evaluate_translation",
    "--model the folder of a run killed before its final model (checkpoints only)",
    r"checkpoint",
)
def eval_run_without_final_model(ctx):
    run_copy = ctx.copy(ctx.run, "eval_run_without_final_model")
    for path in run_copy.iterdir():
        if path.is_file() and path.name != "train.log":
            path.unlink()
    return accepted(
        evaluate(
            run_copy, ctx.folder("eval_run_without_final_model") / "eval", *evaluation_data(ctx)
        ),
        "evaluated something",
    )


@probe("evaluate_translation", "--model a checkpoint-N folder", refuse=False)
def eval_checkpoint_folder(ctx):
    folder = ctx.folder("eval_checkpoint_folder")
    run = evaluate(ctx.run / "checkpoint-4", folder / "eval", *evaluation_data(ctx))
    return Observed(run, wrong=None if run.failed else scored(folder / "eval", 8))


@probe("evaluate_translation", "--model the tokenizer folder", r"holds no config.json")
def eval_tokenizer_as_model(ctx):
    folder = ctx.folder("eval_tokenizer_as_model")
    return accepted(
        evaluate(ctx.tokenizer, folder / "eval", *evaluation_data(ctx)), "evaluated a tokenizer"
    )


@probe(
    "evaluate_translation",
    "--model model.safetensors (the weights file, not its folder)",
    r"is a file; give the folder",
)
def eval_weights_file_as_model(ctx):
    folder = ctx.folder("eval_weights_file_as_model")
    return accepted(
        evaluate(ctx.run / "model.safetensors", folder / "eval", *evaluation_data(ctx)), "evaluated"
    )


@probe("evaluate_translation", "--dtype float16", r"--dtype: invalid choice")
def eval_dtype_float16(ctx):
    folder = ctx.folder("eval_dtype_float16")
    return accepted(
        evaluate(ctx.run, folder / "eval", *evaluation_data(ctx), "--dtype", "float16"), "float16"
    )


@probe(
    "evaluate_translation",
    "Windows (CRLF) line ends in --source_file and --reference_file",
    refuse=False,
)
def eval_crlf_files(ctx):
    folder = ctx.folder("eval_crlf_files")
    for language in ("en", "de"):
        (folder / f"test.{language}").write_bytes(
            "".join(line + "\r\n" for line in ctx.lines("test_2016_flickr", language, 8)).encode()
        )
    run = evaluate(ctx.run, folder / "eval", *files_evaluation(folder))
    hypotheses_ok = not run.failed and "\r" not in (folder / "eval" / "hypotheses.txt").read_text()
    return Observed(
        run, wrong=scored(folder / "eval", 8) or (None if hypotheses_ok else "\\r in the output")
    )


@probe(
    "evaluate_translation",
    "an extra blank line in the middle of the references",
    r"has 8 sentences but .* has 9",
)
def eval_extra_blank_reference(ctx):
    folder = ctx.pair_folder("eval_extra_blank_reference")
    lines = (folder / "test.de").read_text().splitlines()
    (folder / "test.de").write_text("\n".join(lines[:4] + [""] + lines[4:]) + "\n")
    return accepted(
        evaluate(ctx.run, folder / "eval", *files_evaluation(folder)),
        "references shifted by a line",
    )


@probe(
    "evaluate_translation",
    "--data a .jsonl test set with --split val (a file has no splits)",
    refuse=False,
)
def eval_jsonl_with_split(ctx):
    folder = ctx.folder("eval_jsonl_with_split")
    pairs = zip(ctx.lines("test_2016_flickr", "en", 8), ctx.lines("test_2016_flickr", "de", 8))
    (folder / "test.jsonl").write_text(
        "".join(json.dumps({"en": en, "de": de}) + "\n" for en, de in pairs)
    )
    run = evaluate(
        ctx.run,
        folder / "eval",
        "--data",
        folder / "test.jsonl",
        "--split",
        "val",
        "--source_lang",
        "en",
        "--target_lang",
        "de",
        *quick_decoding(),
    )
    return Observed(run, wrong=None if run.failed else scored(folder / "eval", 8))


@probe("evaluate_translation", "--max_pairs 1000 on a 20-pair test set", refuse=False)
def eval_max_pairs_beyond(ctx):
    folder = ctx.folder("eval_max_pairs_beyond")
    arguments = evaluation_data(ctx)
    arguments[arguments.index("--max_pairs") + 1] = 1000
    run = evaluate(ctx.run, folder / "eval", *arguments)
    return Observed(run, wrong=None if run.failed else scored(folder / "eval", 20))


@probe(
    "evaluate_translation",
    "a 600-word source line (longer than the model's 128 positions)",
    r"more than the model's max_position_embeddings",
)
def eval_very_long_source(ctx):
    folder = ctx.pair_folder("eval_very_long_source")
    lines = (folder / "test.en").read_text().splitlines()
    lines[3] = " ".join(["word"] * 600)
    (folder / "test.en").write_text("\n".join(lines) + "\n")
    return accepted(
        evaluate(ctx.run, folder / "eval", *files_evaluation(folder)),
        "a truncated translation scored",
    )


@probe(
    "evaluate_translation",
    "--output_dir the model's own folder, with --overwrite_output_dir",
    refuse=False,
)
def eval_into_model_folder(ctx):
    from nmt_toolkit.checkpoints import load_saved_model

    model = ctx.copy(ctx.residual, "eval_into_model_folder")
    guard = snapshot(model)
    run = evaluate(model, model, *evaluation_data(ctx), "--overwrite_output_dir")
    loads = api(load_saved_model, model)
    return Observed(
        run,
        wrong=scored(model, 8) or (loads.message if loads.failed else None),
        lost=changed(guard),
    )


@probe(
    "evaluate_translation",
    "--baseline_hypotheses with 5 lines for 8 references",
    r"has 5 sentences but",
)
def eval_baseline_shorter(ctx):
    folder = ctx.pair_folder("eval_baseline_shorter")
    (folder / "baseline.txt").write_text("ein mann\n" * 5)
    return accepted(
        evaluate(
            ctx.run,
            folder / "eval",
            *files_evaluation(folder),
            "--baseline_hypotheses",
            folder / "baseline.txt",
        ),
        "compared with a shorter system",
    )


@probe(
    "evaluate_translation",
    "--language_pairs with --source_file/--reference_file",
    r"--language_pairs takes the test set from --data",
)
def eval_language_pairs_with_files(ctx):
    folder = ctx.pair_folder("eval_language_pairs_with_files")
    return accepted(
        evaluate(
            ctx.multilingual,
            folder / "eval",
            "--source_file",
            folder / "test.en",
            "--reference_file",
            folder / "test.de",
            "--language_pairs",
            "en-de",
        ),
        "files ignored",
    )


@probe(
    "evaluate_translation",
    "--average_subset en-cs, a direction not evaluated",
    r"--average_subset names directions",
)
def eval_average_subset_unknown(ctx):
    folder = ctx.folder("eval_average_subset_unknown")
    arguments = evaluation_data(ctx)[8:]  # no --source_lang/--target_lang
    return accepted(
        evaluate(
            ctx.multilingual,
            folder / "eval",
            "--data",
            ctx.data,
            "--split",
            "test_2016_flickr",
            "--language_pairs",
            "en-de,de-en",
            "--average_subset",
            "en-cs",
            *arguments,
        ),
        "an average over nothing",
    )


@probe(
    "evaluate_translation",
    "--baseline_results a one-direction results.json",
    r"not the results.json of a multilingual evaluation",
)
def eval_baseline_results_bilingual(ctx):
    folder = ctx.folder("eval_baseline_results_bilingual")
    baseline = ctx.evaluated(ctx.run, "run")
    arguments = evaluation_data(ctx)[8:]
    return accepted(
        evaluate(
            ctx.multilingual,
            folder / "eval",
            "--data",
            ctx.data,
            "--split",
            "test_2016_flickr",
            "--language_pairs",
            "en-de",
            "--baseline_results",
            baseline / "results.json",
            *arguments,
        ),
        "compared with a bilingual run",
    )


@probe(
    "evaluate_translation",
    "a model folder this user may read but not write (read-only input)",
    refuse=False,
)
def eval_read_only_model(ctx):
    home = other_user_home(ctx, "eval_read_only_model")
    model = ctx.copy(ctx.residual, "eval_read_only_model")
    read_only(model, *model.iterdir())
    run = finish(
        spawn(
            "evaluate_translation",
            "--model",
            model,
            "--output_dir",
            home / "eval",
            *evaluation_data(ctx),
            user=NOBODY,
            home=home,
        )
    )
    return Observed(run, wrong=None if run.failed else scored(home / "eval", 8))


@probe(
    "evaluate_translation",
    "--output_dir in a folder this user cannot write",
    r"Cannot write to output folder",
)
def eval_unwritable_output(ctx):
    home = other_user_home(ctx, "eval_unwritable_output_home")
    folder = read_only(ctx.folder("eval_unwritable_output"))
    return accepted(
        finish(
            spawn(
                "evaluate_translation",
                "--model",
                ctx.residual,
                "--output_dir",
                folder / "eval",
                *evaluation_data(ctx),
                user=NOBODY,
                home=home,
            )
        ),
        "wrote where it may not",
    )


@probe(
    "evaluate_translation",
    "a source sentence holding U+2028 (line separator) and a form feed",
    refuse=False,
)
def eval_unicode_separators(ctx):
    folder = ctx.pair_folder("eval_unicode_separators")
    lines = (folder / "test.en").read_text().splitlines()
    lines[2] = lines[2].replace(" ", "\u2028", 1).replace(" ", "\f", 1)
    (folder / "test.en").write_text("\n".join(lines) + "\n")
    run = evaluate(ctx.run, folder / "eval", *files_evaluation(folder))
    return Observed(run, wrong=None if run.failed else scored(folder / "eval", 8))


@probe("evaluate_translation", "--source_file a folder", r"(Is a directory|is a folder)")
def eval_source_file_is_folder(ctx):
    folder = ctx.pair_folder("eval_source_file_is_folder")
    return accepted(
        evaluate(
            ctx.run,
            folder / "eval",
            "--source_file",
            folder,
            "--reference_file",
            folder / "test.de",
            *quick_decoding(),
        ),
        "read a folder",
    )


@probe("evaluate_translation", "--num_beams 2.5", r"--num_beams.*: invalid int value")
def eval_num_beams_float(ctx):
    folder = ctx.folder("eval_num_beams_float")
    return accepted(
        evaluate(ctx.run, folder / "eval", *evaluation_data(ctx)[:8], "--num_beams", 2.5),
        "2.5 beams",
    )


@probe(
    "evaluate_translation",
    "--data a folder whose test.de is a broken symbolic link",
    r"(broken|dangling).*link",
)
def eval_broken_link_in_data(ctx):
    folder = ctx.pair_folder("eval_broken_link_in_data")
    (folder / "test.de").unlink()
    (folder / "test.de").symlink_to(folder / "moved-away.de")
    return accepted(
        evaluate(
            ctx.run,
            folder / "eval",
            "--data",
            folder,
            "--source_lang",
            "en",
            "--target_lang",
            "de",
            *quick_decoding(),
        ),
        "evaluated without references",
    )


@probe(
    "evaluate_translation",
    "--data a folder with both test.de and an older test.de.gz",
    r"both .*test\.de",
)
def eval_plain_and_gzip_both(ctx):
    folder = ctx.pair_folder("eval_plain_and_gzip_both")
    write_gz(folder / "test.de.gz", ctx.lines("val", "de", 8))
    return accepted(
        evaluate(
            ctx.run,
            folder / "eval",
            "--data",
            folder,
            "--source_lang",
            "en",
            "--target_lang",
            "de",
            *quick_decoding(),
        ),
        "picked one of two different reference files without a word",
    )


@probe("evaluate_translation", "--target_lang cs on an en-de model", r"en-de", refuse=False)
def eval_other_target_language(ctx):
    folder = ctx.folder("eval_other_target_language")
    run = evaluate(ctx.run, folder / "eval", *evaluation_data(ctx, "en", "cs"))
    warned = "not en-cs" in run.stderr
    return Observed(
        run,
        wrong=None if warned else "German output scored against Czech without a word",
        note="a warning, as for de-en",
    )


@probe(
    "evaluate_translation", "--output_dir a symbolic link to a non-empty folder", r"is not empty"
)
def eval_output_link_to_non_empty(ctx):
    folder = ctx.folder("eval_output_link_to_non_empty")
    (folder / "mine").mkdir()
    (folder / "mine" / "notes.txt").write_text("mine")
    (folder / "eval").symlink_to(folder / "mine")
    guard = snapshot(folder / "mine")
    run = evaluate(ctx.run, folder / "eval", *evaluation_data(ctx))
    return Observed(
        run, wrong=None if run.failed else "wrote into a non-empty folder", lost=changed(guard)
    )


@probe(
    "evaluate_translation",
    "an evaluation killed (SIGKILL) once it started, then run again the same way",
    r"is not empty",
    refuse=False,
)
def eval_killed_then_rerun(ctx):
    folder = ctx.folder("eval_killed_then_rerun")
    arguments = ["--model", ctx.run, "--output_dir", folder / "eval", *evaluation_data(ctx)]
    process = spawn("evaluate_translation", *arguments)
    deadline = time.monotonic() + 120
    while not (folder / "eval").is_dir() and time.monotonic() < deadline:
        time.sleep(0.05)
    process.kill()
    finish(process)
    run = script("evaluate_translation", *arguments)
    return Observed(
        run,
        wrong=None if run.failed else scored(folder / "eval", 8),
        note="the killed run's claim is taken over",
    )


# --- average_checkpoints.py -----------------------------------------------------------------------


@probe("average_checkpoints", "--last 0", r"--last: must be a positive integer")
def average_last_zero(ctx):
    folder = ctx.folder("average_last_zero")
    return accepted(
        script(
            "average_checkpoints", "--run_dir", ctx.run, "--last", 0, "--output_dir", folder / "avg"
        ),
        "averaged nothing",
    )


@probe(
    "average_checkpoints",
    "--last 10 on a run with 2 checkpoints",
    r"Asked for the last 10 checkpoints but .* has 2",
)
def average_last_too_many(ctx):
    folder = ctx.folder("average_last_too_many")
    return accepted(
        script(
            "average_checkpoints",
            "--run_dir",
            ctx.run,
            "--last",
            10,
            "--output_dir",
            folder / "avg",
        ),
        "averaged fewer than asked",
    )


@probe(
    "average_checkpoints",
    "--run_dir a checkpoint folder (run/checkpoint-4)",
    r"checkpoint-4 is a checkpoint",
)
def average_run_dir_is_checkpoint(ctx):
    folder = ctx.folder("average_run_dir_is_checkpoint")
    return accepted(
        script(
            "average_checkpoints",
            "--run_dir",
            ctx.run / "checkpoint-4",
            "--last",
            2,
            "--output_dir",
            folder / "avg",
        ),
        "averaged something",
    )


@probe(
    "average_checkpoints",
    "--checkpoints run/checkpoint-2 run/checkpoint-99 (no such checkpoint)",
    r"(?i)no such checkpoint folder: .*checkpoint-99",
)
def average_missing_checkpoint(ctx):
    folder = ctx.folder("average_missing_checkpoint")
    return accepted(
        script(
            "average_checkpoints",
            "--checkpoints",
            ctx.run / "checkpoint-2",
            ctx.run / "checkpoint-99",
            "--output_dir",
            folder / "avg",
        ),
        "averaged one",
    )


@probe(
    "average_checkpoints",
    "--checkpoints of two runs (two seeds) of the same model",
    r"(different|other) training run",
)
def average_two_runs(ctx):
    folder = ctx.folder("average_two_runs")
    return accepted(
        script(
            "average_checkpoints",
            "--checkpoints",
            ctx.run / "checkpoint-4",
            ctx.other_run / "checkpoint-4",
            "--output_dir",
            folder / "avg",
        ),
        "the mean of two unrelated models' weights, exit 0",
    )


@probe(
    "average_checkpoints",
    "--output_dir an older checkpoint of the run, with --overwrite_output_dir",
    r"(holds|is) a (training run|checkpoint)",
)
def average_over_a_checkpoint(ctx):
    run_copy = ctx.copy(ctx.run, "average_over_a_checkpoint")
    guard = snapshot(run_copy / "checkpoint-2")
    run = script(
        "average_checkpoints",
        "--run_dir",
        run_copy,
        "--last",
        1,
        "--output_dir",
        run_copy / "checkpoint-2",
        "--overwrite_output_dir",
    )
    return Observed(run, lost=changed(guard))


@probe(
    "average_checkpoints",
    "two averagings into the same new --output_dir at once",
    r"(is in use by another run|is not empty)",
)
def average_concurrent(ctx):
    folder = ctx.folder("average_concurrent")
    arguments = [
        "--checkpoints",
        ctx.run / "checkpoint-2",
        ctx.run / "checkpoint-4",
        "--output_dir",
        folder / "avg",
    ]
    other = [
        "--checkpoints",
        ctx.other_run / "checkpoint-2",
        ctx.other_run / "checkpoint-4",
        "--output_dir",
        folder / "avg",
    ]
    runs = [
        finish(process)
        for process in (
            spawn("average_checkpoints", *arguments),
            spawn("average_checkpoints", *other),
        )
    ]
    refused = [run for run in runs if run.failed]
    if len(refused) == 1:
        return Observed(refused[0])
    return Observed(
        runs[1], wrong=None if refused else "both exited 0; one average replaced the other"
    )


@probe("average_checkpoints", "--checkpoints the tokenizer folder", r"holds no model.safetensors")
def average_tokenizer_folder(ctx):
    folder = ctx.folder("average_tokenizer_folder")
    return accepted(
        script(
            "average_checkpoints",
            "--checkpoints",
            ctx.tokenizer,
            ctx.run / "checkpoint-4",
            "--output_dir",
            folder / "avg",
        ),
        "averaged a tokenizer",
    )


@probe("average_checkpoints", "--checkpoints one checkpoint (an 'average' of one)", refuse=False)
def average_one_checkpoint(ctx):
    from nmt_toolkit.checkpoints import load_saved_model

    folder = ctx.folder("average_one_checkpoint")
    run = script(
        "average_checkpoints",
        "--checkpoints",
        ctx.run / "checkpoint-4",
        "--output_dir",
        folder / "avg",
    )
    loads = api(load_saved_model, folder / "avg") if not run.failed else None
    return Observed(
        run,
        wrong=loads.message if loads is not None and loads.failed else None,
        note="a copy of the checkpoint's model, loadable",
    )


@probe("average_checkpoints", "--output_dir an existing file", r"is a file")
def average_output_is_file(ctx):
    folder = ctx.folder("average_output_is_file")
    (folder / "avg").write_text("notes")
    guard = snapshot(folder / "avg")
    run = script(
        "average_checkpoints", "--run_dir", ctx.run, "--last", 2, "--output_dir", folder / "avg"
    )
    return Observed(run, wrong=None if run.failed else "accepted", lost=changed(guard))


@probe("average_checkpoints", "both --run_dir and --checkpoints", r"not allowed with argument")
def average_both_sources(ctx):
    folder = ctx.folder("average_both_sources")
    return accepted(
        script(
            "average_checkpoints",
            "--run_dir",
            ctx.run,
            "--checkpoints",
            ctx.run / "checkpoint-2",
            "--output_dir",
            folder / "avg",
        ),
        "one of them ignored",
    )


# --- export_ctranslate2.py ------------------------------------------------------------------------


@probe(
    "export_ctranslate2",
    "--model a depth-wise LSTM model (only the residual members export)",
    r"residual",
)
def export_dwlstm(ctx):
    folder = ctx.folder("export_dwlstm")
    return accepted(
        script("export_ctranslate2", "--model", ctx.run, "--output_dir", folder / "ct2"), "exported"
    )


@probe("export_ctranslate2", "--quantization int4", r"quantization")
def export_bad_quantization(ctx):
    folder = ctx.folder("export_bad_quantization")
    return accepted(
        script(
            "export_ctranslate2",
            "--model",
            ctx.residual,
            "--output_dir",
            folder / "ct2",
            "--quantization",
            "int4",
        ),
        "int4 accepted",
    )


@probe("export_ctranslate2", "--model the tokenizer folder", r"holds no config.json")
def export_tokenizer_folder(ctx):
    folder = ctx.folder("export_tokenizer_folder")
    return accepted(
        script("export_ctranslate2", "--model", ctx.tokenizer, "--output_dir", folder / "ct2"),
        "exported a tokenizer",
    )


@probe(
    "export_ctranslate2",
    "--output_dir the folder that holds the model, with --overwrite_output_dir",
    r"holds the model being exported",
)
def export_over_model_parent(ctx):
    parent = ctx.folder("export_over_model_parent")
    model = parent / "model"
    shutil.copytree(ctx.residual, model)
    guard = snapshot(model)
    run = script(
        "export_ctranslate2", "--model", model, "--output_dir", parent, "--overwrite_output_dir"
    )
    return Observed(run, lost=changed(guard))


@probe(
    "export_ctranslate2",
    "--output_dir a training checkpoint, with --overwrite_output_dir",
    r"(holds|is) a (training run|checkpoint)",
)
def export_over_checkpoint(ctx):
    run_copy = ctx.copy(ctx.run, "export_over_checkpoint")
    guard = snapshot(run_copy / "checkpoint-2")
    run = script(
        "export_ctranslate2",
        "--model",
        ctx.residual,
        "--output_dir",
        run_copy / "checkpoint-2",
        "--overwrite_output_dir",
    )
    return Observed(run, lost=changed(guard))


@probe(
    "export_ctranslate2",
    "--output_dir a non-empty folder without --overwrite_output_dir",
    r"is not empty",
)
def export_non_empty_output(ctx):
    folder = ctx.folder("export_non_empty_output")
    (folder / "ct2").mkdir()
    (folder / "ct2" / "mine.txt").write_text("mine")
    guard = snapshot(folder / "ct2")
    run = script("export_ctranslate2", "--model", ctx.residual, "--output_dir", folder / "ct2")
    return Observed(run, wrong=None if run.failed else "wrote into it", lost=changed(guard))


@probe(
    "export_ctranslate2",
    "--model a checkpoint-N folder of a residual run (no mistake: the common case)",
    refuse=False,
)
def export_residual_model(ctx):
    folder = ctx.folder("export_residual_model")
    run = script(
        "export_ctranslate2",
        "--model",
        ctx.residual,
        "--output_dir",
        folder / "ct2",
        "--quantization",
        "int8",
    )
    return Observed(run, wrong=None if (folder / "ct2" / "model.bin").is_file() else "no model.bin")


# --- push_to_hub.py (a loopback Hub on 127.0.0.1) -------------------------------------------------


@contextlib.contextmanager
def loopback_hub():
    sys.path.insert(0, str(REPOSITORY / "tests"))
    import huggingface_hub.constants
    from hub_server import LoopbackHub

    saved = huggingface_hub.constants.ENDPOINT, os.environ.get("HF_ENDPOINT")
    with LoopbackHub() as hub:
        huggingface_hub.constants.ENDPOINT = hub.endpoint
        os.environ["HF_ENDPOINT"] = hub.endpoint
        try:
            yield hub
        finally:
            huggingface_hub.constants.ENDPOINT = saved[0]
            if saved[1] is None:
                os.environ.pop("HF_ENDPOINT", None)
            else:
                os.environ["HF_ENDPOINT"] = saved[1]


def push(*argv) -> tuple[Run, dict]:
    """Push with the loopback Hub; (the run, the files it received: {repo: {path: bytes}})."""
    with loopback_hub() as hub:
        run = script("push_to_hub", *argv, "--token", "hf_probe")
        return run, hub.repos


@probe(
    "push_to_hub",
    "--results the results.json of another model (evaluated before)",
    r"results.*(another|other) model",
)
def push_results_of_another_model(ctx):
    other = ctx.evaluated(ctx.other_run, "other-run")
    run, repos = push(
        "--model",
        ctx.run,
        "--repo_id",
        "user/model",
        "--training_data",
        "Multi30k",
        "--results",
        other / "results.json",
    )
    card = repos.get("user/model", {}).get("README.md", b"").decode()
    wrong = (
        f"the card shows the other model's sacreBLEU {results(other)['sacrebleu']}"
        if card
        else "pushed"
    )
    return accepted(run, wrong)


@probe("push_to_hub", "--repo_id model (no user or organisation)", r"must look like 'user/name'")
def push_repo_id_without_user(ctx):
    return accepted(
        push("--model", ctx.run, "--repo_id", "model", "--training_data", "Multi30k")[0], "pushed"
    )


@probe("push_to_hub", '--training_data ""', r"training_data")
def push_empty_training_data(ctx):
    return accepted(
        push("--model", ctx.run, "--repo_id", "user/model", "--training_data", "")[0],
        "a card without its data",
    )


@probe(
    "push_to_hub",
    "--model a checkpoint-N folder (optimizer state beside the weights)",
    refuse=False,
)
def push_checkpoint_folder(ctx):
    run, repos = push(
        "--model",
        ctx.run / "checkpoint-4",
        "--repo_id",
        "user/model",
        "--training_data",
        "Multi30k",
    )
    uploaded = set(repos.get("user/model", {}))
    extra = sorted(
        name for name in uploaded if name.endswith((".pt", ".pth")) or name == "trainer_state.json"
    )
    needed = {
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "pipeline_translation.py",
        "README.md",
    }
    return Observed(
        run,
        wrong=f"uploaded {extra}"
        if extra
        else (f"missing {sorted(needed - uploaded)}" if needed - uploaded else None),
    )


@probe("push_to_hub", "--results a file that does not exist", r"Cannot read evaluation results")
def push_missing_results(ctx):
    return accepted(
        push(
            "--model",
            ctx.run,
            "--repo_id",
            "user/model",
            "--training_data",
            "x",
            "--results",
            ctx.work / "no-such-results.json",
        )[0],
        "pushed without results",
    )


@probe("push_to_hub", "--results the run's trainer_state.json", r"is not a results.json")
def push_results_is_trainer_state(ctx):
    return accepted(
        push(
            "--model",
            ctx.run,
            "--repo_id",
            "user/model",
            "--training_data",
            "x",
            "--results",
            ctx.run / "trainer_state.json",
        )[0],
        "a card with no scores",
    )


# --- plot_training.py -----------------------------------------------------------------------------


@probe(
    "plot_training",
    "--output run/trainer_state.json (the file the plot is drawn from)",
    r"--output",
)
def plot_over_its_input(ctx):
    run_copy = ctx.copy(ctx.run, "plot_over_its_input")
    guard = snapshot(run_copy / "trainer_state.json")
    run = script("plot_training", run_copy, "--output", run_copy / "trainer_state.json")
    return Observed(run, lost=changed(guard))


@probe("plot_training", "--output curves (no file extension)", r"--output", refuse=False)
def plot_output_without_extension(ctx):
    folder = ctx.folder("plot_output_without_extension")
    run = script("plot_training", ctx.run, "--output", folder / "curves")
    said = run.stdout.strip().splitlines()[-1] if run.stdout.strip() else ""
    return Observed(
        run,
        wrong=None
        if run.failed or Path(said).is_file()
        else (
            f"printed {said!r}, which does not exist ({sorted(p.name for p in folder.iterdir())} "
            "written)"
        ),
    )


@probe(
    "plot_training",
    "--output into a folder that does not exist",
    r"(No such file|folder)",
    refuse=False,
)
def plot_output_missing_folder(ctx):
    folder = ctx.folder("plot_output_missing_folder")
    run = script("plot_training", ctx.run, "--output", folder / "figures" / "curves.png")
    return Observed(
        run,
        wrong=None if run.failed or (folder / "figures" / "curves.png").is_file() else "no figure",
    )


@probe("plot_training", "a checkpoint folder as the run", refuse=False)
def plot_checkpoint_as_run(ctx):
    folder = ctx.folder("plot_checkpoint_as_run")
    run = script("plot_training", ctx.run / "checkpoint-4", "--output", folder / "curves.png")
    return Observed(run, wrong=None if (folder / "curves.png").is_file() else "no figure")


@probe("plot_training", "two runs and three --labels", r"2 runs but 3 labels")
def plot_labels_mismatch(ctx):
    folder = ctx.folder("plot_labels_mismatch")
    return accepted(
        script(
            "plot_training",
            ctx.run,
            ctx.other_run,
            "--labels",
            "a",
            "b",
            "c",
            "--output",
            folder / "c.png",
        ),
        "labels shifted",
    )


@probe(
    "plot_training",
    "a saved model folder without training records as the run",
    r"has neither trainer_state.json",
)
def plot_model_without_state(ctx):
    folder = ctx.folder("plot_model_without_state")
    return accepted(
        script("plot_training", ctx.residual, "--output", folder / "c.png"), "an empty figure"
    )


# --- results_table.py -----------------------------------------------------------------------------


@probe(
    "results_table", "--baseline a results.json of other directions", r"baseline.*(direction|de-en)"
)
def table_baseline_other_directions(ctx):
    system = ctx.cached("ml-en-de", lambda: multilingual_eval(ctx, "ml-en-de", "en-de,de-en"))
    baseline = ctx.cached("ml-en-fr", lambda: multilingual_eval(ctx, "ml-en-fr", "en-fr,fr-en"))
    return accepted(
        script("results_table", system / "results.json", "--baseline", baseline / "results.json"),
        "a table comparing other directions",
    )


def multilingual_eval(ctx, name: str, pairs: str) -> Path:
    output = ctx.work / "evaluations" / name
    run = script(
        "evaluate_translation",
        "--model",
        ctx.multilingual,
        "--data",
        ctx.data,
        "--split",
        "test_2016_flickr",
        "--language_pairs",
        pairs,
        "--max_pairs",
        4,
        *quick_decoding(),
        "--output_dir",
        output,
    )
    assert run.code == 0, run.stderr[-2000:]
    return output


@probe("results_table", "a one-direction results.json", r"is a one-direction evaluation")
def table_bilingual_results(ctx):
    return accepted(
        script("results_table", ctx.evaluated(ctx.run, "run") / "results.json"), "a table"
    )


@probe(
    "results_table",
    "the evaluation folder instead of its results.json",
    r"Cannot read evaluation results.*(directory|folder)",
)
def table_folder_given(ctx):
    return accepted(script("results_table", ctx.evaluated(ctx.run, "run")), "a table")


# --- record_checksums.py --------------------------------------------------------------------------


@probe("record_checksums", "a file (model.safetensors) instead of a folder", r"is not a folder")
def record_file_given(ctx):
    model = ctx.copy(ctx.residual, "record_file_given")
    return accepted(script("record_checksums", model / "model.safetensors"), "recorded a file")


@probe(
    "record_checksums",
    "record a folder whose weights were truncated, then evaluate it",
    r"model.safetensors is truncated or corrupted",
)
def record_truncated_weights(ctx):
    model = ctx.copy(ctx.residual, "record_truncated_weights")
    weights = model / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    recorded = script("record_checksums", model)
    run = evaluate(model, ctx.folder("record_truncated_weights") / "eval", *evaluation_data(ctx))
    return Observed(
        run if not recorded.failed else recorded,
        wrong=None if run.failed else "evaluated broken weights",
        note="recording accepts the folder as it is; loading still checks the weights",
    )


@probe("record_checksums", "a folder this user cannot write", r"cannot be written by this user")
def record_unwritable_folder(ctx):
    home = other_user_home(ctx, "record_unwritable_folder")
    model = read_only(ctx.copy(ctx.residual, "record_unwritable_folder"))
    return accepted(
        finish(spawn("record_checksums", model, user=NOBODY, home=home)), "said it recorded"
    )


# --- make_hub_configs.py --------------------------------------------------------------------------


@probe(
    "make_hub_configs",
    "--output_dir a folder of hand-edited presets (dropout changed in one)",
    r"(differs|edited|changed).*--overwrite",
)
def hub_configs_over_edited_presets(ctx):
    folder = ctx.folder("hub_configs_over_edited_presets")
    edited = json.loads((REPOSITORY / "hub_configs" / "dwlstm-base-6l.json").read_text())
    edited["dropout"] = 0.3
    (folder / "dwlstm-base-6l.json").write_text(json.dumps(edited, indent=2))
    guard = snapshot(folder / "dwlstm-base-6l.json")
    run = script("make_hub_configs", "--output_dir", folder)
    return Observed(run, lost=changed(guard))


@probe("make_hub_configs", "run from another folder with the default --output_dir", refuse=False)
def hub_configs_default_elsewhere(ctx):
    folder = ctx.folder("hub_configs_default_elsewhere")
    run = script("make_hub_configs", cwd=folder)
    written = len(list((folder / "hub_configs").glob("*.json")))
    expected = len(list((REPOSITORY / "hub_configs").glob("*.json")))
    return Observed(
        run, wrong=None if written == expected else f"{written} files written, not {expected}"
    )


# --- run_experiments.py ---------------------------------------------------------------------------


def experiment_file(ctx, folder: Path, **changes) -> Path:
    experiment = {
        "name": "probe",
        "data": {
            "dataset": str(ctx.data),
            "source_lang": "en",
            "target_lang": "de",
            "train_split": "train",
            "validation_split": "val",
            "test_split": "test_2016_flickr",
        },
        "tokenizer": {"merges": 100},
        "model": {"d_model": 16, "encoder_layers": 1, "decoder_layers": 1},
        "training": {"max_steps": 2},
        "average_last": 1,
        "evaluation": {"num_beams": 1},
        "runs": [
            {"name": "dwlstm", "config": str(REPOSITORY / "hub_configs" / "dwlstm-base-6l.json")}
        ],
        **changes,
    }
    path = folder / "experiment.json"
    path.write_text(json.dumps(experiment))
    return path


@probe(
    "run_experiments",
    'an experiment file with a misspelled key ("trainig")',
    r"unknown keys \['trainig'\]",
)
def experiment_unknown_key(ctx):
    folder = ctx.folder("experiment_unknown_key")
    return accepted(
        script(
            "run_experiments",
            experiment_file(ctx, folder, trainig={"max_steps": 2}),
            "--output_dir",
            folder / "runs",
            "--record_dir",
            folder / "records",
            "--table_only",
        ),
        "key ignored",
    )


@probe("run_experiments", "an experiment file written in YAML", r"is not valid JSON")
def experiment_yaml(ctx):
    folder = ctx.folder("experiment_yaml")
    (folder / "experiment.yaml").write_text("name: probe\nruns:\n  - name: dwlstm\n")
    return accepted(script("run_experiments", folder / "experiment.yaml", "--table_only"), "read")


@probe("run_experiments", "a run whose config file does not exist", r"no config file")
def experiment_missing_config(ctx):
    folder = ctx.folder("experiment_missing_config")
    path = experiment_file(
        ctx, folder, runs=[{"name": "x", "config": str(folder / "missing.json")}]
    )
    return accepted(
        script("run_experiments", path, "--table_only", "--record_dir", folder / "records"), "ran"
    )


@probe(
    "run_experiments",
    "--only a run name that is not in the file",
    r"--only names runs that are not in",
)
def experiment_only_unknown(ctx):
    folder = ctx.folder("experiment_only_unknown")
    return accepted(
        script(
            "run_experiments",
            experiment_file(ctx, folder),
            "--only",
            "dwlsmt",
            "--output_dir",
            folder / "runs",
            "--record_dir",
            folder / "records",
        ),
        "ran nothing, exit 0",
    )


@probe("run_experiments", "two runs with the same name", r"two runs are named")
def experiment_duplicate_names(ctx):
    folder = ctx.folder("experiment_duplicate_names")
    config = str(REPOSITORY / "hub_configs" / "dwlstm-base-6l.json")
    path = experiment_file(
        ctx, folder, runs=[{"name": "a", "config": config}, {"name": "a", "config": config}]
    )
    return accepted(
        script("run_experiments", path, "--table_only", "--record_dir", folder / "records"), "ran"
    )


@probe(
    "run_experiments",
    "--table_only before any run has finished",
    r"no run of probe has a record yet",
    refuse=False,
)
def experiment_table_without_records(ctx):
    folder = ctx.folder("experiment_table_without_records")
    run = script(
        "run_experiments",
        experiment_file(ctx, folder),
        "--table_only",
        "--record_dir",
        folder / "records",
    )
    table = folder / "records" / "results.md"
    return Observed(
        run,
        wrong=None
        if run.failed or (table.is_file() and "dwlstm" in table.read_text())
        else "no table listing the run as not run yet",
    )


# --- plot_internals.py, analyze_layers.py, diagnose_depth.py, measure_gradient_norms.py -----------


@probe(
    "plot_internals", "--model a residual model (it has no gates)", r"has no gates or layer weights"
)
def internals_residual(ctx):
    folder = ctx.folder("internals_residual")
    return accepted(
        script("plot_internals", "--model", ctx.residual, "--output_dir", folder / "out"), "a plot"
    )


@probe("plot_internals", "--model a depth-wise LSTM without --data", r"give --data")
def internals_without_data(ctx):
    folder = ctx.folder("internals_without_data")
    return accepted(
        script("plot_internals", "--model", ctx.run, "--output_dir", folder / "out"), "a plot"
    )


@probe(
    "plot_internals",
    "--split test on Multi30k (its test split is test_2016_flickr)",
    r"No split 'test'",
)
def internals_split_missing(ctx):
    folder = ctx.folder("internals_split_missing")
    return accepted(
        script(
            "plot_internals",
            "--model",
            ctx.run,
            "--data",
            ctx.data,
            "--source_lang",
            "en",
            "--target_lang",
            "de",
            "--output_dir",
            folder / "out",
        ),
        "a plot",
    )


def layers_arguments(ctx, folder: Path, source: str = "en", target: str = "de") -> list:
    return [
        "--model",
        ctx.run,
        "--data",
        ctx.data,
        "--source_lang",
        source,
        "--target_lang",
        target,
        "--split",
        "test_2016_flickr",
        "--fit_steps",
        1,
        "--fit_batch_size",
        8,
        "--max_sentences",
        4,
        "--num_beams",
        1,
        "--output_dir",
        folder / "out",
    ]


@probe(
    "analyze_layers",
    "--source_lang de --target_lang en on an en-de model (swapped)",
    r"en-de",
    refuse=False,
)
def layers_swapped_direction(ctx):
    folder = ctx.folder("layers_swapped_direction")
    run = script("analyze_layers", *layers_arguments(ctx, folder, "de", "en"))
    warned = "not de-en" in run.stderr
    return Observed(
        run, wrong=None if warned else "layer BLEU of the wrong direction, without a word"
    )


@probe("analyze_layers", "--train_split trn (typo)", r"No split 'trn'")
def layers_train_split_typo(ctx):
    folder = ctx.folder("layers_train_split_typo")
    return accepted(
        script("analyze_layers", *layers_arguments(ctx, folder), "--train_split", "trn"), "ran"
    )


def depth_arguments(ctx, folder: Path, *configs) -> list:
    return [
        "--data",
        ctx.data,
        "--tokenizer",
        ctx.tokenizer,
        "--configs",
        *configs,
        "--d_model",
        16,
        "--ffn_dim",
        16,
        "--heads",
        2,
        "--layers",
        1,
        "--steps",
        2,
        "--every",
        1,
        "--max_pairs",
        50,
        "--max_tokens",
        400,
        "--output_dir",
        folder / "out",
    ]


@probe(
    "diagnose_depth", "--configs a saved model folder (not a config file)", r"is a folder.*config"
)
def depth_config_is_folder(ctx):
    folder = ctx.folder("depth_config_is_folder")
    return accepted(script("diagnose_depth", *depth_arguments(ctx, folder, ctx.run)), "ran")


@probe(
    "diagnose_depth",
    "--config_overrides '{\"num_layers\": 2}' (not a config field)",
    r"num_layers.*(not a field|unknown)",
)
def depth_unknown_override(ctx):
    folder = ctx.folder("depth_unknown_override")
    return accepted(
        script(
            "diagnose_depth",
            *depth_arguments(ctx, folder, ctx.tiny_config),
            "--config_overrides",
            '{"num_layers": 2}',
        ),
        "the override ignored",
    )


@probe("diagnose_depth", "two --configs and one --names", r"--names gives 1 names for 2 --configs")
def depth_names_mismatch(ctx):
    folder = ctx.folder("depth_names_mismatch")
    return accepted(
        script(
            "diagnose_depth",
            *depth_arguments(ctx, folder, ctx.tiny_config, ctx.tiny_config),
            "--names",
            "a",
        ),
        "ran",
    )


@probe(
    "diagnose_depth",
    "--config_overrides dropout=0.1 (not JSON)",
    r"--config_overrides is not valid JSON",
)
def depth_overrides_not_json(ctx):
    folder = ctx.folder("depth_overrides_not_json")
    return accepted(
        script(
            "diagnose_depth",
            *depth_arguments(ctx, folder, ctx.tiny_config),
            "--config_overrides",
            "dropout=0.1",
        ),
        "ran",
    )


def gradient_arguments(ctx, folder: Path, *extra) -> list:
    return [
        "--data_dir",
        ctx.data,
        "--sentences",
        40,
        "--steps",
        2,
        "--batch_size",
        4,
        "--encoder_layers",
        1,
        "--decoder_layers",
        1,
        "--d_model",
        16,
        "--output",
        folder / "norms.json",
        *extra,
    ]


@probe("measure_gradient_norms", "--source en --target en", r"both 'en'")
def gradients_same_language(ctx):
    folder = ctx.folder("gradients_same_language")
    return accepted(
        script("measure_gradient_norms", *gradient_arguments(ctx, folder, "--target", "en")), "ran"
    )


@probe(
    "measure_gradient_norms",
    "--output an existing folder",
    r"--output .* is a folder; give the JSON file",
)
def gradients_output_is_folder(ctx):
    folder = ctx.folder("gradients_output_is_folder")
    arguments = gradient_arguments(ctx, folder)
    arguments[-1] = folder
    return accepted(script("measure_gradient_norms", *arguments), "wrote nowhere")


@probe("measure_gradient_norms", "--target es (not in the corpus)", r"Unknown language 'es'")
def gradients_missing_language(ctx):
    folder = ctx.folder("gradients_missing_language")
    return accepted(
        script("measure_gradient_norms", *gradient_arguments(ctx, folder, "--target", "es")), "ran"
    )


# --- quickstart.py, measure_speed.py --------------------------------------------------------------


@probe("quickstart", "--output_dir an existing file", r"is a file")
def quickstart_output_is_file(ctx):
    folder = ctx.folder("quickstart_output_is_file")
    (folder / "out").write_text("notes")
    guard = snapshot(folder / "out")
    run = script("quickstart", "--output_dir", folder / "out", "--max_steps", 1)
    return Observed(run, wrong=None if run.failed else "ran", lost=changed(guard))


@probe("quickstart", "--overwrite on a folder that holds a training run", r"also holds")
def quickstart_overwrite_run(ctx):
    run_copy = ctx.copy(ctx.run, "quickstart_overwrite_run")
    guard = snapshot(run_copy)
    run = script("quickstart", "--output_dir", run_copy, "--overwrite", "--max_steps", 1)
    return Observed(run, wrong=None if run.failed else "ran", lost=changed(guard))


@probe("measure_speed", "--sizes huge", r"--sizes: invalid choice")
def benchmark_bad_size(ctx):
    return accepted(
        script("measure_speed", "--sizes", "huge", "--output", ctx.work / "bench.json"), "ran"
    )


@probe("measure_speed", "--precisions int4", r"--precisions: invalid choice")
def benchmark_bad_precision(ctx):
    return accepted(
        script("measure_speed", "--precisions", "int4", "--output", ctx.work / "bench.json"), "ran"
    )


@probe("measure_speed", "--lengths 16 0", r"--lengths: must be a positive integer")
def benchmark_zero_length(ctx):
    return accepted(
        script("measure_speed", "--lengths", 16, 0, "--output", ctx.work / "bench.json"), "ran"
    )


# --- The Python API -------------------------------------------------------------------------------


def loaded(ctx, path: Path):
    """(model, tokenizer) of a saved folder, loaded once."""

    def build():
        from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

        import modeling_dwlstm  # noqa: F401

        return AutoModelForSeq2SeqLM.from_pretrained(path).eval(), AutoTokenizer.from_pretrained(
            path
        )

    return ctx.cached(("loaded", str(path)), build)


def batch(tokenizer, texts):
    return tokenizer(texts, return_tensors="pt", padding=True)


@probe("api", "AutoModelForSeq2SeqLM.from_pretrained(the tokenizer folder)", r"config\.json")
def api_model_from_tokenizer_folder(ctx):
    from transformers import AutoModelForSeq2SeqLM

    return accepted(
        api(AutoModelForSeq2SeqLM.from_pretrained, ctx.tokenizer), "a model from a tokenizer"
    )


@probe("api", "generate(num_beams=2, num_return_sequences=3)", r"num_return_sequences")
def api_more_sequences_than_beams(ctx):
    model, tokenizer = loaded(ctx, ctx.run)
    return accepted(
        api(
            model.generate,
            **batch(tokenizer, ["A man."]),
            num_beams=2,
            num_return_sequences=3,
            max_new_tokens=3,
        ),
        "3 sequences from 2 beams",
    )


@probe("api", "generate(do_sample=True, temperature=0.0)", r"temperature")
def api_sampling_at_temperature_zero(ctx):
    model, tokenizer = loaded(ctx, ctx.run)
    return accepted(
        api(
            model.generate,
            **batch(tokenizer, ["A man."]),
            do_sample=True,
            temperature=0.0,
            max_new_tokens=3,
        ),
        "sampled at temperature 0",
    )


@probe(
    "api", "generate(input_ids=...) with ids from a larger vocabulary than the model's", r"vocab"
)
def api_ids_beyond_vocabulary(ctx):
    import torch

    model, _ = loaded(ctx, ctx.run)
    ids = torch.tensor([[model.config.vocab_size + 5, 7, 2]])
    return accepted(
        api(model.generate, input_ids=ids, max_new_tokens=3), "generated from an unknown id"
    )


@probe("api", "translate_sentences with another, larger tokenizer than the model's", r"vocab")
def api_translate_with_another_tokenizer(ctx):
    from nmt_toolkit.evaluation import translate_sentences

    model, _ = loaded(ctx, ctx.run)
    _, bigger = loaded(ctx, ctx.multilingual)
    return accepted(
        api(
            translate_sentences,
            model,
            bigger,
            ctx.lines("test_2016_flickr", "en", 4),
            num_beams=1,
            max_new_tokens=3,
        ),
        "translated with ids that mean other tokens",
    )


@probe(
    "api",
    "pipeline('translation')(123) (not a string)",
    r"(translates strings|must be of type `str`)",
)
def api_pipeline_number(ctx):
    from transformers import pipeline

    translator = ctx.cached("pipeline", lambda: pipeline("translation_en_to_de", model=ctx.run))
    return accepted(api(translator, 123), "translated a number")


@probe(
    "api", "pipeline(...)(text, max_length=5, max_new_tokens=4) (two length limits)", refuse=False
)
def api_pipeline_two_length_limits(ctx):
    from transformers import pipeline

    translator = ctx.cached("pipeline", lambda: pipeline("translation_en_to_de", model=ctx.run))
    run = api(translator, "A man rides a horse.", max_length=5, max_new_tokens=4, num_beams=1)
    return Observed(run, note="transformers uses max_new_tokens and says so")


@probe(
    "api", 'prepare_for_inference(model, dtype="bf16")', r"dtype must be one of float32, bfloat16"
)
def api_prepare_bf16_alias(ctx):
    from modeling_dwlstm.precision import prepare_for_inference

    model, _ = loaded(ctx, ctx.run)
    return accepted(api(prepare_for_inference, model, dtype="bf16"), "bf16 accepted")


@probe("api", "prepare_for_inference(model, quantize=True)", r"quantize must be one of none, int8")
def api_prepare_quantize_true(ctx):
    from modeling_dwlstm.precision import prepare_for_inference

    model, _ = loaded(ctx, ctx.run)
    return accepted(api(prepare_for_inference, model, quantize=True), "quantize=True accepted")


@probe("api", "DwLstmConfig(d_model=100, encoder_attention_heads=8)", r"divisible")
def api_config_indivisible(ctx):
    from modeling_dwlstm import DwLstmConfig

    return accepted(api(DwLstmConfig, d_model=100, encoder_attention_heads=8), "100 / 8 heads")


@probe("api", 'DwLstmConfig(lstm_hidden="lstm")', r"lstm_hidden")
def api_config_bad_choice(ctx):
    from modeling_dwlstm import DwLstmConfig

    return accepted(api(DwLstmConfig, lstm_hidden="lstm"), "lstm accepted")


@probe(
    "api",
    "ResidualTransformerConfig(norm_postion='pre') (misspelled field)",
    r"did you mean `norm_position`",
)
def api_config_misspelled(ctx):
    from modeling_dwlstm import ResidualTransformerConfig

    return accepted(api(ResidualTransformerConfig, norm_postion="pre"), "a post-norm model")


@probe("api", "DwLstmConfig(encoder_layers=2.0)", r"encoder_layers.*integer")
def api_config_float_layers(ctx):
    from modeling_dwlstm import DwLstmConfig

    return accepted(api(DwLstmConfig, encoder_layers=2.0), "2.0 layers")


@probe("api", 'DwLstmConfig(language_pairs="en-de") (a string, not a list)', r"language_pairs")
def api_config_pairs_string(ctx):
    from modeling_dwlstm import DwLstmConfig

    run = api(DwLstmConfig, language_pairs="en-de")
    return accepted(run, f"language_pairs {getattr(run.value, 'language_pairs', None)!r}")


@probe(
    "api",
    'paper_config("dwlstm-base") (the file name, not the member)',
    r"Unknown member 'dwlstm-base'",
)
def api_paper_config_file_name(ctx):
    from modeling_dwlstm.paper_configs import paper_config

    return accepted(api(paper_config, "dwlstm-base"), "a config")


@probe("api", 'paper_config("dwlstm", size="Base")', r"size 'Base'")
def api_paper_config_size_case(ctx):
    from modeling_dwlstm.paper_configs import paper_config

    return accepted(api(paper_config, "dwlstm", size="Base"), "a config")


@probe("api", 'paper_config("dwlstm", layers=0)', r"encoder_layers.*>= 1")
def api_paper_config_zero_layers(ctx):
    from modeling_dwlstm.paper_configs import paper_config

    return accepted(api(paper_config, "dwlstm", layers=0), "no layers")


@probe(
    "api",
    "train_joint_bpe_tokenizer(texts, vocab_size=20) (fewer than the characters)",
    r"too small",
)
def api_bpe_vocabulary_too_small(ctx):
    from modeling_dwlstm.tokenization_dwlstm import train_joint_bpe_tokenizer

    return accepted(
        api(train_joint_bpe_tokenizer, ctx.lines("train", "de", 50), vocab_size=20), "a tokenizer"
    )


@probe(
    "api",
    "train_joint_bpe_tokenizer(path_to_a_text_file, 200) (a path, not sentences)",
    r"not one string",
)
def api_bpe_path_for_texts(ctx):
    from modeling_dwlstm.tokenization_dwlstm import train_joint_bpe_tokenizer

    return accepted(
        api(train_joint_bpe_tokenizer, str(ctx.data / "train.en.gz"), 200), "a tokenizer of a path"
    )


@probe("api", "tokenizer_model_kwargs(a tokenizer without a pad token)", r"pad")
def api_model_kwargs_without_pad(ctx):
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    from modeling_dwlstm import DwLstmConfig
    from modeling_dwlstm.tokenization_dwlstm import tokenizer_model_kwargs

    _, tokenizer = loaded(ctx, ctx.run)
    backend = Tokenizer.from_str(tokenizer.backend_tokenizer.to_str())
    backend.no_padding()
    bare = PreTrainedTokenizerFast(tokenizer_object=backend)  # no special tokens named
    return accepted(
        api(lambda: DwLstmConfig(**tokenizer_model_kwargs(bare))), "a config without padding"
    )


@probe(
    "api",
    'translate_sentences(model, tokenizer, "one sentence") (a string, not a list)',
    r"list of strings",
)
def api_translate_string(ctx):
    from nmt_toolkit.evaluation import translate_sentences

    model, tokenizer = loaded(ctx, ctx.run)
    return accepted(
        api(translate_sentences, model, tokenizer, "A man rides a horse.", num_beams=1),
        "per character",
    )


@probe(
    "api",
    'translate_sentences(..., language_tag="de") on a bilingual model',
    r"has no language tag",
)
def api_translate_tag_bilingual(ctx):
    from nmt_toolkit.evaluation import translate_sentences

    model, tokenizer = loaded(ctx, ctx.run)
    return accepted(
        api(translate_sentences, model, tokenizer, ["A man."], num_beams=1, language_tag="de"),
        "<2de> as <unk>",
    )


@probe(
    "api",
    "translate_sentences(..., max_new_tokens=3.5)",
    r"--max_new_tokens must be a positive integer",
)
def api_translate_float_tokens(ctx):
    from nmt_toolkit.evaluation import translate_sentences

    model, tokenizer = loaded(ctx, ctx.run)
    return accepted(
        api(translate_sentences, model, tokenizer, ["A man."], num_beams=1, max_new_tokens=3.5),
        "3.5",
    )


@probe("api", "average_checkpoints([], output)", r"empty")
def api_average_nothing(ctx):
    from nmt_toolkit.checkpoints import average_checkpoints

    return accepted(
        api(average_checkpoints, [], ctx.folder("api_average_nothing") / "avg"), "an empty model"
    )


@probe(
    "api",
    "average_checkpoints(checkpoints, an existing folder) without overwrite",
    r"already exists",
)
def api_average_existing_output(ctx):
    from nmt_toolkit.checkpoints import average_checkpoints

    folder = ctx.folder("api_average_existing_output")
    (folder / "avg").mkdir()
    (folder / "avg" / "notes.txt").write_text("mine")
    guard = snapshot(folder / "avg")
    run = api(
        average_checkpoints, [ctx.run / "checkpoint-2", ctx.run / "checkpoint-4"], folder / "avg"
    )
    return Observed(run, wrong=None if run.failed else "replaced", lost=changed(guard))


@probe(
    "api",
    'average_checkpoints("run/checkpoint-4", output) (a string, not a list)',
    r"list|sequence|one checkpoint",
)
def api_average_string(ctx):
    from nmt_toolkit.checkpoints import average_checkpoints

    return accepted(
        api(
            average_checkpoints,
            str(ctx.run / "checkpoint-4"),
            ctx.folder("api_average_string") / "avg",
        ),
        "each character a checkpoint",
    )


@probe(
    "api", "load_parallel_corpus(folder, 'en', 'de', max_pairs=5.0)", r"max_pairs.*positive integer"
)
def api_corpus_float_max_pairs(ctx):
    from nmt_toolkit.data import load_parallel_corpus

    return accepted(api(load_parallel_corpus, ctx.data, "en", "de", max_pairs=5.0), "5.0 pairs")


@probe(
    "api",
    "load_parallel_corpus('en', 'de', folder) (arguments in the wrong order)",
    r"language code",
)
def api_corpus_swapped_arguments(ctx):
    from nmt_toolkit.data import load_parallel_corpus

    return accepted(api(load_parallel_corpus, "en", "de", str(ctx.data)), "loaded something")


@probe(
    "api",
    "load_parallel_corpus(folder, 'en', 'fr', split='val') where val has no French (train has)",
    r"Unknown language 'fr' for split 'val'",
)
def api_corpus_language_in_one_split(ctx):
    from nmt_toolkit.data import load_parallel_corpus

    data = ctx.copy(ctx.data, "api_corpus_language_in_one_split")
    (data / "val.fr.gz").unlink()
    return accepted(api(load_parallel_corpus, data, "en", "fr", split="val"), "loaded something")


@probe("api", "load_parallel_corpus(a .jsonl.gz file that is not gzip)", r"gzip")
def api_corpus_fake_gzip_jsonl(ctx):
    from nmt_toolkit.data import load_parallel_corpus

    folder = ctx.folder("api_corpus_fake_gzip_jsonl")
    (folder / "pairs.jsonl.gz").write_text('{"en": "a man", "de": "ein mann"}\n')
    return accepted(api(load_parallel_corpus, folder / "pairs.jsonl.gz", "en", "de"), "read")


@probe(
    "api",
    "load_saved_model(run/model.safetensors) (the weights file)",
    r"is a file; give the folder",
)
def api_load_weights_file(ctx):
    from nmt_toolkit.checkpoints import load_saved_model

    return accepted(api(load_saved_model, ctx.run / "model.safetensors"), "loaded")


@probe("api", "generate() on a padded batch without the attention mask", refuse=False)
def api_generate_without_mask(ctx):
    model, tokenizer = loaded(ctx, ctx.run)
    sentences = ctx.lines("test_2016_flickr", "en", 3)
    encoded = batch(tokenizer, sentences)
    run = api(model.generate, input_ids=encoded["input_ids"], num_beams=1, max_new_tokens=5)
    masked = model.generate(**encoded, num_beams=1, max_new_tokens=5)
    if run.failed:
        return Observed(run)
    same = tokenizer.batch_decode(run.value) == tokenizer.batch_decode(masked)
    return Observed(
        run,
        wrong=None if same else "padded sentences translated differently than with the mask",
        note="generate() derives the mask from the pad id",
    )


@probe(
    "api",
    "AutoTokenizer.from_pretrained(a model folder whose tokenizer files were left out)",
    r"tokenizer\.json",
)
def api_tokenizer_missing_files(ctx):
    from transformers import AutoTokenizer

    model = ctx.copy(ctx.residual, "api_tokenizer_missing_files")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (model / name).unlink()
    return Observed(
        api(AutoTokenizer.from_pretrained, model),
        note="transformers' own message, which does not name "
        "tokenizer.json and suggests installing sentencepiece; nmt_toolkit's loaders name the file",
    )


if __name__ == "__main__":
    main()
