"""scripts/gpu_benchmark.py's dry run on the CPU: every row of the GPU measurement on tiny models,
through the Trainer and through the hand-written step used where accelerate is missing (the
measurement itself needs a GPU)."""

import json

import pytest
from conftest import run_script

from modeling_dwlstm.precision import fastest_precision
from nmt_toolkit.lab import gpu_benchmark
from nmt_toolkit.lab.gpu_benchmark import GpuBenchmarkSettings

pytestmark = pytest.mark.usefixtures("one_thread")
DECODED = {
    "dwlstm tiny",
    "residual-prenorm tiny",
    "marian tiny",
    "dwlstm 2+2",
    "residual-prenorm 4+4",
}


@pytest.mark.parametrize("accelerate", [True, False])
def test_the_dry_run_fills_every_row_eager_and_compiled(tmp_path, monkeypatch, accelerate):
    monkeypatch.setattr(gpu_benchmark, "is_accelerate_available", lambda: accelerate)
    output = tmp_path / "gpu.json"
    run_script("gpu_benchmark", "--dry_run", "--members", "dwlstm", "marian", "--output", output)
    report = json.loads(output.read_text())
    assert report["trainer"].startswith("Seq2SeqTrainer" if accelerate else "HandTrainer")
    for mode in ("eager", "compiled"):
        assert set(report["training"][mode]) == {"dwlstm", "marian"}
        for row in report["training"][mode].values():
            assert row["tokens_per_step"] == 2 * row["batch"] * 8 and row["batch"] == 64 // 8
            assert row["tokens_per_s"] == pytest.approx(row["tokens_per_step"] / row["step_s"])
            # no nominal peak for a CPU
            assert 0 < row["mfu_measured_peak"] and row["mfu_nominal_peak"] is None
    assert set(report["decoding"]) == DECODED
    # "auto"
    assert {row["precision"] for row in report["decoding"].values()} == {fastest_precision("cpu")}
    assert report["depth_pair"]["beam4"] == pytest.approx(
        report["decoding"]["dwlstm 2+2"]["beam4"]
        / report["decoding"]["residual-prenorm 4+4"]["beam4"]
    )
    assert report["not_measured"] == {}


def test_compiled_rows_past_the_budget_are_reported_not_measured(monkeypatch):
    monkeypatch.setattr(
        gpu_benchmark, "training_row", lambda member, settings, compiled, peaks: {"row_s": 1000.0}
    )
    monkeypatch.setattr(gpu_benchmark, "decoding_rows", lambda settings: {})
    monkeypatch.setattr(gpu_benchmark, "depth_pair_ratios", lambda decoding, settings: {})
    report = gpu_benchmark.run_gpu_benchmark(
        GpuBenchmarkSettings.tiny(members=("rezero", "marian", "dwlstm"), budget_s=100),
        log=lambda line: None,
    )
    assert set(report["training"]["eager"]) == {"rezero", "marian", "dwlstm"}
    # first in line; then over budget
    assert report["training"]["compiled"] == {"dwlstm": {"row_s": 1000.0}}
    assert set(report["not_measured"]) == {"marian compiled", "rezero compiled"}
    assert "run again with --members rezero" in report["not_measured"]["rezero compiled"]


@pytest.mark.parametrize(
    "settings, message",
    [
        (GpuBenchmarkSettings(device="cpu"), "No CUDA device: the GPU benchmark measures a GPU"),
        (GpuBenchmarkSettings.tiny(members=("transformer",)), r"Unknown members \['transformer'\]"),
        (
            GpuBenchmarkSettings.tiny(target_tokens=4),
            "target_tokens \\(4\\) must hold one sentence of length 8",
        ),
    ],
)
def test_bad_settings_are_refused(settings, message):
    with pytest.raises(ValueError, match=message):
        settings.check()
