"""The records the studies under experiments/ keep are the ones their tables were made from: the
packed hypotheses re-score to the published BLEU, and each campaign's results.json agrees with its
runs' packed records."""

import gzip
import json
from pathlib import Path

import pytest
from conftest import MULTI30K

from nmt_toolkit.evaluation import score_translations
from nmt_toolkit.files import read_lines
from nmt_toolkit.lab.experiments import has_record, hypotheses, load_experiment, read_record

EXPERIMENTS = Path(__file__).resolve().parents[1] / "experiments"
CAMPAIGNS = sorted(
    path.parent
    for path in EXPERIMENTS.glob("*/experiment.json")
    if (path.parent / "records").is_dir()
)


def references(split: str, language: str) -> list[str]:
    return read_lines(MULTI30K / f"{split}.{language}.gz")


@pytest.mark.parametrize(
    "study, run_id",
    [("multi30k-en-de", "dwlstm-seed1"), ("multi30k-en-de", "residual-prenorm-seed2")],
)
def test_a_packed_run_rescores_to_its_published_bleu(study, run_id):
    record = read_record(EXPERIMENTS / study, run_id)
    scores = score_translations(hypotheses(record), references("test_2016_flickr", "de"), "de")
    assert (
        scores["sacrebleu"] == record["test"]["sacrebleu"]
        and scores["chrf"] == record["test"]["chrf"]
    )


@pytest.mark.parametrize("direction", ["en-de", "de-fr"])
def test_a_packed_multilingual_run_rescores_each_direction(direction):
    """A supervised and a zero-shot direction of RESULTS.md's multilingual depth-wise LSTM, from its
    one packed file."""
    record = read_record(EXPERIMENTS / "multi30k-multilingual", "dwlstm-laln-lalt-robt-seed1")
    target = direction.split("-")[1]
    scores = score_translations(
        hypotheses(record, direction), references("test_2016_flickr", target), target
    )
    assert scores["sacrebleu"] == record["test"]["directions"][direction]["sacrebleu"]


@pytest.mark.parametrize("study", CAMPAIGNS, ids=lambda path: path.name)
def test_every_campaign_table_agrees_with_its_packed_records(study):
    """Each run of the experiment file has its packed record, and results.json's scores are the
    records' scores."""
    experiment = load_experiment(study / "experiment.json")
    assert all(has_record(study, run_id) for run in experiment.runs for run_id in run.run_ids())
    results = json.loads((study / "results.json").read_text())
    if experiment.multilingual:
        for row in results["rows"]:
            assert read_record(study, row["run_id"])["test"]["averages"] == row["averages"]
    else:
        for row in results["rows"]:
            run = experiment.run(row["run"])
            assert [
                read_record(study, run_id)["test"]["sacrebleu"] for run_id in run.run_ids()
            ] == row["sacrebleu_per_seed"]


def test_the_shortlist_study_rescores_from_its_packed_evaluations():
    """The shortlist's BLEU table (with and without, two batch sizes, val and test) and its
    "differ" column."""
    evaluations = json.loads(
        gzip.decompress((EXPERIMENTS / "shortlist-multi30k" / "evaluations.json.gz").read_bytes())
    )
    assert len(evaluations) == 8
    differ = {}
    for name, evaluation in evaluations.items():
        split = evaluation["results"]["split"]
        lines = evaluation["hypotheses"].splitlines()
        assert (
            score_translations(lines, references(split, "de"), "de")["sacrebleu"]
            == evaluation["results"]["sacrebleu"]
        )
        if name.endswith("-with"):
            without = evaluations[name.removesuffix("-with") + "-without"][
                "hypotheses"
            ].splitlines()
            differ[name.removesuffix("-with")] = sum(a != b for a, b in zip(lines, without))
    assert differ == {"val-4096": 58, "val-512": 169, "test-4096": 62, "test-512": 160}


def test_a_damaged_pack_is_named_with_what_to_do(tmp_path):
    (tmp_path / "records").mkdir()
    (tmp_path / "records" / "a-seed1.json.gz").write_bytes(b"not gzip")
    with pytest.raises(
        ValueError, match=r"a-seed1.json.gz is not a packed record .*restore it from git"
    ):
        read_record(tmp_path, "a-seed1")
    with pytest.raises(FileNotFoundError, match="No record of b-seed1 in"):
        read_record(tmp_path, "b-seed1")
