"""Average the weights of the last K checkpoints of a training run into a model directory.

    dwlstm-average-checkpoints --run_dir runs/ende --last 5 --output_dir runs/ende/averaged   # base
    dwlstm-average-checkpoints --run_dir runs/ende-big --last 20 --output_dir runs/ende-big/averaged
    dwlstm-average-checkpoints --checkpoints runs/ende/checkpoint-97000 runs/ende/checkpoint-98500 ...

The output loads with `AutoModelForSeq2SeqLM.from_pretrained` and `AutoTokenizer.from_pretrained`.
"""  # noqa: E501

import argparse

from nmt_toolkit.arguments import positive_int
from nmt_toolkit.checkpoints import average_checkpoints, last_checkpoints
from nmt_toolkit.cli import exit_on_error
from nmt_toolkit.files import check_inputs_outside, prepare_output_dir


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--run_dir", help="A training output_dir holding checkpoint-N folders.")
    source.add_argument(
        "--checkpoints", nargs="+", help="Checkpoint folders to average, in any order."
    )
    parser.add_argument(
        "--last",
        type=positive_int,
        default=5,
        help="How many of the newest checkpoints (5 base, 20 big).",
    )
    parser.add_argument(
        "--output_dir", required=True, help="A new directory for the averaged model."
    )
    parser.add_argument(
        "--overwrite_output_dir", action="store_true", help="Replace what --output_dir holds."
    )
    args = parser.parse_args(argv)
    checkpoints = last_checkpoints(args.run_dir, args.last) if args.run_dir else args.checkpoints
    # the run itself: named as an input
    check_inputs_outside(args.output_dir, {"the checkpoint": checkpoints})
    # refused: before the work
    prepare_output_dir(args.output_dir, args.overwrite_output_dir, replaced_whole=True)
    output = average_checkpoints(checkpoints, args.output_dir, overwrite=True)
    print(
        f"Averaged {len(checkpoints)} checkpoints ({', '.join(str(c) for c in checkpoints)}) "
        f"into {output}"
    )


def run():
    exit_on_error(main)


if __name__ == "__main__":
    run()
