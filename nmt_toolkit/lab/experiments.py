"""A results campaign: every run of an experiment file trained, averaged, evaluated and tabulated,
resumably.

`run_experiments(path)` is what `scripts/run_experiments.py` runs. An experiment file (JSON, under
`experiments/`) names the data, one tokenizer, the shared model and training settings, and the runs
(a member's `hub_configs/` file, config overrides, seeds). For every run and seed it goes through

    tokenizer (once) -> train_translation.py -> average_checkpoints.py -> evaluate_translation.py
    -> record

each stage a subprocess running the project's own script with the exact command line recorded, so a
run here is a run a user can repeat by hand. Heavy outputs (checkpoints, averaged models) go to
`output_dir` (default `runs/experiments/NAME`); what the table needs (the tokenizer, each run's test
results, hypotheses, learning curve, commands, seed, git commit, package versions) goes to the small
`record_dir` (default `experiments/NAME`, the study's folder), which is meant to be committed: one
packed record per run, `records/RUN-seedN.json.gz` (`read_record`). A run whose record exists is
finished and skipped, unless the experiment was edited since: every record keeps its run's settings
(`run_settings`: the data, the tokenizer's settings, the config file's contents, the overrides,
training, averaging, evaluation, seed, and the settings of the run it starts from or is evaluated
against), and a run whose settings changed runs again from the start; so does an unfinished run of
other settings, and the tokenizer. A table never shows a record of other settings than the
experiment's (`record_changes`). An interrupted training continues from its newest checkpoint (it
loses at most one checkpoint interval); an interrupted averaging or evaluation starts over (their
outputs are written to a staging folder and renamed when complete). Running the campaign twice does
nothing the second time. Once every run has a record, `write_results_table` writes `results.md` and
`results.json` (mean and spread over seeds, the median seed's sacreBLEU with its 95% bootstrap
interval, the paired bootstrap against the baseline run) and the two pictures of `plotting.py`.

A multilingual experiment names `data.language_pairs` (the training directions) instead of one
direction; its evaluation decodes `evaluation.language_pairs` (supervised and zero-shot directions),
and a run with a baseline is evaluated against the baseline's results (`--baseline_results`: win
ratios, per-direction p-values), so the baseline is listed before it. Its table is Xu et al. 2024,
Table 7's (`evaluation.systems_table`). A run with `from` is a fine-tuning stage: it starts from the
averaged model of the run it names (same seed), e.g. with `"training": {"robt": 1}`, and its record
counts that run's training time too. `start_run_from_checkpoints` lets a run of one experiment begin
from another experiment's checkpoints (or finished run), e.g. a study on val that continues a
campaign's model.
"""

import gzip
import json
import logging
import math
import os
import platform
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

from safetensors import safe_open

from ..checkpoints import RUN_ARGUMENTS_NAME, complete_checkpoints, record_saved_folder
from ..data import load_parallel_corpus
from ..evaluation import paired_bootstrap, results_table, systems_table
from ..files import (
    atomic_directory,
    atomic_write_json,
    atomic_write_text,
    claim_output_dir,
    releasing_output_dirs,
    split_lines,
    verify_checksums,
)
from .plotting import plot_bleu_intervals, plot_training, plot_zero_shot

logger = logging.getLogger(__name__)

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"  # the repository's scripts/
PACKAGES = ("torch", "transformers", "tokenizers", "datasets", "accelerate", "sacrebleu")
EXPERIMENT_KEYS = {
    "name",
    "description",
    "data",
    "tokenizer",
    "model",
    "training",
    "average_last",
    "evaluation",
    "baseline",
    "runs",
}
RUN_KEYS = {"name", "config", "model", "training", "seeds", "baseline", "group", "from"}


@dataclass
class RunSpec:
    """One row of the table: a member's config with overrides, trained once per seed."""

    name: str
    config: Path | None  # None for a fine-tuning stage: the model of `parent`
    model: dict
    training: dict
    seeds: list[int]
    baseline: str | None
    group: str
    parent: str | None = None  # the run whose averaged model a fine-tuning stage starts from

    def run_ids(self) -> list[str]:
        return [f"{self.name}-seed{seed}" for seed in self.seeds]


@dataclass
class Experiment:
    name: str
    description: str
    data: dict
    tokenizer: dict
    training: dict
    average_last: int
    evaluation: dict
    runs: list[RunSpec] = field(default_factory=list)
    # `data` with its dataset as the file names it (not resolved)
    data_as_written: dict = field(default_factory=dict)

    def run(self, name: str) -> RunSpec:
        return next(run for run in self.runs if run.name == name)

    @property
    def multilingual(self) -> bool:
        return "language_pairs" in self.data

    def direction_flags(self) -> list[str]:
        """The training directions, for train_tokenizer.py and train_translation.py."""
        if self.multilingual:
            return ["--language_pairs", self.data["language_pairs"]]
        return [
            "--source_lang",
            self.data["source_lang"],
            "--target_lang",
            self.data["target_lang"],
        ]


def load_experiment(path: str | os.PathLike) -> Experiment:
    """Read and check an experiment file; relative paths in it are relative to the file's folder."""
    path = Path(path)
    try:
        spec = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ValueError(f"No experiment file {path}; see experiments/ for examples.") from None
    except json.JSONDecodeError as error:
        raise ValueError(f"{path} is not valid JSON: {error}") from None
    _check_keys(spec, EXPERIMENT_KEYS, {"name", "data", "runs"}, f"{path}")
    _check_objects(spec, ("data", "tokenizer", "model", "training", "evaluation"), f"{path}")
    data = dict(spec["data"])
    _check_keys(
        data,
        {
            "dataset",
            "source_lang",
            "target_lang",
            "language_pairs",
            "train_split",
            "validation_split",
            "test_split",
        },
        {"dataset"} | (set() if "language_pairs" in data else {"source_lang", "target_lang"}),
        f"{path}: data",
    )
    if "language_pairs" in data and {"source_lang", "target_lang"} & set(data):
        raise ValueError(
            f"{path}: data names `language_pairs` (a multilingual experiment) and `source_lang`/"
            "`target_lang` (one direction); give one or the other."
        )
    data_as_written = {
        "train_split": "train",
        "validation_split": "val",
        "test_split": "test",
        **spec["data"],
    }
    local = path.parent / data["dataset"]
    if local.exists() or not _looks_like_hub_id(data["dataset"]):
        if not local.exists():
            raise ValueError(
                f"{path}: data.dataset {data['dataset']!r} is neither a file or folder (relative "
                "to the "
                "experiment file) nor a Hub corpus."
            )
        data["dataset"] = str(local.resolve())
    data = {"train_split": "train", "validation_split": "val", "test_split": "test", **data}
    if not isinstance(spec["runs"], list) or not spec["runs"]:
        raise ValueError(
            f"{path}: `runs` must be a non-empty list of runs, e.g. "
            '[{"name": "dwlstm", "config": "../../hub_configs/dwlstm-base-6l.json"}].'
        )
    runs, names = [], set()
    for number, run in enumerate(spec["runs"], 1):
        _check_keys(
            run,
            RUN_KEYS,
            {"name"} | (set() if "from" in run else {"config"}),
            f"{path}: run {number}",
        )
        _check_objects(run, ("model", "training"), f"{path}: run {number}")
        if not isinstance(run["name"], str) or not RUN_NAME.fullmatch(run["name"]):
            raise ValueError(
                f"{path}: run {number}'s name {run['name']!r} must be letters, digits, '.', '_' "
                "or '-' "
                "(it names the run's folder and record file)."
            )
        if run["name"] in names:
            raise ValueError(
                f"{path}: two runs are named {run['name']!r}; run names must be unique."
            )
        _check_stage(run, names, path)
        names.add(run["name"])
        config = (path.parent / run["config"]).resolve() if "config" in run else None
        if config is not None and not config.is_file():
            raise ValueError(f"{path}: run {run['name']!r}: no config file {config}.")
        seeds = run.get("seeds", [1])
        if not seeds or not all(
            isinstance(seed, int) and not isinstance(seed, bool) for seed in seeds
        ):
            raise ValueError(
                f"{path}: run {run['name']!r}: `seeds` must be a non-empty list of integers."
            )
        # one record per seed: a repeat would count it twice in the table
        if len(set(seeds)) != len(seeds):
            raise ValueError(
                f"{path}: run {run['name']!r}: `seeds` {seeds} names a seed twice; list each once."
            )
        runs.append(
            RunSpec(
                name=run["name"],
                config=config,
                model={} if "from" in run else {**spec.get("model", {}), **run.get("model", {})},
                training={**spec.get("training", {}), **run.get("training", {})},
                seeds=list(seeds),
                baseline=run.get("baseline", spec.get("baseline")),
                group=run.get("group", "main"),
                parent=run.get("from"),
            )
        )
    order = [run.name for run in runs]
    for run in runs:
        if run.baseline is not None and run.baseline not in names:
            raise ValueError(
                f"{path}: run {run.name!r} compares against {run.baseline!r}, which is not a run "
                "here."
            )
        if (
            "language_pairs" in data
            and run.baseline
            and order.index(run.baseline) > order.index(run.name)
        ):
            raise ValueError(
                f"{path}: run {run.name!r} is evaluated against {run.baseline!r}'s results: list "
                f"{run.baseline!r} before it."
            )
        if run.parent is not None and not set(run.seeds) <= set(
            next(r for r in runs if r.name == run.parent).seeds
        ):
            raise ValueError(
                f"{path}: run {run.name!r} starts from {run.parent!r}, which has not all its seeds "
                f"{run.seeds}."
            )
    average_last = spec.get("average_last", 1)
    if not isinstance(average_last, int) or average_last < 1:
        raise ValueError(
            f"{path}: `average_last` must be a positive integer, got {average_last!r}."
        )
    return Experiment(
        name=spec["name"],
        description=spec.get("description", ""),
        data=data,
        tokenizer=spec.get("tokenizer", {}),
        training=spec.get("training", {}),
        average_last=average_last,
        evaluation=spec.get("evaluation", {}),
        runs=runs,
        data_as_written=data_as_written,
    )


@releasing_output_dirs
def run_experiments(
    path: str | os.PathLike,
    output_dir: str | os.PathLike | None = None,
    record_dir: str | os.PathLike | None = None,
    threads: int | None = None,
    only: list[str] | None = None,
    table: bool = True,
    table_so_far: bool = False,
) -> list[str]:
    """Bring every run (or the runs named in `only`) of the experiment to a record, then write
    the table.

    `threads` sets OMP_NUM_THREADS (torch's intra-op threads) for every stage. Returns what was
    done, one line per stage ("train dwlstm-seed1 (resumed from checkpoint-400)", "skip
    residual-prenorm-seed1", ...). A stage that fails raises `RuntimeError` naming the run, the
    command and its log file. The table is written once every run has a record, or with
    `table_so_far` from the records there are.
    """
    experiment = load_experiment(path)
    output_dir = Path(output_dir or Path("runs") / "experiments" / experiment.name)
    record_dir = Path(record_dir or default_record_dir(experiment))
    # one campaign at a time: a second would train and delete the same runs
    claim_output_dir(output_dir)
    claim_output_dir(record_dir)
    selected = [run for run in experiment.runs if not only or run.name in only]
    if only and len(selected) != len(set(only)):
        unknown = sorted(set(only) - {run.name for run in experiment.runs})
        raise ValueError(
            f"--only names runs that are not in {path}: {unknown}; known: "
            f"{[run.name for run in experiment.runs]}."
        )
    environment = {**os.environ, **({"OMP_NUM_THREADS": str(threads)} if threads else {})}
    done = []
    tokenizer = _tokenizer_stage(
        experiment, record_dir / "tokenizer", output_dir / "tokenizer.log", environment, done
    )
    # Seed-major order: an unfinished campaign has every run's first seed before any run's second.
    jobs = sorted(
        (
            (index, run, seed, run_id)
            for run in selected
            for index, (seed, run_id) in enumerate(zip(run.seeds, run.run_ids()))
        ),
        key=lambda job: job[0],
    )
    for _, run, seed, run_id in jobs:
        run_dir = output_dir / run_id
        if has_record(record_dir, run_id):
            changed = record_changes(experiment, run, seed, read_record(record_dir, run_id))
            if not changed:
                done.append(
                    f"skip {run_id}"
                    + (
                        ""
                        if changed == []
                        else " (its record keeps no settings: its config file was not compared)"
                    )
                )
                continue
            # The old record stays until the new one replaces it; no table takes it meanwhile
            # (record_changes).
            done.append(f"redo {run_id}: its settings changed ({', '.join(changed)})")
        else:
            changed = _changed_settings(
                _read_json(run_dir / SETTINGS_NAME), run_settings(experiment, run, seed)
            )
            if changed:
                done.append(
                    f"restart {run_id}: its settings changed since it started ("
                    f"{', '.join(changed)})"
                )
        # checkpoints and outputs of the old settings: not to be resumed or reused
        if changed and run_dir.exists():
            shutil.rmtree(run_dir)
        _run_stages(
            experiment, run, seed, run_id, tokenizer, run_dir, record_dir, environment, done
        )
    missing = [
        run_id
        for run in experiment.runs
        for seed, run_id in zip(run.seeds, run.run_ids())
        if not _current_record(experiment, run, seed, record_dir, run_id)
    ]
    if table and missing and table_so_far:
        write_results_table(experiment, record_dir, allow_missing=True)
        done.append(
            f"table so far {record_dir / 'results.md'} ({len(missing)} runs have no record yet)"
        )
    elif table and missing:
        done.append(
            f"table not written: {len(missing)} runs have no record yet ({', '.join(missing)})"
        )
    elif table and (
        any(not line.startswith("skip ") for line in done)
        or not (record_dir / "results.md").is_file()
    ):
        write_results_table(experiment, record_dir)
        done.append(f"table {record_dir / 'results.md'}")
    return done


def _check_stage(run: dict, earlier: set[str], path: Path):
    """A fine-tuning stage (`from`) starts from a run listed before it, and takes no model settings
    of its own."""
    if "from" not in run:
        return
    if run["from"] not in earlier:
        raise ValueError(
            f"{path}: run {run['name']!r} starts from {run['from']!r}, which is not a run listed "
            "before it."
        )
    if "config" in run or "model" in run:
        raise ValueError(
            f"{path}: run {run['name']!r} continues {run['from']!r}'s model: it takes no "
            "`config` or "
            "`model` of its own."
        )


# in a run's folder from its start, and in the tokenizer's folder
SETTINGS_NAME = "experiment_settings.json"


def run_settings(experiment: Experiment, run: RunSpec, seed: int) -> dict:
    """Everything a run's record depends on: the data (as the experiment file names it), the
    tokenizer's settings, the config file's contents (not its name), the model overrides, training,
    averaging and evaluation, the seed, and the settings of the run a fine-tuning stage starts from
    and of the baseline a multilingual run is evaluated against. A record of other settings than
    these is out of date."""
    config = json.loads(run.config.read_text(encoding="utf-8")) if run.config is not None else None
    parent = (
        run_settings(experiment, experiment.run(run.parent), seed)
        if run.parent is not None
        else None
    )
    against = experiment.multilingual and run.baseline not in (None, run.name)
    baseline = (
        run_settings(experiment, experiment.run(run.baseline), seed) if against else run.baseline
    )
    return {
        **_tokenizer_settings(experiment),
        "config": config,
        "model": run.model,
        "training": run.training,
        "seed": seed,
        "average_last": experiment.average_last,
        "evaluation": {
            key: value for key, value in experiment.evaluation.items() if key not in PLACEMENT
        },
        "baseline": baseline,
        "from": parent,
    }


def _tokenizer_settings(experiment: Experiment) -> dict:
    return {"data": experiment.data_as_written, "tokenizer": experiment.tokenizer}


def record_changes(
    experiment: Experiment, run: RunSpec, seed: int, record: dict
) -> list[str] | None:
    """The settings by name ("training.max_steps", "config.d_model") in which a record
    (`read_record`) differs from the run as the experiment now is; [] if none. A record packed
    before records kept their settings is compared by the commands it recorded (the flags of
    training, averaging and evaluation; "evaluate --num_beams"), and None is returned when those
    agree: its config file's contents cannot be compared."""
    info = record["info"]
    if "settings" in info:
        return _changed_settings(info["settings"], run_settings(experiment, run, seed))
    now = _commands(experiment, run, seed, Path("tokenizer"), Path("run"))
    changed = [
        f"{stage} {flag}"
        for stage in ("train", "average", "evaluate")
        for flag in _differing_flags(info.get("commands", {}).get(stage, ""), now[stage])
        if not (stage == "evaluate" and flag.removeprefix("--") in PLACEMENT)
    ]
    if info.get("model_overrides", run.model) != run.model:
        changed.append("model")
    return changed or None


def _current_record(
    experiment: Experiment, run: RunSpec, seed: int, record_dir: Path, run_id: str
) -> bool:
    return has_record(record_dir, run_id) and not record_changes(
        experiment, run, seed, read_record(record_dir, run_id)
    )


# Flags naming files or folders, which differ between machines and clones: not settings.
PATH_FLAGS = {
    "--model_name_or_path",
    "--tokenizer_name_or_path",
    "--dataset",
    "--output_dir",
    "--run_dir",
    "--model",
    "--data",
    "--baseline_results",
}
# Evaluation settings that choose where and in what batches to decode, not what: a record made on a
# GPU with larger batches stays the record of the same run.
PLACEMENT = {"device", "max_tokens"}


def _differing_flags(recorded: str, command: list[str]) -> list[str]:
    """The flags whose value differs between a recorded command line (`_quote`d parts) and
    `command`."""

    def flags(parts: list[str]) -> dict:
        values = {}
        for index, part in enumerate(parts):
            if part.startswith("--") and part not in PATH_FLAGS:
                following = parts[index + 1] if index + 1 < len(parts) else None
                values[part] = (
                    None if following is None or following.startswith("--") else following
                )
        return values

    then, now = flags(shlex.split(recorded)), flags(command)
    return sorted(flag for flag in then.keys() | now.keys() if then.get(flag) != now.get(flag))


def _changed_settings(recorded: dict | None, settings: dict) -> list[str] | None:
    """The settings by dotted name whose value in `settings` differs from `recorded`; [] if none;
    None when nothing was recorded (a folder from before settings were kept)."""
    if recorded is None:
        return None

    def flat(value, prefix: str) -> dict:
        if not isinstance(value, dict) or not value:
            return {prefix: value}
        return {
            key: item
            for name, inner in value.items()
            for key, item in flat(inner, f"{prefix}.{name}").items()
        }

    then = flat(recorded, "")
    now = flat(json.loads(json.dumps(settings, default=str)), "")  # as read back from JSON
    return [
        name.lstrip(".")
        for name in sorted(then.keys() | now.keys())
        if then.get(name) != now.get(name)
    ]


def _read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    # damaged (it is written atomically, so by hand): compare as different settings
    except ValueError:
        return {}


def _tokenizer_stage(
    experiment: Experiment, tokenizer_dir: Path, log: Path, environment: dict, done: list[str]
) -> Path:
    settings = _tokenizer_settings(experiment)
    if (tokenizer_dir / "tokenizer.json").is_file():
        changed = _changed_settings(_read_json(tokenizer_dir / SETTINGS_NAME), settings)
        if not changed:  # the same settings, or a tokenizer from before they were kept
            return tokenizer_dir
        done.append(f"redo tokenizer: its settings changed ({', '.join(changed)})")
    data = experiment.data
    command = [
        sys.executable,
        str(SCRIPTS / "train_tokenizer.py"),
        "--dataset",
        data["dataset"],
        *experiment.direction_flags(),
        "--split",
        data["train_split"],
        *_flags(experiment.tokenizer),
    ]
    _staged(
        command,
        tokenizer_dir,
        environment,
        "tokenizer",
        log,
        then=lambda staging: atomic_write_json(staging / SETTINGS_NAME, settings),
    )
    done.append(f"tokenizer {tokenizer_dir}")
    return tokenizer_dir


def _commands(
    experiment: Experiment, run: RunSpec, seed: int, tokenizer: Path, run_dir: Path
) -> dict[str, list[str]]:
    """The command line of each stage of one run."""
    data = experiment.data
    train_dir, averaged, test_dir = run_dir / "train", run_dir / "averaged", run_dir / "test"
    start_from = (
        run.config
        if run.parent is None
        else run_dir.parent / f"{run.parent}-seed{seed}" / "averaged"
    )
    return {
        "train": [
            sys.executable,
            str(SCRIPTS / "train_translation.py"),
            "--model_name_or_path",
            str(start_from),
            "--tokenizer_name_or_path",
            str(tokenizer),
            "--dataset",
            data["dataset"],
            *experiment.direction_flags(),
            "--train_split",
            data["train_split"],
            "--validation_split",
            data["validation_split"],
            "--eval_strategy",
            "steps",
            "--seed",
            str(seed),
            "--include_num_input_tokens_seen",
            "true",
            "--disable_tqdm",
            "true",
            "--output_dir",
            str(train_dir),
            *(
                [
                    "--config_overrides",
                    ",".join(f"{key}={value}" for key, value in run.model.items()),
                ]
                if run.model
                else []
            ),
            *_flags(run.training),
        ],
        "average": [
            sys.executable,
            str(SCRIPTS / "average_checkpoints.py"),
            "--run_dir",
            str(train_dir),
            "--last",
            str(experiment.average_last),
            "--output_dir",
            str(averaged),
        ],
        "evaluate": [
            sys.executable,
            str(SCRIPTS / "evaluate_translation.py"),
            "--model",
            str(averaged),
            "--output_dir",
            str(test_dir),
            "--data",
            data["dataset"],
            "--split",
            data["test_split"],
            *_evaluation_flags(
                experiment, run, run_dir.parent / f"{run.baseline}-seed{seed}" / "test"
            ),
        ],
    }


def _run_stages(
    experiment: Experiment,
    run: RunSpec,
    seed: int,
    run_id: str,
    tokenizer: Path,
    run_dir: Path,
    record_dir: Path,
    environment: dict,
    done: list[str],
):
    train_dir, averaged, test_dir = run_dir / "train", run_dir / "averaged", run_dir / "test"
    settings = run_settings(experiment, run, seed)
    # before any output: a later run of edited settings sees what this was
    if not (run_dir / SETTINGS_NAME).is_file():
        run_dir.mkdir(parents=True, exist_ok=True)
        atomic_write_json(run_dir / SETTINGS_NAME, settings)
    commands = _commands(experiment, run, seed, tokenizer, run_dir)
    train_command = commands["train"]
    started = time.time()
    start_from = (
        run.config
        if run.parent is None
        else run_dir.parent / f"{run.parent}-seed{seed}" / "averaged"
    )
    if not (train_dir / "train_results.json").is_file():
        checkpoints = _checkpoints(train_dir)
        if checkpoints:
            command, note = (
                [*train_command, "--resume_from_checkpoint", "last"],
                f" (resumed from {checkpoints[-1].name})",
            )
        else:
            # killed before its first checkpoint: nothing there is worth keeping
            if train_dir.exists():
                shutil.rmtree(train_dir)
            command, note = train_command, ""
        if run.parent is not None and not (start_from / "config.json").is_file():
            raise StageFailed(
                f"training {run_id} continues {run.parent}-seed{seed}'s averaged model, "
                f"{start_from}, which is not there: run {run.parent} first (its --output_dir "
                "holds it)."
            )
        train_dir.mkdir(parents=True, exist_ok=True)
        _run(command, environment, run_dir / "train.stdout.log", f"training {run_id}")
        done.append(f"train {run_id}{note}")
    if not averaged.is_dir():
        _staged(
            commands["average"],
            averaged,
            environment,
            f"averaging {run_id}",
            run_dir / "average.log",
        )
        done.append(f"average {run_id}")
    if not (test_dir / "results.json").is_file():
        baseline_results = (
            commands["evaluate"][commands["evaluate"].index("--baseline_results") + 1]
            if "--baseline_results" in commands["evaluate"]
            else None
        )
        if baseline_results and not Path(baseline_results).is_file():
            raise StageFailed(
                f"evaluating {run_id} needs its baseline's results, {baseline_results}: run "
                f"{run.baseline} (with seed {seed}) first."
            )
        _staged(
            commands["evaluate"],
            test_dir,
            environment,
            f"evaluating {run_id}",
            run_dir / "evaluate.log",
        )
        done.append(f"evaluate {run_id}")
    _write_record(
        run,
        seed,
        run_id,
        commands,
        train_dir,
        averaged,
        test_dir,
        record_dir,
        environment,
        settings,
    )
    done.append(f"record {run_id} ({time.time() - started:.0f} s)")


def _evaluation_flags(experiment: Experiment, run: RunSpec, baseline_test_dir: Path) -> list[str]:
    """The direction(s) of the evaluation and the experiment's settings; a multilingual run with a
    baseline is evaluated against the baseline's results (win ratios and p-values per direction)."""
    if not experiment.multilingual:
        return [
            "--source_lang",
            experiment.data["source_lang"],
            "--target_lang",
            experiment.data["target_lang"],
            *_flags(experiment.evaluation),
        ]
    settings = {"language_pairs": experiment.data["language_pairs"], **experiment.evaluation}
    if run.baseline and run.baseline != run.name:
        settings["baseline_results"] = str(baseline_test_dir / "results.json")
    return _flags(settings)


def _write_record(
    run: RunSpec,
    seed: int,
    run_id: str,
    commands: dict,
    train_dir: Path,
    averaged: Path,
    test_dir: Path,
    record_dir: Path,
    environment: dict,
    settings: dict,
):
    """The small things the table needs, packed into one file (`pack_record`): a record is whole
    or absent."""
    state = json.loads((train_dir / "trainer_state.json").read_text())
    train_results = json.loads((train_dir / "train_results.json").read_text())
    config = json.loads((averaged / "config.json").read_text())
    wall_time = max((entry.get("wall_time", 0.0) for entry in state["log_history"]), default=0.0)
    info = {
        "run": run.name,
        "seed": seed,
        "group": run.group,
        "config": run.config and str(run.config),
        "model_overrides": run.model,
        "from": run.parent,
        "robt_seconds": _robt_seconds(state["log_history"]),
        "model_type": config["model_type"],
        "parameters": _parameter_count(averaged),
        "steps": state["global_step"],
        "training_wall_seconds": wall_time,
        "source_tokens_seen": state.get("num_input_tokens_seen"),
        "train_loss": train_results.get("train_loss"),
        "commands": {
            stage: " ".join(_quote(part) for part in command) for stage, command in commands.items()
        },
        "omp_num_threads": environment.get("OMP_NUM_THREADS"),
        "git_commit": _git_commit(),
        "python": platform.python_version(),
        "packages": {name: _version(name) for name in PACKAGES},
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
        "settings": settings,
    }
    if (test_dir / "hypotheses.txt").is_file():
        names = ["hypotheses.txt"]
    else:  # multilingual: DIRECTION/hypotheses.txt (and the pivot translations) per direction
        names = sorted(str(path.relative_to(test_dir)) for path in test_dir.rglob("*.txt"))
        names = [f"test/{name}" for name in names]
    files = {
        name: (test_dir / name.removeprefix("test/")).read_text(encoding="utf-8") for name in names
    }
    pack_record(
        record_file(record_dir, run_id),
        info,
        json.loads((test_dir / "results.json").read_text()),
        record_history(state["log_history"]),
        files,
    )


def record_file(record_dir: str | os.PathLike, run_id: str) -> Path:
    """Where the packed record of `run_id` lives in a study's record folder."""
    return Path(record_dir) / "records" / f"{run_id}.json.gz"


def has_record(record_dir: str | os.PathLike, run_id: str) -> bool:
    return record_file(record_dir, run_id).is_file()


def pack_record(
    path: str | os.PathLike, info: dict, test: dict, history: list[dict], files: dict[str, str]
) -> Path:
    """One run's record as one gzip-compressed JSON: `record` (what ran, how, on what),
    `test_results` (the evaluation's results.json), `log_history` (training and validation logs) and
    `files` (the hypotheses, by the name the evaluation gave them: `hypotheses.txt`, or
    `test/DIRECTION/hypotheses.txt` and the pivot translations for a multilingual run). Written to a
    temporary name and renamed; no timestamp inside, so the same record packs to the same bytes."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    value = {"record": info, "test_results": test, "log_history": history, "files": files}
    data = gzip.compress(
        (json.dumps(value, indent=1, ensure_ascii=False) + "\n").encode("utf-8"), mtime=0
    )
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_bytes(data)
    os.replace(temporary, path)
    return path


def read_record(record_dir: str | os.PathLike, run_id: str) -> dict:
    """A packed record (`pack_record`) as {"id", "info", "test", "history", "files"};
    `hypotheses(record)` gives its translations as lines, to re-score."""
    path = record_file(record_dir, run_id)
    try:
        value = json.loads(gzip.decompress(path.read_bytes()).decode("utf-8"))
    except FileNotFoundError:
        raise FileNotFoundError(
            f"No record of {run_id} in {Path(record_dir) / 'records'}; run the campaign first."
        ) from None
    except (OSError, EOFError, ValueError) as error:
        raise ValueError(
            f"{path} is not a packed record ({error}); restore it from git or run {run_id} again."
        ) from None
    return {
        "id": run_id,
        "info": value["record"],
        "test": value["test_results"],
        "history": value["log_history"],
        "files": value["files"],
    }


def hypotheses(record: dict, direction: str | None = None) -> list[str]:
    """A record's translations, one per source in input order: a one-direction run's, or
    `direction`'s (e.g. "de-fr") of a multilingual run."""
    name = "hypotheses.txt" if direction is None else f"test/{direction}/hypotheses.txt"
    if name not in record["files"]:
        raise KeyError(
            f"The record of {record['id']} has no {name}; it has {sorted(record['files'])}."
        )
    return split_lines(record["files"][name])


def record_history(log_history: list[dict]) -> list[dict]:
    """The Trainer log entries a record keeps: the training logs and the validations. A multilingual
    run validates each direction in an entry of its own (`eval_en-de_loss`, ...): those of one step
    become one entry, with `eval_loss` the mean over the directions (each validated on the same
    number of pairs), so its curves are drawn as a bilingual run's are."""
    history, by_step = [], {}
    for entry in log_history:
        losses = {
            key: value
            for key, value in entry.items()
            if key.startswith("eval_") and key.endswith("_loss")
        }
        if losses and "eval_loss" not in entry:
            merged = by_step.setdefault(
                entry["step"], {"step": entry["step"], "epoch": entry.get("epoch")}
            )
            merged.update(losses)
            merged["wall_time"] = max(merged.get("wall_time", 0.0), entry.get("wall_time", 0.0))
        elif "eval_loss" in entry or "loss" in entry:
            history.append(entry)
    for merged in by_step.values():
        merged["eval_loss"] = round(
            statistics.mean(value for key, value in merged.items() if key.endswith("_loss")), 4
        )
    return sorted(history + list(by_step.values()), key=lambda entry: entry["step"])


def default_record_dir(experiment: Experiment) -> Path:
    """Where the small results of `experiment` go unless told otherwise: its study's folder,
    experiments/NAME."""
    return Path("experiments") / experiment.name


def write_results_table(
    experiment: Experiment, record_dir: str | os.PathLike, allow_missing: bool = False
) -> dict:
    """results.md, results.json, learning_curves_GROUP.png and test_bleu.png in `record_dir`, from
    the records.

    With `allow_missing` a campaign still under way gets its table so far: a run with some of its
    seeds shows those (its "seeds" column says how many of how many), a run with none is listed as
    not run yet, and a row whose baseline has no record gets no p-value. Without it a missing record
    is an error.
    """
    if experiment.multilingual:
        return write_multilingual_table(experiment, record_dir, allow_missing)
    record_dir = Path(record_dir)
    current, missing, out_of_date = _current_records(experiment, record_dir, allow_missing)
    references = _references(experiment)
    rows, not_run = [], []
    for run in experiment.runs:
        present = [run_id for run_id in run.run_ids() if run_id in current]
        if not present:
            not_run.append(run)
            continue
        records = [current[run_id] for run_id in present]
        scores = [record["test"]["sacrebleu"] for record in records]
        median = records[sorted(range(len(scores)), key=scores.__getitem__)[(len(scores) - 1) // 2]]
        rows.append({"run": run, "records": records, "median": median, "scores": scores})
    by_name = {row["run"].name: row for row in rows}
    table = []
    for row in rows:
        run, median = row["run"], row["median"]

        has_baseline = (
            run.baseline is not None and run.baseline != run.name and run.baseline in by_name
        )
        baseline = by_name[run.baseline]["median"] if has_baseline else median
        test = paired_bootstrap(
            hypotheses(median), hypotheses(baseline), references, tokenized=False
        )
        seconds = [record["info"]["training_wall_seconds"] for record in row["records"]]
        tokens = [record["info"]["source_tokens_seen"] or 0 for record in row["records"]]
        table.append(
            {
                "run": run.name,
                "group": run.group,
                "model_type": median["info"]["model_type"],
                "parameters": median["info"]["parameters"],
                "seeds": [record["info"]["seed"] for record in row["records"]],
                "seeds_planned": run.seeds,
                "sacrebleu_per_seed": row["scores"],
                "sacrebleu_mean": round(statistics.mean(row["scores"]), 2),
                "sacrebleu_std": round(statistics.stdev(row["scores"]), 2)
                if len(row["scores"]) > 1
                else None,
                "median_seed": median["info"]["seed"],
                "sacrebleu": median["test"]["sacrebleu"],
                "sacrebleu_interval": test["system_interval"],
                "chrf": median["test"]["chrf"],
                "tokenized_bleu": median["test"]["tokenized_bleu"],
                "baseline": run.baseline if run.baseline and run.baseline != run.name else None,
                "p_value_vs_baseline": test["p_value"] if has_baseline else None,
                "train_source_tokens_per_second": round(sum(tokens) / sum(seconds), 1)
                if sum(seconds)
                else None,
                "beam_sentences_per_second": median["test"]["sentences_per_second"],
                "steps": median["info"]["steps"],
                "wall_minutes": round(statistics.mean(seconds) / 60, 1),
                "validation_loss": {
                    entry["step"]: entry["eval_loss"]
                    for entry in median["history"]
                    if "eval_loss" in entry
                },
            }
        )
    signature = rows[0]["median"]["test"]["sacrebleu_signature"]
    results = {
        "experiment": experiment.name,
        "description": experiment.description,
        "data": experiment.data,
        "sacrebleu_signature": signature,
        "rows": table,
        "not_run_yet": missing,
        "out_of_date": out_of_date,
    }
    atomic_write_json(record_dir / "results.json", results)
    groups = list(dict.fromkeys(run.group for run in experiment.runs))
    for group in groups:
        in_group = [row for row in rows if row["run"].group == group]
        histories = {row["run"].name: row["median"]["history"] for row in in_group}
        # A group measured against a run of another group draws that run too, so its curves have
        # their reference.
        outside = {row["run"].baseline for row in in_group} - set(histories)
        histories.update(
            {
                f"{row['run'].name} (baseline)": row["median"]["history"]
                for row in rows
                if row["run"].name in outside
            }
        )
        if in_group:
            plot_training(
                histories,
                record_dir / f"learning_curves_{group}.png",
                title=f"{experiment.name}: {group}",
            )
    # a campaign tuned on val evaluates on val: the picture says so
    split = experiment.data["test_split"]
    plot_bleu_intervals(
        {row["run"]: (row["sacrebleu"], row["sacrebleu_interval"]) for row in table},
        record_dir / "test_bleu.png",
        title=f"{experiment.name}: {split} sacreBLEU (median seed)",
        split=split,
    )
    atomic_write_text(
        record_dir / "results.md",
        _markdown(experiment, table, signature, groups, not_run, missing, out_of_date),
    )
    return results


def _markdown(
    experiment: Experiment,
    table: list[dict],
    signature: str,
    groups: list[str],
    not_run: list[RunSpec],
    missing: list[str],
    out_of_date: list[str],
) -> str:
    lines = [
        f"# {experiment.name}",
        "",
        experiment.description,
        "",
        f"sacreBLEU signature: `{signature}`. The interval is the 95% paired-bootstrap interval "
        "of the "
        "median seed (1,000 resamples); p is the paired bootstrap against the baseline's median "
        "seed "
        "(the fraction of resamples where the run is not better).",
        "",
    ]
    if missing:
        lines += [
            f"**Campaign under way**: {len(missing)} planned runs have no record yet "
            f"({', '.join(missing)}); the table shows the runs finished so far.",
            "",
        ]
        lines += _out_of_date_lines(out_of_date)
    header = (
        "| run | params (M) | seeds | sacreBLEU mean ± std | median seed: sacreBLEU [95% CI] | "
        "chrF | p vs baseline | train src tok/s (padded) | beam sent/s | steps | train min |"
    )
    for group in groups:
        lines += [f"## {group}", "", header, "|" + "---|" * 11]
        for row in (row for row in table if row["group"] == group):
            spread = f" ± {row['sacrebleu_std']:.2f}" if row["sacrebleu_std"] is not None else ""
            low, high = row["sacrebleu_interval"]["low"], row["sacrebleu_interval"]["high"]
            p_value = (
                f"{row['p_value_vs_baseline']:.3f} ({row['baseline']})"
                if row["p_value_vs_baseline"] is not None
                else f"no record of {row['baseline']} yet"
                if row["baseline"]
                else "baseline"
            )
            seeds = (
                f"{len(row['seeds'])}"
                if len(row["seeds"]) == len(row["seeds_planned"])
                else f"{len(row['seeds'])} of {len(row['seeds_planned'])}"
            )
            lines.append(
                f"| {row['run']} | {row['parameters'] / 1e6:.2f} | {seeds} | "
                f"{row['sacrebleu_mean']:.2f}{spread} | {row['sacrebleu']:.2f} [{low:.2f}, "
                f"{high:.2f}] | {row['chrf']:.2f} | {p_value} | "
                f"{row['train_source_tokens_per_second'] or 0:,.0f} | "
                f"{row['beam_sentences_per_second']:.1f} | {row['steps']} | "
                f"{row['wall_minutes']:.1f} |"
            )
        for run in (run for run in not_run if run.group == group):
            lines.append(f"| {run.name} | not run yet |" + " |" * 9)
        if any(row["group"] == group for row in table):
            lines += ["", f"![learning curves](learning_curves_{group}.png)"]
        lines.append("")
    lines += ["![test BLEU](test_bleu.png)", ""]
    return "\n".join(lines)


def write_multilingual_table(
    experiment: Experiment, record_dir: str | os.PathLike, allow_missing: bool = False
) -> dict:
    """results.md and results.json of a multilingual experiment: Xu et al. 2024, Table 7 over the
    runs (one row per run and seed: averages out of / into English and zero-shot, subset, win
    ratios, off-target, pivot), what each cost (a fine-tuning stage: its own time, ROBT's share of
    it, and the total with the run it continues), and each run's per-direction table against its
    baseline (paired-bootstrap p-values)."""
    record_dir = Path(record_dir)
    records, missing, out_of_date = _current_records(experiment, record_dir, allow_missing)
    costs = {run_id: _cost(record, records) for run_id, record in records.items()}
    lines = [f"# {experiment.name}", "", experiment.description, ""]
    if missing:
        lines += [
            f"**Campaign under way**: {len(missing)} planned runs have no record yet ("
            f"{', '.join(missing)}).",
            "",
        ]
        lines += _out_of_date_lines(out_of_date)
    lines += [
        "## Xu et al. 2024, Table 7",
        "",
        *systems_table({run_id: record["test"] for run_id, record in records.items()}),
        "",
        "sacreBLEU averages; WR: win ratio against the run's baseline (directions where it "
        "scores higher); off-target: share of zero-shot outputs not in the target language "
        "(py3langid); pivot: X -> en -> Y with the same model.",
        "",
        "## Cost",
        "",
        "| run | from | params (M) | steps | train min | ROBT min (share) | min with the run it "
        "continues |",
        "|---|---|---|---|---|---|---|",
    ]
    for run_id, cost in costs.items():
        robt = (
            f"{cost['robt_seconds'] / 60:.1f} ({cost['robt_share']:.0%})"
            if cost["robt_seconds"]
            else "-"
        )
        lines.append(
            f"| {run_id} | {cost['from'] or '-'} | {cost['parameters'] / 1e6:.2f} | "
            f"{cost['steps']} | {cost['train_seconds'] / 60:.1f} | {robt} | "
            f"{cost['total_seconds'] / 60:.1f} |"
        )
    for run_id, record in records.items():
        baseline = record["test"].get("win_ratio", {}).get("baseline")
        baseline_id = next(
            (other for other in records if baseline and Path(baseline).parent.parent.name == other),
            None,
        )
        title = f"## {run_id}" + (f" against {baseline_id}" if baseline_id else "")
        lines += [
            "",
            title,
            "",
            *results_table(record["test"], records[baseline_id]["test"] if baseline_id else None),
        ]
    results = {
        "experiment": experiment.name,
        "description": experiment.description,
        "data": experiment.data,
        "evaluation": experiment.evaluation,
        "not_run_yet": missing,
        "out_of_date": out_of_date,
        "rows": [
            {
                "run_id": run_id,
                **costs[run_id],
                "averages": record["test"]["averages"],
                "win_ratio": record["test"].get("win_ratio"),
                "sacrebleu_signature": next(iter(record["test"]["directions"].values()))[
                    "sacrebleu_signature"
                ],
            }
            for run_id, record in records.items()
        ],
    }
    atomic_write_json(record_dir / "results.json", results)
    atomic_write_text(record_dir / "results.md", "\n".join(lines) + "\n")
    for group in dict.fromkeys(run.group for run in experiment.runs):
        histories = {
            run_id: record["history"]
            for run_id, record in records.items()
            if record["info"]["group"] == group
            and any("eval_loss" in entry for entry in record["history"])
        }
        if histories:
            plot_training(
                histories,
                record_dir / f"learning_curves_{group}.png",
                title=(
                    f"{experiment.name}: {group} (validation loss, mean over the training "
                    "directions)"
                ),
            )
    if any(record["test"]["averages"].get("zero_shot") for record in records.values()):
        plot_zero_shot(
            {
                run_id: record["test"]["averages"]["zero_shot"]
                for run_id, record in records.items()
                if record["test"]["averages"].get("zero_shot")
            },
            record_dir / "zero_shot.png",
            title=f"{experiment.name}: zero-shot directions, {experiment.data['test_split']}",
        )
    return results


def _current_records(
    experiment: Experiment, record_dir: Path, allow_missing: bool
) -> tuple[dict, list, list]:
    """The records that agree with the experiment as it is now, by run id; the run ids without one
    (no record, or a record of other settings); and those out of date, with the settings that
    changed. Without `allow_missing` a missing or out-of-date record is an error."""
    records, missing, out_of_date = {}, [], []
    for run in experiment.runs:
        for seed, run_id in zip(run.seeds, run.run_ids()):
            record = read_record(record_dir, run_id) if has_record(record_dir, run_id) else None
            changed = record_changes(experiment, run, seed, record) if record is not None else None
            if record is None or changed:
                missing.append(run_id)
                if changed:
                    out_of_date.append(f"{run_id} ({', '.join(changed)})")
            else:
                records[run_id] = record
    if out_of_date and not allow_missing:
        raise ValueError(
            f"{record_dir}: the record of {'; '.join(out_of_date)} was made with other settings "
            "than "
            f"{experiment.name}'s experiment file has now; run the campaign again to redo it, or "
            "ask for "
            "the table so far (allow_missing, --table_so_far), which leaves it out."
        )
    if missing and not allow_missing:
        raise FileNotFoundError(
            f"{record_dir}: no record yet for {', '.join(missing)}; run the campaign first, or ask "
            "for the table so far (allow_missing, --table_so_far)."
        )
    if not records:
        raise FileNotFoundError(
            f"{record_dir}: no run of {experiment.name} has a record yet; nothing to tabulate."
        )
    return records, missing, out_of_date


def _out_of_date_lines(out_of_date: list[str]) -> list[str]:
    if not out_of_date:
        return []
    return [
        f"**Left out**: the records of {'; '.join(out_of_date)} were made with other settings "
        "than the "
        "experiment file has now; the campaign runs them again.",
        "",
    ]


def _cost(record: dict, records: dict) -> dict:
    """What a run cost: its training time, ROBT's part of it, and with the runs it continues (found
    by record)."""
    info = record["info"]
    seconds, total, parent = (
        info["training_wall_seconds"],
        info["training_wall_seconds"],
        info.get("from"),
    )
    while parent:
        parent_id = f"{parent}-seed{info['seed']}"
        total += (
            records[parent_id]["info"]["training_wall_seconds"]
            if parent_id in records
            else float("nan")
        )
        parent = records[parent_id]["info"].get("from") if parent_id in records else None
    robt = info.get("robt_seconds") or 0.0
    return {
        "run": info["run"],
        "seed": info["seed"],
        "from": info.get("from"),
        "parameters": info["parameters"],
        "steps": info["steps"],
        "train_seconds": round(seconds, 2),
        "robt_seconds": round(robt, 2),
        "robt_share": round(robt / seconds, 4) if seconds else 0.0,
        "total_seconds": round(total, 2),
    }


def _robt_seconds(log_history: list[dict]) -> float:
    """Seconds a run spent on ROBT's back-translation: each training log's per-update time times its
    updates."""
    seconds, previous = 0.0, 0
    for entry in log_history:
        if "loss" in entry and "step" in entry:
            seconds += entry.get("robt_seconds_per_update", 0.0) * (entry["step"] - previous)
            previous = entry["step"]
    return round(seconds, 2)


def _references(experiment: Experiment) -> list[str]:
    data = experiment.data
    pairs = load_parallel_corpus(
        data["dataset"], data["source_lang"], data["target_lang"], data["test_split"]
    )
    return [pair[data["target_lang"]] for pair in pairs["translation"]]


def _staged(command: list[str], output: Path, environment: dict, what: str, log: Path, then=None):
    """Run a stage that writes `--output_dir` into a staging folder, then rename it: whole or
    absent. `then(staging)` adds to the folder before it is renamed."""
    with atomic_directory(output, replace=True) as staging:
        staged = [str(staging) if part == str(output) else part for part in command]
        if "--output_dir" not in command:
            staged += ["--output_dir", str(staging)]
        _run(staged, environment, log, what)
        if then is not None:
            then(staging)


class StageFailed(RuntimeError):
    """A stage (a script run in its own process) failed; the message names its log and quotes its
    last lines."""


def _run(command: list[str], environment: dict, log: Path, what: str):
    log.parent.mkdir(parents=True, exist_ok=True)
    logger.info("%s: %s", what, " ".join(_quote(part) for part in command))
    with open(log, "a", encoding="utf-8") as output:
        completed = subprocess.run(
            command, stdout=output, stderr=subprocess.STDOUT, env=environment, check=False
        )
    if completed.returncode != 0:
        tail = "".join(
            log.read_text(encoding="utf-8", errors="replace").splitlines(keepends=True)[-15:]
        )
        raise StageFailed(
            f"{what} failed (exit {completed.returncode}); its log is {log}. Command:\n"
            f"{' '.join(_quote(part) for part in command)}\nLast lines:\n{tail}"
        )


def _flags(settings: dict) -> list[str]:
    flags = []
    for key, value in settings.items():
        flags += [f"--{key}", json.dumps(value) if isinstance(value, bool) else str(value)]
    return flags


def start_run_from_checkpoints(
    sources: list[str | os.PathLike], train_dir: str | os.PathLike, arguments: dict
) -> list[Path]:
    """Give a run of one experiment the checkpoints of a run of another, so the runner resumes it
    there instead of training it from the start: e.g. a study on val that continues a campaign's
    run, or a deeper schedule that continues a shorter one (with an inverse-square-root or constant
    schedule, which do not depend on max_steps, the resumed run passes through the state an
    uninterrupted one would).

    `sources` are checkpoint-N folders of one run, copied into `train_dir` (a folder that must not
    exist yet); or a finished run's training folder (with train_results.json), copied whole, so the
    runner averages and evaluates it without training. In every copied checkpoint, `arguments`
    replace the values its run_arguments.json records (the settings that resuming compares, e.g.
    `model_name_or_path` and `tokenizer_name_or_path`, which name the other experiment's files), and
    its checksums are recorded again. The settings left are compared when the run resumes, so a
    checkpoint of another model or schedule is refused there. Returns the copied checkpoints.
    """
    train_dir = Path(train_dir)
    if train_dir.exists():
        raise ValueError(
            f"{train_dir} exists: that run has been started already. Remove it to start it from "
            "these "
            "checkpoints (nothing is overwritten)."
        )
    sources = [Path(source) for source in sources]
    finished = len(sources) == 1 and (sources[0] / "train_results.json").is_file()
    if finished:
        verify_checksums(sources[0], required=True)
        checkpoints = complete_checkpoints(sources[0])
    else:
        checkpoints = sources
    if not checkpoints:
        raise ValueError(
            f"No checkpoint to start the run from in {[str(source) for source in sources]}."
        )
    if len({checkpoint.name for checkpoint in checkpoints}) != len(checkpoints):
        raise ValueError(
            f"Two of the checkpoints have the same name ({[str(path) for path in checkpoints]}); "
            "name "
            "checkpoints of one run."
        )
    for checkpoint in checkpoints:
        if (
            not (checkpoint / "trainer_state.json").is_file()
            or not (checkpoint / RUN_ARGUMENTS_NAME).is_file()
        ):
            raise ValueError(
                f"{checkpoint} is neither a complete checkpoint of train_translation.py (with "
                f"trainer_state.json and {RUN_ARGUMENTS_NAME}) nor a finished run's training "
                "folder (with "
                "train_results.json); name checkpoint-N folders, or one finished run."
            )
        # a damaged copy would fail only when the run resumes
        verify_checksums(checkpoint, required=True)
        recorded = json.loads((checkpoint / RUN_ARGUMENTS_NAME).read_text(encoding="utf-8"))
        unknown = sorted(set(arguments) - set(recorded))
        if unknown:
            raise ValueError(
                f"{checkpoint / RUN_ARGUMENTS_NAME} records no {unknown}; the settings it "
                f"records are {sorted(recorded)}."
            )
    with atomic_directory(train_dir) as staging:  # the runner never sees a half-copied run
        if finished:
            shutil.rmtree(staging)
            shutil.copytree(sources[0], staging)
        for checkpoint in checkpoints:
            copy = staging / checkpoint.name
            if not finished:
                shutil.copytree(checkpoint, copy)
            recorded = json.loads((copy / RUN_ARGUMENTS_NAME).read_text(encoding="utf-8"))
            atomic_write_json(copy / RUN_ARGUMENTS_NAME, {**recorded, **arguments})
            record_saved_folder(copy)
    return [train_dir / checkpoint.name for checkpoint in checkpoints]


def _checkpoints(train_dir: Path) -> list[Path]:
    return complete_checkpoints(train_dir) if train_dir.is_dir() else []


def _parameter_count(model_dir: Path) -> int:
    """Parameters stored in the model's safetensors file (tied weights are stored once, as
    `num_parameters()`)."""
    with safe_open(str(model_dir / "model.safetensors"), framework="pt") as weights:
        return sum(math.prod(weights.get_slice(name).get_shape()) for name in weights.keys())


RUN_NAME = re.compile(r"[A-Za-z0-9._-]+")


def _check_objects(mapping: dict, keys: tuple[str, ...], where: str):
    for key in keys:
        if key in mapping and not isinstance(mapping[key], dict):
            raise ValueError(
                f"{where}: `{key}` must be a JSON object of settings, got {mapping[key]!r}."
            )


def _check_keys(mapping, allowed: set, required: set, where: str):
    if not isinstance(mapping, dict):
        raise ValueError(f"{where} must be a JSON object.")
    unknown, missing = sorted(set(mapping) - allowed), sorted(required - set(mapping))
    if unknown:
        raise ValueError(f"{where}: unknown keys {unknown}; allowed: {sorted(allowed)}.")
    if missing:
        raise ValueError(f"{where}: missing keys {missing}.")


def _looks_like_hub_id(dataset: str) -> bool:
    return dataset in ("wmt14", "wmt15", "opus100") or (
        dataset.count("/") == 1 and not dataset.startswith(".")
    )


def _git_commit() -> str | None:
    try:
        return subprocess.run(
            ["git", "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
            cwd=SCRIPTS.parent,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def _quote(part: str) -> str:
    return part if part and all(c.isalnum() or c in "-_./=:,+" for c in part) else json.dumps(part)
