"""Accept a saved model, checkpoint or tokenizer folder as it is now: record its files'
checksums again.

    dwlstm-record-checksums runs/ende/averaged
    dwlstm-record-checksums runs/ende/checkpoint-9000 runs/ende/checkpoint-10500

Loading, resuming, averaging and exporting verify a folder against its checksums.json and against
the fingerprint of the config and tokenizer its weights were saved with (fingerprint.json), and
refuse a folder whose needed files are missing or changed. When a change is meant (an edited
generation_config.json, a file left out of a copy on purpose, a checkpoint whose manifest was lost
but whose files you trust), this records the folder as it is: a new fingerprint.json (for a model)
and a new checksums.json. It does not
make a folder whole: a model still needs its config and weights, a checkpoint its optimizer state.
"""

import argparse
import os
from pathlib import Path

from nmt_toolkit.checkpoints import record_saved_folder
from nmt_toolkit.cli import exit_on_error


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("folders", nargs="+", help="Saved model, checkpoint or tokenizer folders.")
    args = parser.parse_args(argv)
    for folder in map(Path, args.folders):
        if not folder.is_dir():
            raise ValueError(
                f"{folder} is not a folder; give a saved model, checkpoint or tokenizer folder."
            )
        if not os.access(folder, os.W_OK):  # checked first: the error would name a temporary file
            raise ValueError(
                f"{folder} cannot be written by this user (permission denied): run this as the "
                "folder's "
                "owner, or record a copy of it."
            )
        print(f"Recorded {folder} as it is now: {record_saved_folder(folder)}")


def run():
    exit_on_error(main)


if __name__ == "__main__":
    run()
