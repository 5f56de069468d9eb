"""What the scripts share: a bad input ends the script with one line saying what was wrong and what to do."""

import argparse
import sys
from collections.abc import Callable

from tqdm import tqdm

from .files import is_no_space_error
from .training import TrainingDiverged


def exit_on_error(function: Callable, *args, **kwargs):
    """Call `function`; a ValueError (bad input), a diverged training run or a full disk ends the process with
    "error: <message>" on stderr and exit code 1 instead of a traceback. Other errors keep their traceback."""
    try:
        return function(*args, **kwargs)
    except (ValueError, TrainingDiverged) as error:
        message = error
    except OSError as error:
        if not is_no_space_error(error):
            raise
        message = error.strerror or error
    _close_progress_bars()
    print(f"error: {message}", file=sys.stderr)
    sys.exit(1)


def add_run_arguments(parser: argparse.ArgumentParser):
    """--device, --threads, --output_dir and --overwrite_output_dir, for the argparse scripts that analyse a saved model."""
    parser.add_argument("--device", default="cpu", help="cpu, cuda, cuda:1, ...")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's).")
    parser.add_argument("--output_dir", required=True)
    parser.add_argument("--overwrite_output_dir", action="store_true", help="Write into a non-empty --output_dir.")


def _close_progress_bars():
    """A bar left open by the error would be redrawn after the message, hiding it."""
    for bar in list(getattr(tqdm, "_instances", ())):
        bar.close()


__all__ = ["add_run_arguments", "exit_on_error"]
