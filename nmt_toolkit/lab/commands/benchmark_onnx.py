"""Greedy decoding speed of the ONNX Runtime export beside generate(), float32 and int8
(nmt_toolkit/lab/onnx_speed.py).

    dwlstm-benchmark-onnx                                   # base depth-wise LSTM, 2 threads, 3 repeats
    dwlstm-benchmark-onnx --member residual-prenorm --size small --output onnx_speed.json

A randomly initialised model at the papers' size, 32 random sources of 20 tokens, exactly 24 new
tokens each, timed as scripts/measure_speed.py times generate() (interleaved repetitions, medians).
"""  # noqa: E501

import argparse
from pathlib import Path

from nmt_toolkit.arguments import positive_int
from nmt_toolkit.cli import exit_on_error
from nmt_toolkit.files import atomic_write_json
from nmt_toolkit.lab.onnx_speed import benchmark_onnx, format_report
from nmt_toolkit.lab.speed import SIZES, registered_members


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--member", default="dwlstm", choices=sorted(registered_members()), help="default dwlstm"
    )
    parser.add_argument("--size", default="base", choices=sorted(SIZES), help="default base")
    parser.add_argument(
        "--threads", type=positive_int, default=2, help="torch and ONNX Runtime threads (default 2)"
    )
    parser.add_argument(
        "--repeats", type=positive_int, default=3, help="interleaved repetitions (default 3)"
    )
    parser.add_argument(
        "--batch", type=positive_int, default=32, help="source sentences per call (default 32)"
    )
    parser.add_argument(
        "--new_tokens",
        type=positive_int,
        default=24,
        help="forced new tokens per sentence (default 24)",
    )
    parser.add_argument(
        "--output", type=Path, default=None, help="also write the report as JSON to this path"
    )
    args = parser.parse_args(argv)
    if args.output is not None and args.output.is_dir():  # found before the minutes of work
        parser.error(
            f"--output {args.output} is a folder; give the JSON file to write, e.g. {args.output}"
            "/onnx_speed.json."
        )
    report = benchmark_onnx(
        args.member,
        args.size,
        threads=args.threads,
        repeats=args.repeats,
        batch=args.batch,
        new_tokens=args.new_tokens,
    )
    print(format_report(report))
    if args.output is not None:
        atomic_write_json(args.output, report)


def run():
    exit_on_error(main)


if __name__ == "__main__":
    run()
