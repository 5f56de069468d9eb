"""Pictures of training runs: learning curves against steps and wall-clock time, test BLEU with
intervals, and a multilingual model's zero-shot BLEU, direct and through English.

The functions take plain data (a Trainer `log_history` per run; a score and interval per run;
zero-shot averages) and write a PNG; they need matplotlib (`pip install -e ".[plot]"`).
"""

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

from ..checkpoints import complete_checkpoints


def plot_training(
    histories: Mapping[str, Sequence[Mapping]], path: str | Path, title: str = ""
) -> Path:
    """Validation loss against update steps (left) and against training wall-clock minutes (right).

    `histories` maps a run's label to its Trainer `log_history` (the entries with `eval_loss` are
    drawn; the wall-clock axis reads `wall_time`, which `training.WallClockCallback` adds). One line
    per run.
    """
    plt = _pyplot()
    figure, (by_step, by_time) = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    for label, history in histories.items():
        evaluations = [entry for entry in history if "eval_loss" in entry]
        if not evaluations:
            raise ValueError(
                f"Run {label!r} has no validation loss in its log history (train with a "
                "validation split)."
            )
        steps = [entry["step"] for entry in evaluations]
        losses = [entry["eval_loss"] for entry in evaluations]
        (line,) = by_step.plot(steps, losses, marker="o", markersize=3, label=label)
        if all("wall_time" in entry for entry in evaluations):
            by_time.plot(
                [entry["wall_time"] / 60 for entry in evaluations],
                losses,
                marker="o",
                markersize=3,
                color=line.get_color(),
                label=label,
            )
    by_step.set(xlabel="update steps", ylabel="validation loss (label-smoothed cross-entropy)")
    by_time.set(xlabel="training wall-clock time (minutes)")
    for axis in (by_step, by_time):
        axis.grid(alpha=0.3)
    by_step.legend(fontsize=8)
    if title:
        figure.suptitle(title)
    return _save(figure, path)


def plot_bleu_intervals(
    scores: Mapping[str, tuple[float, Mapping]],
    path: str | Path,
    title: str = "",
    metric: str = "sacreBLEU",
    split: str = "test",
) -> Path:
    """One bar per run: its score on `split` and the 95% bootstrap interval ({"low": .., "high":
    ..}) as an error bar."""
    plt = _pyplot()
    labels = list(scores)
    values = [scores[label][0] for label in labels]
    lows = [scores[label][0] - scores[label][1]["low"] for label in labels]
    highs = [scores[label][1]["high"] - scores[label][0] for label in labels]
    # Wide enough for the bars and for the title, which matplotlib would cut at the edge rather
    # than wrap.
    figure, axis = plt.subplots(
        figsize=(max(5.0, 0.9 * len(labels) + 2, 0.1 * len(title) + 1), 4.2)
    )
    bars = axis.bar(range(len(labels)), values, yerr=[lows, highs], capsize=4, color="#4c72b0")
    axis.bar_label(bars, labels=[f"{value:.1f}" for value in values], padding=14, fontsize=8)
    axis.set_xticks(range(len(labels)), labels, rotation=30, ha="right", fontsize=9)
    # Two lines: a split name such as test_2016_flickr makes one line taller than the axis.
    axis.set_ylabel(f"{split} {metric}\n(95% bootstrap interval)")
    axis.set_ylim(0, max(scores[label][1]["high"] for label in labels) * 1.15 + 1)
    axis.grid(axis="y", alpha=0.3)
    if title:
        axis.set_title(title)
    return _save(figure, path)


def plot_zero_shot(averages: Mapping[str, Mapping], path: str | Path, title: str = "") -> Path:
    """One pair of bars per system: its direct zero-shot sacreBLEU and its pivot sacreBLEU (through
    English, the same model), averaged over the zero-shot directions, with the share of direct
    outputs off the target language written above. `averages` maps a label to its evaluation's
    zero-shot average (`sacrebleu`, `off_target_rate` and, with pivoting, `pivot_sacrebleu`)."""
    plt = _pyplot()
    labels = list(averages)
    direct = [averages[label]["sacrebleu"] for label in labels]
    pivot = [averages[label].get("pivot_sacrebleu") or 0.0 for label in labels]
    figure, axis = plt.subplots(
        figsize=(max(5.0, 1.3 * len(labels) + 2, 0.1 * len(title) + 1), 4.6)
    )
    positions = range(len(labels))
    bars = axis.bar(
        [x - 0.2 for x in positions], direct, width=0.4, color="#4c72b0", label="direct"
    )
    axis.bar(
        [x + 0.2 for x in positions],
        pivot,
        width=0.4,
        color="#bbbbbb",
        label="through English (pivot)",
    )
    off_target = [
        f"{averages[label]['off_target_rate']:.0%}\noff-target"
        if averages[label].get("off_target_rate") is not None
        else ""
        for label in labels
    ]
    axis.bar_label(
        bars,
        labels=[f"{value:.1f}\n{note}" for value, note in zip(direct, off_target)],
        padding=2,
        fontsize=7,
    )
    axis.set_xticks(list(positions), labels, rotation=30, ha="right", fontsize=8)
    axis.set_ylabel("sacreBLEU, mean over the\nzero-shot directions")
    axis.set_ylim(0, max(direct + pivot) * 1.25 + 1)
    axis.grid(axis="y", alpha=0.3)
    axis.legend(fontsize=8, loc="upper left")
    if title:
        axis.set_title(title)
    return _save(figure, path)


def read_log_history(run_dir: str | Path) -> list[dict]:
    """The Trainer log history of a `train_translation.py` output directory: its trainer_state.json
    once the run has finished, else the newest complete checkpoint's."""
    run_dir = Path(run_dir)
    state = run_dir / "trainer_state.json"
    if not state.is_file():
        checkpoints = complete_checkpoints(run_dir) if run_dir.is_dir() else []
        if not checkpoints:
            raise ValueError(
                f"{run_dir} has neither trainer_state.json nor a complete checkpoint: not a "
                "training run."
            )
        state = checkpoints[-1] / "trainer_state.json"
    try:
        return json.loads(state.read_text(encoding="utf-8"))["log_history"]
    except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError) as error:
        raise ValueError(
            f"{state} is not a readable Trainer state ({error!r}); the run's log history is lost "
            "there."
        ) from error


def _pyplot():
    try:
        import matplotlib
    except ImportError:
        raise ImportError('Plotting needs matplotlib: pip install -e ".[plot]"') from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


FIGURE_SUFFIXES = (".png", ".pdf", ".svg", ".jpg", ".jpeg", ".eps", ".tif", ".tiff")


def check_figure_path(path: str | Path, flag: str = "--output") -> Path:
    """Refuse a figure path without a picture's extension: matplotlib would write "curves.png" for
    "curves" (not the file named), and a typo such as run/trainer_state.json would be written
    over."""
    path = Path(path)
    if path.suffix.lower() not in FIGURE_SUFFIXES:
        raise ValueError(
            f"{flag} {path}: a figure file name ends in {', '.join(FIGURE_SUFFIXES[:3])}, ... "
            f"(got {path.suffix or 'no extension'}); name the picture to write, e.g. curves.png."
        )
    return path


def _save(figure, path: str | Path) -> Path:
    path = check_figure_path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    _pyplot().close(figure)
    return path
