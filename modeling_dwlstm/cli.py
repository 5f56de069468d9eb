"""What the scripts share: a bad input ends the script with one line saying what was wrong and what to do."""

import sys
from collections.abc import Callable

from .files import is_no_space_error


def exit_on_error(function: Callable, *args, **kwargs):
    """Call `function`; a ValueError (bad input), a diverged training run or a full disk ends the process with
    "error: <message>" on stderr and exit code 1 instead of a traceback. Other errors keep their traceback."""
    from .training import TrainingDiverged

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


def _close_progress_bars():
    """A bar left open by the error would be redrawn after the message, hiding it."""
    from tqdm import tqdm

    for bar in list(getattr(tqdm, "_instances", ())):
        bar.close()


__all__ = ["exit_on_error"]
