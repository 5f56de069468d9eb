"""Start a run of one experiment from the checkpoints of a run of another, so the experiment runner
resumes it there.

    dwlstm-start-run-from-checkpoints \\
        --checkpoints runs/experiments/A/m-seed1/train/checkpoint-2700 runs/experiments/A/m-seed1/train/checkpoint-3000 \\
        --train_dir runs/experiments/B/m-seed1/train \\
        --set model_name_or_path=$PWD/hub_configs/residual-prenorm-base-6l.json \\
              tokenizer_name_or_path=experiments/B/tokenizer

Copies the checkpoints into --train_dir (which must not exist), replaces the settings named with
--set in each checkpoint's run_arguments.json (what resuming compares: the other experiment's paths
are not this one's), and records the checksums again; `scripts/run_experiments.py B.json` then
resumes the run from the newest of them. Every other setting is still compared there, so a
checkpoint of another model, schedule or corpus is refused. A finished run's training folder (with
train_results.json) can be given instead of checkpoints: it is copied whole, and the runner averages
and evaluates it without training. The work is done by
`nmt_toolkit.lab.experiments.start_run_from_checkpoints`.
"""  # noqa: E501

import argparse
import json

from nmt_toolkit.cli import exit_on_error
from nmt_toolkit.lab.experiments import start_run_from_checkpoints


def setting(text: str) -> tuple[str, object]:
    """KEY=VALUE; the value read as JSON where it is JSON (numbers, true, null), else as a string."""  # noqa: E501
    key, separator, value = text.partition("=")
    if not separator or not key:
        raise argparse.ArgumentTypeError(
            f"{text!r}: give a setting as KEY=VALUE, e.g. tokenizer_name_or_path=tok"
        )
    try:
        return key, json.loads(value)
    except json.JSONDecodeError:
        return key, value


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--checkpoints",
        nargs="+",
        required=True,
        help="checkpoint-N folders of one training run, or one finished run's training folder.",
    )
    parser.add_argument(
        "--train_dir",
        required=True,
        help="The new run's training folder (the runner's RUN-seedK/train).",
    )
    parser.add_argument(
        "--set",
        nargs="*",
        type=setting,
        default=[],
        dest="settings",
        metavar="KEY=VALUE",
        help="Settings to record instead of the checkpoints' own (e.g. model_name_or_path=...).",
    )
    args = parser.parse_args(argv)
    for copy in start_run_from_checkpoints(args.checkpoints, args.train_dir, dict(args.settings)):
        print(copy)


def run():
    exit_on_error(main)


if __name__ == "__main__":
    run()
