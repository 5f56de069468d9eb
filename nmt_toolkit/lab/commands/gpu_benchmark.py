"""The GPU in one command: bf16 training tokens/s and MFU of every member against MarianMTModel
(eager and compiled, the same Trainer settings, the papers' ~25k-token batches) and beam-4 / greedy
decoding of the base models and of Xu et al. 2024's Table 6 pair (12+12 depth-wise LSTM vs 24+24
residual). Needs torch and transformers only (with this repository on PYTHONPATH); about 4 minutes
on one GPU:

    PYTHONPATH=. python scripts/gpu_benchmark.py --output gpu-benchmark.json
    PYTHONPATH=. python scripts/gpu_benchmark.py --members rezero dlcl-prenorm   # rows a first run left out
    python scripts/gpu_benchmark.py --dry_run        # tiny models on the CPU: checks the command, measures nothing

Compiled training rows run last, while --budget_s lasts; the ones left are listed as not measured.
The work is done by `nmt_toolkit.lab.gpu_benchmark.run_gpu_benchmark`.
"""  # noqa: E501

import argparse

from nmt_toolkit.arguments import positive_int
from nmt_toolkit.cli import exit_on_error
from nmt_toolkit.files import atomic_write_json
from nmt_toolkit.lab.gpu_benchmark import GpuBenchmarkSettings, format_gpu_report, run_gpu_benchmark


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--members", nargs="+", help="family members and/or 'marian' (default: all, and Marian)"
    )
    parser.add_argument(
        "--target_tokens",
        type=positive_int,
        help="target tokens per training batch (default 25000)",
    )
    parser.add_argument(
        "--length", type=positive_int, help="tokens per source and target sentence (default 64)"
    )
    parser.add_argument(
        "--timed_steps", type=positive_int, help="timed training steps per row (default 10)"
    )
    parser.add_argument(
        "--generation_batch", type=positive_int, help="sentences per generate() call (default 64)"
    )
    parser.add_argument(
        "--budget_s",
        type=positive_int,
        help="compiled rows start only within this many seconds (default 240)",
    )
    parser.add_argument(
        "--no_compiled", action="store_true", help="leave out the compiled training rows"
    )
    parser.add_argument(
        "--dry_run",
        action="store_true",
        help="tiny models, a few steps (on the CPU without a GPU): "
        "checks the command, measures nothing",
    )
    parser.add_argument(
        "--output", default="gpu-benchmark.json", help="JSON report (default gpu-benchmark.json)"
    )
    args = parser.parse_args(argv)
    settings = GpuBenchmarkSettings.tiny() if args.dry_run else GpuBenchmarkSettings()
    settings.compiled = not args.no_compiled
    for name in ("target_tokens", "length", "timed_steps", "generation_batch", "budget_s"):
        if getattr(args, name) is not None:
            setattr(settings, name, getattr(args, name))
    if args.members:
        settings.members = tuple(args.members)
    report = run_gpu_benchmark(settings)
    print(format_gpu_report(report))
    atomic_write_json(args.output, report)
    print(f"\nWrote {args.output}")


def run():
    exit_on_error(main)


if __name__ == "__main__":
    run()
