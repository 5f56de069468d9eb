"""Print a multilingual evaluation's results.json as a Markdown table (per direction, then group
averages, win ratios, the pivot comparison and the subset per side: Xu et al. 2024, Table 7's
report), or several systems side by side.

    dwlstm-results-table runs/m30k/dwlstm-m2m/test/results.json \\
        --baseline runs/m30k/residual-m2m/test/results.json
    dwlstm-results-table --systems residual=runs/m30k/residual-m2m/test/results.json \\
        dwlstm=runs/m30k/dwlstm-m2m/test/results.json

The work is done by `nmt_toolkit.evaluation.results_table` and `systems_table`.
"""

import argparse

from nmt_toolkit.cli import exit_on_error
from nmt_toolkit.evaluation import results_table, systems_table
from nmt_toolkit.hub import read_results


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "results", nargs="?", help="results.json of evaluate_translation.py --language_pairs ..."
    )
    parser.add_argument(
        "--baseline", help="The baseline's results.json (its sacreBLEU in a column of its own)."
    )
    parser.add_argument(
        "--systems",
        nargs="+",
        metavar="NAME=RESULTS",
        help=(
            "Instead: one row per system (NAME=results.json), the averages out of / into English "
            "and zero-shot, the subset, the win ratios, off-target and pivot (Xu et al. 2024, "
            "Table 7)."
        ),
    )
    args = parser.parse_args(argv)
    if (args.results is None) == (args.systems is None):
        parser.error("give one results.json, or --systems NAME=results.json ...")
    if args.systems:
        systems = {}
        for item in args.systems:
            name, separator, path = item.partition("=")
            if not separator or not name or not path:
                parser.error(f"--systems entries look like NAME=results.json, got {item!r}.")
            systems[name] = _multilingual(parser, path)
        print("\n".join(systems_table(systems)))
        return
    results = _multilingual(parser, args.results)
    print("\n".join(results_table(results, read_results(args.baseline) if args.baseline else None)))


def _multilingual(parser, path: str) -> dict:
    results = read_results(path)
    if "directions" not in results:
        parser.error(
            f"{path} is a one-direction evaluation; the table is for --language_pairs evaluations."
        )
    return results


def run():
    exit_on_error(main)


if __name__ == "__main__":
    run()
