"""What the scripts share: a bad input ends the script with one line saying what was wrong and
what to do."""

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path

from tqdm import tqdm

from .arguments import check_device, positive_int
from .files import clear_output_dir, is_no_space_error, prepare_output_dir
from .training import TrainingDiverged

OWN_PACKAGES = ("modeling_dwlstm", "nmt_toolkit")


def exit_on_error(function: Callable, *args, also: tuple[type[BaseException], ...] = (), **kwargs):
    """Call `function`; a ValueError (bad input), a diverged training run, a full disk, a missing
    file or optional package (and the exception types in `also`) end the process with "error:
    <message>" on stderr and exit code 1 instead of a traceback. A closed standard output
    (`... | head -1`) ends it quietly. Other errors keep their traceback."""
    try:
        result = function(*args, **kwargs)
        # a reader that stopped early (`| head`) shows here, not as a traceback at exit
        sys.stdout.flush()
        return result
    except BrokenPipeError:
        _discard_stdout()
        sys.exit(1)
    except (ValueError, TrainingDiverged, *also) as error:
        message = error
    except OSError as error:
        message = _os_error_message(error)
        if message is None:
            raise
    except ImportError as error:
        if not _missing_optional_package(error):
            raise
        message = error
    _close_progress_bars()
    print(f"error: {message}", file=sys.stderr)
    sys.exit(1)


def _os_error_message(error: OSError):
    """The one-line message of a full disk or of a file that is missing, unreadable or of the wrong
    kind; None for other OS errors (a bug or an unusual failure: the traceback helps there)."""
    if is_no_space_error(error):
        return error.strerror or error
    if error.filename is not None or isinstance(error, FileNotFoundError):
        return error
    return None


def _missing_optional_package(error: ImportError) -> bool:
    """A third-party package that is not installed (matplotlib, py3langid, ...), not a broken import
    of ours."""
    if "pip install" in str(error):
        return True
    name = getattr(error, "name", None) or ""
    return (
        isinstance(error, ModuleNotFoundError)
        and bool(name)
        and name.split(".")[0] not in OWN_PACKAGES
    )


def _discard_stdout():
    """Point standard output at /dev/null: the interpreter flushes it at exit, which would
    fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    # no file descriptor (a replaced sys.stdout): nothing to flush at exit
    except (OSError, ValueError):
        pass


def add_run_arguments(parser: argparse.ArgumentParser):
    """--device, --threads, --output_dir and --overwrite_output_dir, for the argparse scripts that
    analyse a saved model."""
    parser.add_argument("--device", default="cpu", type=_device, help="cpu, cuda, cuda:1, ...")
    parser.add_argument(
        "--threads", type=positive_int, default=None, help="torch CPU threads (default: torch's)."
    )
    parser.add_argument("--output_dir", required=True)
    parser.add_argument(
        "--overwrite_output_dir",
        action="store_true",
        help="Write into a non-empty --output_dir, deleting what it holds first.",
    )


def prepare_run_output(args: argparse.Namespace, inputs: dict) -> Path:
    """The --output_dir of `add_run_arguments`, claimed and checked before any work
    (`prepare_output_dir`); with --overwrite_output_dir emptied first (`clear_output_dir`; `inputs`,
    flag -> path, must not be in it), so that it ends holding only this run's files."""
    output_dir = prepare_output_dir(args.output_dir, args.overwrite_output_dir)
    if args.overwrite_output_dir:
        clear_output_dir(output_dir, inputs)
    return output_dir


def _device(name: str) -> str:
    """argparse `type=` for --device (see `arguments.check_device`)."""
    try:
        return check_device(name)
    except ValueError as error:  # argparse names the flag itself
        raise argparse.ArgumentTypeError(str(error).removeprefix("--device ")) from None


def _close_progress_bars():
    """A bar left open by the error would be redrawn after the message, hiding it."""
    for bar in list(getattr(tqdm, "_instances", ())):
        bar.close()


__all__ = ["add_run_arguments", "exit_on_error", "prepare_run_output"]
