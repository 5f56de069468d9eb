"""Regenerate hub_configs/ from modeling_dwlstm.paper_configs (the papers' settings)."""

import argparse

from modeling_dwlstm.paper_configs import write_hub_configs
from nmt_toolkit.cli import exit_on_error


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--output_dir", default="hub_configs")
    parser.add_argument(
        "--overwrite", action="store_true", help="Replace presets that differ (edited by hand)."
    )
    args = parser.parse_args(argv)
    for path in write_hub_configs(args.output_dir, overwrite=args.overwrite):
        print(path)


def run():
    exit_on_error(main)


if __name__ == "__main__":
    run()
