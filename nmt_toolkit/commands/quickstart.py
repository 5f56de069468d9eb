"""The quickstart (`make quickstart`): train, evaluate, save, reload and use a small depth-wise
LSTM model.

    dwlstm-quickstart --output_dir quickstart-output

Generates the project's own English -> German corpus, trains a joint BPE tokenizer and a small model
(about 2-3 minutes on 2 CPU cores), reports held-out BLEU before and after training, reloads the
model with AutoModelForSeq2SeqLM and translates new sentences with pipeline("translation"). No
network, no files outside the output directory. The work is done by
`nmt_toolkit.quickstart.run_quickstart`.
"""

import argparse
import logging

import torch

from nmt_toolkit.arguments import positive_int
from nmt_toolkit.cli import exit_on_error
from nmt_toolkit.quickstart import (
    QuickstartSettings,
    clear_quickstart_output,
    format_summary,
    run_quickstart,
)
from nmt_toolkit.training import TqdmLoggingHandler


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--output_dir", default="quickstart-output")
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help=(
            "Delete an earlier quickstart's --output_dir first (a folder holding other files is "
            "refused)."
        ),
    )
    parser.add_argument("--max_steps", type=positive_int, default=QuickstartSettings.max_steps)
    parser.add_argument(
        "--threads",
        type=positive_int,
        default=1,
        help=(
            "torch threads. The model is small: a second thread gains little on 2 dedicated "
            "cores and, when other processes share them, makes each step several times slower "
            "(threads wait for each other)."
        ),
    )
    parser.add_argument(
        "--bf16",
        action="store_true",
        help="Train under bfloat16 autocast (float32 weights and Adam).",
    )
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    # Through tqdm, so that log lines do not break into the progress bars.
    logging.basicConfig(
        level=logging.INFO,
        format="%(asctime)s %(name)s: %(message)s",
        handlers=[TqdmLoggingHandler()],
    )
    if args.overwrite:
        clear_quickstart_output(args.output_dir)  # an earlier quickstart's output only
    summary = run_quickstart(
        args.output_dir, QuickstartSettings(max_steps=args.max_steps, bf16=args.bf16)
    )
    print("\n" + format_summary(summary))


def run():
    exit_on_error(main)


if __name__ == "__main__":
    run()
