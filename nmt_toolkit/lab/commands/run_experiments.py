"""Run a results campaign from an experiment file: tokenizer, training, averaging,
evaluation, table.

    dwlstm-run-experiments experiments/multi30k-en-de/experiment.json --threads 2
    dwlstm-run-experiments experiments/multi30k-en-de/experiment.json --only dwlstm residual-prenorm
    dwlstm-run-experiments experiments/multi30k-en-de/experiment.json --table_only   # the table so far

Finished runs (those with a record in --record_dir) are skipped and interrupted ones resume from
their newest checkpoint, so the same command continues a campaign after a stop; run twice, it does
nothing the second time. Once every run has a record it writes results.md, results.json and the
pictures into --record_dir. The work is done by `nmt_toolkit.lab.experiments.run_experiments`.
"""  # noqa: E501

import argparse
import logging

from nmt_toolkit.arguments import positive_int
from nmt_toolkit.cli import exit_on_error
from nmt_toolkit.lab.experiments import (
    StageFailed,
    default_record_dir,
    load_experiment,
    run_experiments,
    write_results_table,
)


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "experiment",
        help="An experiment file (JSON), e.g. experiments/multi30k-en-de/experiment.json.",
    )
    parser.add_argument(
        "--output_dir",
        default=None,
        help="Checkpoints and models (large; default runs/experiments/NAME).",
    )
    parser.add_argument(
        "--record_dir",
        default=None,
        help="Tokenizer, per-run records, table and pictures (small; default experiments/NAME).",
    )
    parser.add_argument(
        "--threads",
        type=positive_int,
        default=None,
        help="torch threads for every stage (OMP_NUM_THREADS).",
    )
    parser.add_argument("--only", nargs="+", default=None, help="Run only these runs (by name).")
    parser.add_argument(
        "--no_table", action="store_true", help="Do not write the table, even if every run is done."
    )
    parser.add_argument(
        "--table_only",
        action="store_true",
        help="Train nothing: write the table from the records there are (missing runs listed).",
    )
    parser.add_argument(
        "--table_so_far",
        action="store_true",
        help="Write the table even if some runs have no record yet (they are listed as not run).",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    if args.table_only:
        experiment = load_experiment(args.experiment)
        record_dir = args.record_dir or default_record_dir(experiment)
        results = write_results_table(experiment, record_dir, allow_missing=True)
        print(
            f"table {record_dir}/results.md ({len(results['rows'])} runs; no record yet: "
            f"{', '.join(results['not_run_yet']) or 'none'})"
        )
        return
    for line in run_experiments(
        args.experiment,
        output_dir=args.output_dir,
        record_dir=args.record_dir,
        threads=args.threads,
        only=args.only,
        table=not args.no_table,
        table_so_far=args.table_so_far,
    ):
        print(line)


def run():
    exit_on_error(main, also=(StageFailed,))


if __name__ == "__main__":
    run()
