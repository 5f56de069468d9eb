"""Print a multilingual evaluation's results.json as a Markdown table (per direction, then group averages).

    python scripts/results_table.py runs/m30k/dwlstm-m2m/test/results.json \\
        --baseline runs/m30k/residual-m2m/test/results.json

The work is done by `nmt_toolkit.evaluation.results_table`.
"""

import argparse

from nmt_toolkit.cli import exit_on_error
from nmt_toolkit.evaluation import results_table
from nmt_toolkit.hub import read_results


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("results", help="results.json of evaluate_translation.py --language_pairs ...")
    parser.add_argument("--baseline", help="The baseline's results.json (its sacreBLEU in a column of its own).")
    args = parser.parse_args(argv)
    results = read_results(args.results)
    if "directions" not in results:
        parser.error(f"{args.results} is a one-direction evaluation; the table is for --language_pairs evaluations.")
    print("\n".join(results_table(results, read_results(args.baseline) if args.baseline else None)))


if __name__ == "__main__":
    exit_on_error(main)
