"""Draw the learning curves of training runs on one figure: validation loss against steps and
wall-clock time.

    dwlstm-plot-training runs/dwlstm runs/residual --labels dwlstm residual --output curves.png

Each run is a `train_translation.py` output directory (its trainer_state.json, or the newest
checkpoint's while the run is still going). The work is done by
`nmt_toolkit.lab.plotting.plot_training`.
"""

import argparse

from nmt_toolkit.cli import exit_on_error
from nmt_toolkit.lab.plotting import check_figure_path, plot_training, read_log_history


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("runs", nargs="+", help="Training output directories.")
    parser.add_argument(
        "--labels", nargs="+", default=None, help="One label per run (default: the folder names)."
    )
    parser.add_argument("--output", required=True, help="The PNG file to write.")
    parser.add_argument("--title", default="")
    args = parser.parse_args(argv)
    labels = args.labels or [run.rstrip("/").split("/")[-1] for run in args.runs]
    if len(labels) != len(args.runs):
        parser.error(f"{len(args.runs)} runs but {len(labels)} labels: give one label per run.")
    check_figure_path(args.output)  # before reading the runs
    histories = {label: read_log_history(run) for label, run in zip(labels, args.runs)}
    print(plot_training(histories, args.output, title=args.title))


def run():
    exit_on_error(main)


if __name__ == "__main__":
    run()
