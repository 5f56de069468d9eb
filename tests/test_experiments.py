"""The results runner end to end on a tiny experiment (two members, four updates), its skip / resume
behaviour and the table it writes; the experiment-file checks; the two plotting functions."""

import gzip
import json
import shutil
from pathlib import Path

import matplotlib.axes
import matplotlib.image
import pytest
from conftest import MULTI30K, run_script

from nmt_toolkit.lab.experiments import (
    hypotheses,
    load_experiment,
    read_record,
    record_history,
    run_experiments,
    start_run_from_checkpoints,
    write_results_table,
)
from nmt_toolkit.lab.plotting import (
    plot_bleu_intervals,
    plot_training,
    plot_zero_shot,
    read_log_history,
)
from nmt_toolkit.quickstart_corpus import write_corpus

HUB_CONFIGS = Path(__file__).resolve().parents[1] / "hub_configs"
TINY_MODEL = {
    "d_model": 16,
    "encoder_attention_heads": 2,
    "decoder_attention_heads": 2,
    "ffn_dim": 32,
    "encoder_layers": 1,
    "decoder_layers": 1,
    "dropout": 0.0,
    "max_position_embeddings": 64,
}


def tiny_experiment(folder: Path, **changes) -> Path:
    corpus = write_corpus(folder / "corpus", splits={"train": 60, "valid": 8, "test": 8}, seed=3)
    spec = {
        "name": "tiny",
        "description": "Two members, four updates.",
        "data": {
            "dataset": "corpus",
            "source_lang": "en",
            "target_lang": "de",
            "validation_split": "valid",
        },
        "tokenizer": {"merges": 60, "min_frequency": 1},
        "model": TINY_MODEL,
        "training": {
            "max_steps": 4,
            "max_tokens": 256,
            "learning_rate": 0.001,
            "warmup_steps": 1,
            "save_steps": 2,
            "eval_steps": 2,
            "logging_steps": 2,
            "save_total_limit": 2,
        },
        "average_last": 2,
        "evaluation": {"num_beams": 2, "max_new_tokens": 6},
        "baseline": "residual",
        "runs": [
            {"name": "dwlstm", "config": str(HUB_CONFIGS / "dwlstm-base-6l.json")},
            {"name": "residual", "config": str(HUB_CONFIGS / "residual-prenorm-base-6l.json")},
        ],
        **changes,
    }
    assert corpus == folder / "corpus"
    path = folder / "experiment.json"
    path.write_text(json.dumps(spec))
    return path


def test_runner_trains_evaluates_tabulates_skips_and_resumes(tmp_path):
    experiment = tiny_experiment(tmp_path)
    output, record = tmp_path / "runs", tmp_path / "record"
    done = run_experiments(experiment, output_dir=output, record_dir=record, threads=1)
    assert [line.split(" (")[0] for line in done[:-1]] == [
        f"tokenizer {record / 'tokenizer'}",
        "train dwlstm-seed1",
        "average dwlstm-seed1",
        "evaluate dwlstm-seed1",
        "record dwlstm-seed1",
        "train residual-seed1",
        "average residual-seed1",
        "evaluate residual-seed1",
        "record residual-seed1",
    ]
    assert done[-1] == f"table {record / 'results.md'}"

    results = json.loads((record / "results.json").read_text())
    rows = {row["run"]: row for row in results["rows"]}
    assert (
        rows["dwlstm"]["model_type"] == "dwlstm"
        and rows["residual"]["model_type"] == "dwlstm-residual"
    )
    assert (
        rows["dwlstm"]["baseline"] == "residual"
        and 0.0 <= rows["dwlstm"]["p_value_vs_baseline"] <= 1.0
    )
    assert rows["residual"]["baseline"] is None  # the baseline is not compared with itself
    for row in rows.values():
        assert (
            row["steps"] == 4
            and row["parameters"] > 0
            and row["train_source_tokens_per_second"] > 0
        )
        assert (
            row["sacrebleu_interval"]["low"]
            <= row["sacrebleu"]
            <= row["sacrebleu_interval"]["high"]
        )
    table = (record / "results.md").read_text()
    assert (
        "| dwlstm |" in table
        and "| residual |" in table
        and results["sacrebleu_signature"] in table
    )
    assert (record / "learning_curves_main.png").stat().st_size > 0 and (
        record / "test_bleu.png"
    ).stat().st_size > 0
    # One packed file per run holds what the table re-scores: the hypotheses, exactly as the
    # evaluation wrote them.
    assert sorted(path.name for path in (record / "records").iterdir()) == [
        "dwlstm-seed1.json.gz",
        "residual-seed1.json.gz",
    ]
    packed = read_record(record, "dwlstm-seed1")
    info, history = packed["info"], packed["history"]
    assert (
        info["seed"] == 1 and "--seed 1" in info["commands"]["train"] and info["packages"]["torch"]
    )
    assert [entry["step"] for entry in history if "eval_loss" in entry] == [2, 4]
    assert all(entry["wall_time"] > 0 for entry in history)
    evaluated = output / "dwlstm-seed1" / "test"
    assert (
        hypotheses(packed)
        == (evaluated / "hypotheses.txt").read_text(encoding="utf-8").splitlines()
    )
    assert packed["test"] == json.loads((evaluated / "results.json").read_text())
    assert len(hypotheses(packed)) == 8

    # Everything is recorded: a second call does nothing and changes nothing.
    stamps = {path: path.stat().st_mtime_ns for path in record.rglob("*")}
    assert run_experiments(experiment, output_dir=output, record_dir=record, threads=1) == [
        "skip dwlstm-seed1",
        "skip residual-seed1",
    ]
    assert {path: path.stat().st_mtime_ns for path in record.rglob("*")} == stamps

    # A run interrupted after its step-2 checkpoint (no record, no final model, no checkpoint-4)
    # resumes there.
    train = output / "residual-seed1" / "train"
    (record / "records" / "residual-seed1.json.gz").unlink()
    # The table so far: the finished run, the missing one listed as not run yet, no p-value without
    # a baseline.
    done = run_experiments(
        experiment, output_dir=output, record_dir=record, only=["dwlstm"], table_so_far=True
    )
    assert done == [
        "skip dwlstm-seed1",
        f"table so far {record / 'results.md'} (1 runs have no record yet)",
    ]
    table = (record / "results.md").read_text()
    assert "no record yet (residual-seed1)" in table and "| residual | not run yet |" in table
    assert "no record of residual yet" in table
    assert json.loads((record / "results.json").read_text())["not_run_yet"] == ["residual-seed1"]
    with pytest.raises(FileNotFoundError, match="no record yet for residual-seed1"):
        write_results_table(load_experiment(experiment), record)
    shutil.rmtree(output / "residual-seed1" / "averaged")
    shutil.rmtree(output / "residual-seed1" / "test")
    shutil.rmtree(train / "checkpoint-4")
    for name in ("train_results.json", "trainer_state.json", "model.safetensors", "checksums.json"):
        (train / name).unlink()
    done = run_experiments(experiment, output_dir=output, record_dir=record, threads=1)
    assert [line.split(" (")[0] for line in done] == [
        "skip dwlstm-seed1",
        "train residual-seed1",
        "average residual-seed1",
        "evaluate residual-seed1",
        "record residual-seed1",
        f"table {record / 'results.md'}",
    ]
    assert done[1] == "train residual-seed1 (resumed from checkpoint-2)"
    assert read_record(record, "residual-seed1")["info"]["steps"] == 4
    history = read_log_history(train)
    assert [entry["step"] for entry in history if "eval_loss" in entry] == [2, 4]
    wall = [entry["wall_time"] for entry in history]
    assert wall == sorted(wall)  # the resumed part continues the clock


@pytest.mark.parametrize(
    "change, message",
    [
        ({"runs": [{"name": "a", "config": "missing.json"}]}, "no config file"),
        (
            {"runs": [{"name": "a", "config": str(HUB_CONFIGS / "dwlstm-base-6l.json")}] * 2},
            "two runs are named 'a'",
        ),
        (
            {
                "runs": [
                    {
                        "name": "a",
                        "config": str(HUB_CONFIGS / "dwlstm-base-6l.json"),
                        "baseline": "b",
                    }
                ]
            },
            "compares against 'b'",
        ),
        (
            {
                "runs": [
                    {"name": "a", "config": str(HUB_CONFIGS / "dwlstm-base-6l.json"), "seed": [1]}
                ]
            },
            "unknown keys ['seed']",
        ),
        (
            {
                "runs": [
                    {"name": "a", "config": str(HUB_CONFIGS / "dwlstm-base-6l.json"), "seeds": []}
                ]
            },
            "non-empty list",
        ),
        (
            {"data": {"dataset": "no-such-folder", "source_lang": "en", "target_lang": "de"}},
            "neither a file or folder",
        ),
        ({"average_last": 0}, "`average_last` must be a positive integer"),
        (
            {
                "runs": [{"name": "a", "config": str(HUB_CONFIGS / "dwlstm-base-6l.json")}],
                "baseline": "b",
            },
            "compares against",
        ),
    ],
)
def test_bad_experiment_files_are_named(tmp_path, change, message):
    spec = json.loads(tiny_experiment(tmp_path).read_text())
    (tmp_path / "bad.json").write_text(json.dumps({**spec, **change}))
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        load_experiment(tmp_path / "bad.json")


def test_only_names_known_runs(tmp_path):
    with pytest.raises(ValueError, match="not in"):
        run_experiments(
            tiny_experiment(tmp_path),
            output_dir=tmp_path / "o",
            record_dir=tmp_path / "r",
            only=["x"],
        )


def test_the_campaign_file_loads():
    experiment = load_experiment(
        Path(__file__).resolve().parents[1] / "experiments" / "multi30k-en-de" / "experiment.json"
    )
    assert {run.group for run in experiment.runs} == {"main", "family", "precision", "depth"}
    assert experiment.run("dwlstm-bf16").training["bf16"] is True
    assert experiment.run("dwlstm").seeds == [1, 2, 3] and experiment.run(
        "residual-prenorm"
    ).seeds == [1, 2, 3]
    assert (
        experiment.run("dwlstm-12l").model["encoder_layers"] == 12
        and experiment.run("dwlstm-12l").model["d_model"] == 128
    )


def test_plots_write_pictures_and_reject_runs_without_validation(tmp_path):
    histories = {
        "a": [
            {"step": 2, "eval_loss": 5.0, "wall_time": 30.0},
            {"step": 4, "eval_loss": 4.0, "wall_time": 60.0},
        ],
        "b": [
            {"step": 2, "eval_loss": 5.5, "wall_time": 20.0},
            {"step": 4, "eval_loss": 4.8, "wall_time": 41.0},
        ],
    }
    curves = plot_training(histories, tmp_path / "curves.png", title="t")
    bars = plot_bleu_intervals(
        {"a": (20.0, {"low": 19.0, "high": 21.5}), "b": (18.0, {"low": 17.1, "high": 19.0})},
        tmp_path / "bleu.png",
    )
    for picture in (curves, bars):
        height, width, _ = matplotlib.image.imread(picture).shape
        assert height > 300 and width > 400
    with pytest.raises(ValueError, match="no validation loss"):
        plot_training({"c": [{"step": 2, "loss": 3.0}]}, tmp_path / "x.png")


def tiny_multilingual_experiment(folder: Path, **changes) -> Path:
    """`tiny_experiment`'s splits with three languages of Multi30k (60 training, 8 validation and 8
    test sentences), four training directions, two zero-shot ones; the Table 7 baseline, and that
    model fine-tuned with ROBT, compared with it."""
    path = tiny_experiment(
        folder,
        name="tiny-m2m",
        description="Four directions, two zero-shot ones, two updates.",
        data={
            "dataset": "corpus",
            "language_pairs": "en-de,de-en,en-fr,fr-en",
            "validation_split": "valid",
            "test_split": "test",
        },
        tokenizer={"merges": 300, "min_frequency": 1},
        model={**TINY_MODEL, "max_position_embeddings": 256},
        training={
            "max_steps": 2,
            "max_tokens": 256,
            "learning_rate": 0.001,
            "warmup_steps": 1,
            "save_steps": 2,
            "eval_steps": 2,
            "logging_steps": 1,
            "save_total_limit": 1,
            "max_validation_pairs": 2,
            "sampling_temperature": 5,
        },
        average_last=1,
        evaluation={
            "num_beams": 1,
            "max_new_tokens": 5,
            "language_pairs": "en-de,de-en,en-fr,fr-en,de-fr,fr-de",
            "pivot": "en",
            "average_subset": "en-de,de-en",
            "bootstrap_samples": 20,
        },
        baseline="laln-lalt",
        runs=[
            {
                "name": "laln-lalt",
                "config": str(HUB_CONFIGS / "residual-prenorm-base-6l.json"),
                "model": {"language_aware_norm": True, "language_aware_transform": True},
            },
            {
                "name": "robt",
                "from": "laln-lalt",
                "training": {"robt": 1.0, "max_steps": 1, "save_steps": 1},
            },
        ],
        **changes,
    )
    for split, source, count in (
        ("train", "train", 60),
        ("valid", "val", 8),
        ("test", "test_2016_flickr", 8),
    ):
        # Multi30k's lines in place of the generated en-de corpus
        for language in ("en", "de", "fr"):
            with gzip.open(MULTI30K / f"{source}.{language}.gz", "rt", encoding="utf-8") as lines:
                (folder / "corpus" / f"{split}.{language}").write_text(
                    "".join(next(lines) for _ in range(count)), encoding="utf-8"
                )
    return path


def test_multilingual_campaign_with_a_fine_tuning_stage(tmp_path):
    experiment = tiny_multilingual_experiment(tmp_path)
    output, record = tmp_path / "runs", tmp_path / "record"
    done = run_experiments(experiment, output_dir=output, record_dir=record, threads=1)
    assert [line.split(" (")[0] for line in done] == [
        f"tokenizer {record / 'tokenizer'}",
        *(
            f"{stage} {run}-seed1"
            for run in ("laln-lalt", "robt")
            for stage in ("train", "average", "evaluate", "record")
        ),
        f"table {record / 'results.md'}",
    ]
    robt = read_record(record, "robt-seed1")["info"]
    assert robt["from"] == "laln-lalt" and robt["steps"] == 1 and robt["robt_seconds"] > 0
    assert (
        f"--model_name_or_path {output / 'laln-lalt-seed1' / 'averaged'}"
        in robt["commands"]["train"]
    )
    assert (
        "--robt 1.0" in robt["commands"]["train"]
        and "--config_overrides" not in robt["commands"]["train"]
    )
    laln_lalt = read_record(record, "laln-lalt-seed1")
    assert (
        "language_aware_norm=True,language_aware_transform=True"
        in laln_lalt["info"]["commands"]["train"]
    )
    # Every direction's translations (and the zero-shot directions' pivot translations) are packed
    # with the run.
    packed = read_record(record, "robt-seed1")
    evaluated = output / "robt-seed1" / "test"
    assert {"test/de-fr/pivot_hypotheses.txt", "test/en-de/hypotheses.txt"} <= set(packed["files"])
    assert (
        hypotheses(packed, "de-fr")
        == (evaluated / "de-fr" / "hypotheses.txt").read_text().splitlines()
    )
    with pytest.raises(KeyError, match="has no test/xx-yy/hypotheses.txt"):
        hypotheses(packed, "xx-yy")
    # Each direction's validation loss is kept, and their mean is the run's curve.
    validation = [entry for entry in laln_lalt["history"] if "eval_loss" in entry]
    assert [entry["step"] for entry in validation] == [2]
    losses = [validation[0][f"eval_{pair}_loss"] for pair in ("en-de", "de-en", "en-fr", "fr-en")]
    assert validation[0]["eval_loss"] == pytest.approx(sum(losses) / 4, abs=1e-4)
    assert (record / "learning_curves_main.png").stat().st_size > 0 and (
        record / "zero_shot.png"
    ).stat().st_size > 0

    results = json.loads((record / "results.json").read_text())
    rows = {row["run_id"]: row for row in results["rows"]}
    assert rows["laln-lalt-seed1"]["win_ratio"] is None  # the baseline is not compared with itself
    assert rows["robt-seed1"]["win_ratio"]["baseline"] == str(
        output / "laln-lalt-seed1" / "test" / "results.json"
    )
    assert set(rows["robt-seed1"]["win_ratio"]["groups"]) == {
        "out_of_english",
        "into_english",
        "zero_shot",
        "subset",
    }
    assert rows["robt-seed1"]["total_seconds"] > rows["robt-seed1"]["train_seconds"] > 0
    assert 0 < rows["robt-seed1"]["robt_seconds"] <= rows["robt-seed1"]["train_seconds"]
    assert "pivot_sacrebleu" in rows["robt-seed1"]["averages"]["zero_shot"]
    table = (record / "results.md").read_text()
    assert "## Xu et al. 2024, Table 7" in table and "| robt-seed1 | laln-lalt |" in table
    assert "## robt-seed1 against laln-lalt-seed1" in table and "p (bootstrap)" in table
    assert run_experiments(experiment, output_dir=output, record_dir=record, threads=1) == [
        "skip laln-lalt-seed1",
        "skip robt-seed1",
    ]


@pytest.mark.parametrize(
    "runs, message",
    [
        (
            [{"name": "b", "from": "a"}, {"name": "a", "config": "c.json"}],
            "starts from 'a', which is not a run listed before",
        ),
        (
            [{"name": "a", "config": "c.json"}, {"name": "b", "from": "a", "config": "c.json"}],
            "takes no `config` or `model`",
        ),
        (
            [
                {"name": "a", "config": "c.json", "seeds": [1]},
                {"name": "b", "from": "a", "seeds": [2]},
            ],
            "has not all its seeds",
        ),
        (
            [{"name": "a", "config": "c.json", "baseline": "b"}, {"name": "b", "config": "c.json"}],
            "list 'b' before it",
        ),
    ],
)
def test_bad_multilingual_experiment_files_are_named(tmp_path, runs, message):
    spec = json.loads(tiny_multilingual_experiment(tmp_path).read_text())
    (tmp_path / "c.json").write_text((HUB_CONFIGS / "dwlstm-base-6l.json").read_text())
    (tmp_path / "bad.json").write_text(json.dumps({**spec, "baseline": None, "runs": runs}))
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        load_experiment(tmp_path / "bad.json")


def test_a_multilingual_experiment_naming_one_direction_too_is_refused(tmp_path):
    spec = json.loads(tiny_multilingual_experiment(tmp_path).read_text())
    (tmp_path / "bad.json").write_text(
        json.dumps({**spec, "data": {**spec["data"], "source_lang": "en"}})
    )
    with pytest.raises(ValueError, match="give one or the other"):
        load_experiment(tmp_path / "bad.json")


def test_the_multilingual_campaign_file_loads():
    experiment = load_experiment(
        Path(__file__).resolve().parents[1]
        / "experiments"
        / "multi30k-multilingual"
        / "experiment.json"
    )
    assert experiment.multilingual and experiment.direction_flags() == [
        "--language_pairs",
        "en-de,de-en,en-fr,fr-en,en-cs,cs-en",
    ]
    assert Path(experiment.data["dataset"]).name == "multi30k"
    names = [run.name for run in experiment.runs]
    assert names[0] == "residual-prenorm-laln-lalt" == experiment.run("dwlstm").baseline
    assert experiment.run("dwlstm-laln-lalt").model["language_aware_norm"] is True
    for run in experiment.runs[4:]:
        assert run.parent in names[:4] and run.training["robt"] == 1.0 and run.model == {}
        assert run.baseline == "residual-prenorm-laln-lalt-robt" and run.group == "robt"
    zero_shot = {f"{s}-{t}" for s in ("de", "fr", "cs") for t in ("de", "fr", "cs") if s != t}
    assert (
        zero_shot <= set(experiment.evaluation["language_pairs"].split(","))
        and experiment.evaluation["pivot"] == "en"
    )


def test_the_bleu_picture_names_the_split_it_scored(tmp_path, monkeypatch):
    """A campaign tuned on val evaluates on val: its picture must not call the scores test
    scores."""
    labels = []
    set_ylabel = matplotlib.axes.Axes.set_ylabel
    monkeypatch.setattr(
        matplotlib.axes.Axes,
        "set_ylabel",
        lambda axis, label, **kwargs: labels.append(label) or set_ylabel(axis, label, **kwargs),
    )
    plot_bleu_intervals(
        {"a": (20.0, {"low": 19.0, "high": 21.5})}, tmp_path / "val.png", split="val"
    )
    plot_bleu_intervals({"a": (20.0, {"low": 19.0, "high": 21.5})}, tmp_path / "test.png")
    assert labels == [
        "val sacreBLEU\n(95% bootstrap interval)",
        "test sacreBLEU\n(95% bootstrap interval)",
    ]


@pytest.mark.parametrize(
    "path",
    sorted((Path(__file__).resolve().parents[1] / "experiments").glob("*/experiment.json")),
    ids=lambda path: path.parent.name,
)
def test_every_experiment_file_loads(path):
    """Each campaign file in experiments/ passes the runner's checks (its configs exist, its
    baselines and stages name runs it lists), so a campaign started from it does not stop at its
    first or last run."""
    experiment = load_experiment(path)
    assert experiment.runs and all((run.config or run.parent) for run in experiment.runs)
    assert all(
        run.baseline in {other.name for other in experiment.runs}
        for run in experiment.runs
        if run.baseline
    )


def test_a_run_started_from_another_experiments_checkpoint_resumes_there(tmp_path):
    """start_run_from_checkpoints: experiment B's run continues experiment A's from its step-2
    checkpoint and ends where A's uninterrupted run ended (same validation losses, same
    translations)."""
    experiment_a = tiny_experiment(
        tmp_path,
        runs=[{"name": "residual", "config": str(HUB_CONFIGS / "residual-prenorm-base-6l.json")}],
    )
    experiment_b = tmp_path / "experiment-b.json"
    experiment_b.write_text(json.dumps({**json.loads(experiment_a.read_text()), "name": "tiny-b"}))
    run_experiments(
        experiment_a, output_dir=tmp_path / "runs-a", record_dir=tmp_path / "record-a", threads=1
    )
    train_a = tmp_path / "runs-a" / "residual-seed1" / "train"
    train_b = tmp_path / "runs-b" / "residual-seed1" / "train"
    tokenizer_b = str(tmp_path / "record-b" / "tokenizer")

    with pytest.raises(ValueError, match=r"records no \['no_such_setting'\]"):
        start_run_from_checkpoints([train_a / "checkpoint-2"], train_b, {"no_such_setting": 1})
    with pytest.raises(ValueError, match="is neither a complete checkpoint"):
        start_run_from_checkpoints([tmp_path / "corpus"], train_b, {})
    assert not train_b.exists()  # a refused start leaves nothing behind
    run_script(
        "start_run_from_checkpoints",
        "--checkpoints",
        train_a / "checkpoint-2",
        "--train_dir",
        train_b,
        "--set",
        f"tokenizer_name_or_path={tokenizer_b}",
    )
    assert [path.name for path in train_b.iterdir()] == ["checkpoint-2"]
    arguments = json.loads((train_b / "checkpoint-2" / "run_arguments.json").read_text())
    assert (
        arguments["tokenizer_name_or_path"] == tokenizer_b and arguments["learning_rate"] == 0.001
    )
    with pytest.raises(ValueError, match="has been started already"):
        start_run_from_checkpoints([train_a / "checkpoint-2"], train_b, {})

    done = run_experiments(
        experiment_b, output_dir=tmp_path / "runs-b", record_dir=tmp_path / "record-b", threads=1
    )
    assert done[1] == "train residual-seed1 (resumed from checkpoint-2)"
    losses = [
        {
            entry["step"]: entry["eval_loss"]
            for entry in read_log_history(train)
            if "eval_loss" in entry
        }
        for train in (train_a, train_b)
    ]
    assert list(losses[1]) == [2, 4] and losses[1][4] == pytest.approx(losses[0][4], abs=1e-6)
    translations = [
        (folder / "residual-seed1" / "test" / "hypotheses.txt").read_text()
        for folder in (tmp_path / "runs-a", tmp_path / "runs-b")
    ]
    assert translations[0] == translations[1]

    # A finished run is copied whole: the runner averages and evaluates it without training.
    train_c = tmp_path / "runs-c" / "residual-seed1" / "train"
    copies = start_run_from_checkpoints(
        [train_a], train_c, {"tokenizer_name_or_path": str(tmp_path / "record-c" / "tokenizer")}
    )
    assert (
        copies == [train_c / "checkpoint-2", train_c / "checkpoint-4"]
        and (train_c / "train_results.json").is_file()
    )
    done = run_experiments(
        experiment_b, output_dir=tmp_path / "runs-c", record_dir=tmp_path / "record-c", threads=1
    )
    assert [line.split(" (")[0] for line in done[1:-1]] == [
        "average residual-seed1",
        "evaluate residual-seed1",
        "record residual-seed1",
    ]
    assert (
        tmp_path / "runs-c" / "residual-seed1" / "test" / "hypotheses.txt"
    ).read_text() == translations[0]


def test_start_run_from_checkpoints_refuses_a_damaged_checkpoint(tmp_path):
    checkpoint = tmp_path / "train" / "checkpoint-2"
    checkpoint.mkdir(parents=True)
    (checkpoint / "trainer_state.json").write_text("{}")
    (checkpoint / "run_arguments.json").write_text("{}")
    (checkpoint / "checksums.json").write_text(
        json.dumps({"sha256": {"model.safetensors": "0" * 64}})
    )
    with pytest.raises(ValueError, match="model.safetensors is missing"):
        start_run_from_checkpoints([checkpoint], tmp_path / "new" / "train", {})
    (checkpoint / "checksums.json").unlink()
    with pytest.raises(ValueError, match="has no checksums.json"):
        start_run_from_checkpoints([checkpoint], tmp_path / "new" / "train", {})


def test_record_history_merges_a_multilingual_runs_validations():
    """A multilingual run logs each direction's validation in an entry of its own; the record keeps
    one entry per step with every direction's loss and their mean as eval_loss. A bilingual run's
    entries are kept as they are."""
    log = [
        {"step": 10, "loss": 5.0, "wall_time": 9.0},
        {"step": 10, "eval_en-de_loss": 4.0, "wall_time": 11.0, "epoch": 0.1},
        {"step": 10, "eval_de-en_loss": 3.0, "wall_time": 12.0, "epoch": 0.1},
        {"step": 20, "eval_en-de_loss": 2.0, "wall_time": 21.0},
        {"step": 20, "eval_de-en_loss": 1.0, "wall_time": 22.0},
        {"step": 20, "train_runtime": 30.0},
    ]
    history = record_history(log)
    assert history == [
        {"step": 10, "loss": 5.0, "wall_time": 9.0},
        {
            "step": 10,
            "epoch": 0.1,
            "eval_en-de_loss": 4.0,
            "eval_de-en_loss": 3.0,
            "wall_time": 12.0,
            "eval_loss": 3.5,
        },
        {
            "step": 20,
            "epoch": None,
            "eval_en-de_loss": 2.0,
            "eval_de-en_loss": 1.0,
            "wall_time": 22.0,
            "eval_loss": 1.5,
        },
    ]
    bilingual = [
        {"step": 10, "loss": 5.0},
        {"step": 10, "eval_loss": 4.0, "eval_runtime": 1.0},
        {"step": 10, "epoch": 1},
    ]
    assert record_history(bilingual) == bilingual[:2]


def test_the_zero_shot_picture_draws_direct_and_pivot_bleu(tmp_path, monkeypatch):
    heights = []
    bar = matplotlib.axes.Axes.bar
    monkeypatch.setattr(
        matplotlib.axes.Axes,
        "bar",
        lambda axis, x, height, **kwargs: (
            heights.append(list(height)) or bar(axis, x, height, **kwargs)
        ),
    )
    averages = {
        "a": {"sacrebleu": 2.5, "pivot_sacrebleu": 22.5, "off_target_rate": 0.0},
        "b": {"sacrebleu": 0.4, "pivot_sacrebleu": 22.4, "off_target_rate": 0.86},
    }
    path = plot_zero_shot(averages, tmp_path / "zero_shot.png", title="t")
    assert heights == [[2.5, 0.4], [22.5, 22.4]] and matplotlib.image.imread(path).shape[0] > 100
