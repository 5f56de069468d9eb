"""Safe file handling shared by training, evaluation, averaging, tokenizers and the Hub code.

- One line-splitting rule (`split_lines`, `strip_line_end`): a line ends at ``\\n`` (an ``\\r``
  before it is dropped) and nowhere else, so U+2028, U+0085, form feeds or a lone ``\\r`` inside a
  sentence never shift the lines of one file against those of another (``str.splitlines`` splits on
  all of them).
- One atomic-write rule (`atomic_write_text`, `atomic_directory`): a file or folder is written under
  a temporary name beside its destination and renamed into place when complete, so no reader ever
  sees a half-written one.
- Output folders are checked before any work (`prepare_output_dir`): refused when they hold
  something, unless overwriting was asked for, and probed for writability. They are claimed first
  (`claim_output_dir`): a second run into a folder another run is still writing is refused, instead
  of both "succeeding" with one result silently replacing the other. A folder that is (or holds) an
  input of the run is refused as its output when writing would replace that input
  (`check_inputs_outside`).
- A checksum manifest (`write_checksums`, `verify_checksums`): safetensors has no checksum, so a
  saved model or checkpoint gets ``checksums.json`` (SHA-256 of each file), checked before it is
  used. A file the user of the folder does not need may be left out of a copy (`optional`); a
  missing or changed file that is needed is named, with how to accept the folder as it is
  (`RECORD_COMMAND`).
"""

import atexit
import contextlib
import errno
import functools
import gzip
import hashlib
import json
import logging
import os
import re
import shutil
import socket
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import torch
from huggingface_hub import constants, try_to_load_from_cache
from huggingface_hub.utils import get_session

try:
    import fcntl
# Windows: claims are exclusive files only, and a killed run's claim must be deleted by hand
except ImportError:
    fcntl = None

logger = logging.getLogger(__name__)

CHECKSUMS_NAME = "checksums.json"
# How a user accepts a folder as it is now (a file changed or left out on purpose): a new manifest.
RECORD_COMMAND = "python scripts/record_checksums.py"
CLAIM_SUFFIX = ".in-use"
# Files that change after a model is saved (logs, metrics written later, claims of folders being
# written inside it): never in a manifest.
UNCHECKED_FILES = re.compile(r".*\.log|.*_results\.json|.*\.tmp|\..*" + re.escape(CLAIM_SUFFIX))


def strip_line_end(line: str) -> str:
    """A line without its ``\\n`` or ``\\r\\n`` end (the one rule every reader of line files
    follows)."""
    line = line.removesuffix("\n")
    return line.removesuffix("\r")


def split_lines(text: str) -> list[str]:
    """The lines of `text`, split at ``\\n`` only (see the module docstring); no empty last line for
    a final newline."""
    if not text:
        return []
    return [strip_line_end(line) for line in text.removesuffix("\n").split("\n")]


# some Windows editors start UTF-8 files with it; it is no part of the first sentence
BYTE_ORDER_MARK = "\ufeff"


GZIP_MAGIC = b"\x1f\x8b"


def read_lines(path: str | os.PathLike) -> list[str]:
    """The lines of a UTF-8 text file (gzip-compressed or not) by `split_lines`, without a
    byte-order mark; an unreadable file, one that is not UTF-8, or one whose lines end in lone
    carriage returns gives a ValueError naming it and saying what to do."""
    try:
        data = Path(path).read_bytes()
    except OSError as error:
        raise ValueError(f"Cannot read the text file {path}: {error}") from error
    return text_lines(data, path)


def text_lines(data: bytes, path) -> list[str]:
    """The lines of the bytes `data` read from `path` (a file's name, or e.g. "standard input"), as
    `read_lines` gives them."""
    try:
        if data.startswith(GZIP_MAGIC):  # test.de.gz, as the corpus folders hold them
            data = gzip.decompress(data)
    except (OSError, EOFError, gzip.BadGzipFile) as error:
        raise ValueError(f"Cannot read the text file {path}: {error}") from error
    try:
        text = data.decode("utf-8").removeprefix(BYTE_ORDER_MARK)
    except UnicodeDecodeError as error:
        line = data[: error.start].count(b"\n") + 1
        raise ValueError(
            f"{path} is not UTF-8 text ({error.reason} on line {line}): convert it, e.g. "
            f"iconv -f latin1 -t utf-8 < old > new."
        ) from error
    check_line_ends(path, text.count("\n"), text.count("\r") - text.count("\r\n"))
    return split_lines(text)


def check_line_ends(path, line_ends: int, lone_returns: int) -> None:
    """Refuse a file with more lone carriage returns than line ends: its lines end in ``\\r`` (old
    Mac style), and by the one rule (``\\n`` only) it would be read as one long sentence. A few
    ``\\r`` inside sentences stay allowed."""
    if lone_returns > max(line_ends, 1):  # one lone \r: one line either way
        raise ValueError(
            f"{path}: its lines end in lone carriage returns (\\r, {lone_returns} of them, and "
            f"{line_ends} \\n): it would be read as one sentence. Convert it to \\n line ends, "
            "e.g. "
            "tr '\\r' '\\n' < old > new."
        )


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    """Write `text` (UTF-8) to `path` through a temporary file beside it and a rename; return
    the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(
        "w", encoding="utf-8", dir=path.parent, prefix=f".{path.name}.", suffix=".tmp", delete=False
    ) as file:
        temporary = Path(file.name)
        try:
            file.write(text)
            file.flush()
            os.fsync(file.fileno())
            # mkstemp's 0600 would hide it from the folder's other users
            os.fchmod(file.fileno(), 0o666 & ~_umask())
        except BaseException:
            file.close()
            temporary.unlink(missing_ok=True)
            raise
    os.replace(temporary, path)
    return path


def atomic_write_json(path: str | os.PathLike, value) -> Path:
    """`atomic_write_text` of `value` as indented JSON (non-ASCII kept readable)."""
    return atomic_write_text(
        path, json.dumps(value, indent=2, ensure_ascii=False, default=str) + "\n"
    )


@contextlib.contextmanager
def atomic_directory(path: str | os.PathLike, replace: bool = False) -> Iterator[Path]:
    """Yield an empty staging folder beside `path`; on success it becomes `path`, on any error it is
    removed.

    `replace=True` lets it take the place of an existing `path` (which is removed only once the new
    one is complete); otherwise an existing `path` is an error.
    """
    path = Path(path)
    if path.exists() and not replace:
        raise ValueError(
            f"{path} already exists; choose a new output folder (nothing is overwritten)."
        )
    if replace:
        check_replaceable(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".incomplete", dir=path.parent))
    try:
        # mkdtemp's 0700 would hide the saved folder from other users
        staging.chmod(0o777 & ~_umask())
        yield staging
        if path.exists():
            old = staging.with_name(staging.name.removesuffix(".incomplete") + ".old")
            path.rename(old)
            staging.rename(path)
            shutil.rmtree(old)
        else:
            staging.rename(path)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def prepare_output_dir(
    path: str | os.PathLike,
    overwrite: bool = False,
    flag: str = "--overwrite_output_dir",
    replaced_whole: bool = False,
) -> Path:
    """Claim `path` (`claim_output_dir`), create it if needed and check, before any work, that it is
    empty (unless `overwrite`) and writable. `replaced_whole`: the run replaces the folder as a
    whole (a tokenizer, an averaged model, an export), so with `overwrite` a folder holding a
    training run is refused (`check_replaceable`)."""
    path = Path(path)
    if path.is_symlink() and not path.exists():
        raise ValueError(
            f"Output folder {path} is a broken symbolic link (to {os.readlink(path)}, which does "
            "not "
            "exist); remove the link or choose another folder."
        )
    if path.exists() and not path.is_dir():
        raise ValueError(f"Output folder {path} is a file; choose another folder.")
    if overwrite and replaced_whole:
        check_replaceable(path, flag)
    try:
        claimed_now = _claim(path)
    except OSError as error:
        raise _unwritable(path, error) from error
    try:
        _check_empty(path, overwrite, flag)
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            pass
    except BaseException as error:
        if claimed_now:
            release_output_dir(path)
        if isinstance(error, OSError):
            raise _unwritable(path, error) from error
        raise
    return path


def _check_empty(path: Path, overwrite: bool, flag: str) -> None:
    if path.is_dir() and not overwrite:
        entries = sorted(entry.name for entry in path.iterdir())
        if entries:
            shown = ", ".join(entries[:5]) + (", ..." if len(entries) > 5 else "")
            raise ValueError(
                f"Output folder {path} is not empty (holds {shown}); choose another folder, or "
                f"pass {flag} to replace what is there."
            )


# What marks a folder as a training run or a checkpoint: its optimizer state and Trainer records.
TRAINING_STATE = ("trainer_state.json", "optimizer.pt", "scheduler.pt")


def check_replaceable(path: str | os.PathLike, flag: str = "--overwrite_output_dir") -> None:
    """Refuse to replace `path` as a whole when it holds a training run or checkpoint: a tokenizer,
    an averaged model or an export written over it would delete checkpoints and optimizer states
    that took hours to make (what overwriting is for is an earlier output of the same kind)."""
    path = Path(path)
    if not path.is_dir():
        return
    found = [name for name in TRAINING_STATE if (path / name).is_file()]
    found += sorted(
        folder.name
        for folder in path.glob("checkpoint-*")
        if (folder / "trainer_state.json").is_file()
    )
    if found:
        raise ValueError(
            f"Output folder {path} holds a training run or checkpoint ({', '.join(found[:3])}"
            f"{', ...' if len(found) > 3 else ''}): {flag} would delete it. Choose another folder."
        )


@functools.cache
def _umask() -> int:
    """The process's umask (read once: setting it to read it is not thread-safe)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


_umask()  # at import, before any thread of ours runs


def _unwritable(path: Path, error: OSError) -> ValueError:
    return ValueError(
        f"Cannot write to output folder {path}: {error.strerror or error}; choose another folder."
    )


# --- Claims: one run at a time per output folder --------------------------------------------------
#
# A claim is a marker file beside the folder (``.NAME.in-use``, so that it survives the folder being
# replaced whole and never shows in it), created when a run starts and removed when it ends. The
# owner holds an exclusive lock on it: the lock dies with the process, so a run that was killed
# leaves a marker the next run takes over, while a live run's marker refuses every other run. Claims
# are per process: a process may claim a folder again.

# resolved folder -> (marker's descriptor, the claiming process)
_claims: dict[Path, tuple[int, int]] = {}


def claim_marker(path: str | os.PathLike) -> Path:
    """The marker file that claims the output folder `path`."""
    folder = Path(path).resolve()
    return folder.with_name(f".{folder.name}{CLAIM_SUFFIX}")


def claim_output_dir(path: str | os.PathLike) -> Path:
    """Claim the output folder `path` for this process until `release_output_dir`, the end of the
    enclosing `releasing_output_dirs` call, or the process's exit; refuse it (ValueError naming the
    other run) while another process holds it."""
    try:
        _claim(Path(path))
    except OSError as error:
        raise _unwritable(Path(path), error) from error
    return Path(path)


def release_output_dir(path: str | os.PathLike) -> None:
    """Give up this process's claim on `path` (nothing happens if it holds none)."""
    folder = Path(path).resolve()
    claim = _claims.pop(folder, None)
    if claim is None:
        return
    descriptor, _ = claim
    marker = claim_marker(folder)
    with contextlib.suppress(OSError):
        # a marker someone put there since is not ours to remove
        if _is_current(descriptor, marker):
            marker.unlink()
    os.close(descriptor)


def releasing_output_dirs(function: Callable) -> Callable:
    """Decorate a function that writes output folders: the folders it claims are released when it
    returns or raises, so that it can run again in the same process (a script's claims last until
    it exits)."""

    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        before = set(_claims)
        try:
            return function(*args, **kwargs)
        finally:
            for folder in set(_claims) - before:
                release_output_dir(folder)

    return wrapper


def _claim(path: Path) -> bool:
    """Claim `path`; True if this call took the claim, False if this process already held it."""
    folder = path.resolve()
    if folder in _claims:
        return False
    marker = claim_marker(folder)
    marker.parent.mkdir(parents=True, exist_ok=True)
    descriptor = _take_marker(marker, folder)
    description = (
        f"pid {os.getpid()} on {socket.gethostname()} since {time.strftime('%Y-%m-%d %H:%M:%S')}: "
        f"{' '.join([Path(sys.argv[0]).name, *sys.argv[1:]])[:300]}"
    )
    os.ftruncate(descriptor, 0)
    os.lseek(descriptor, 0, os.SEEK_SET)
    os.write(descriptor, description.encode("utf-8", "replace"))
    _claims[folder] = (descriptor, os.getpid())
    return True


def _take_marker(marker: Path, folder: Path) -> int:
    """Create or take over `marker` and lock it; a ValueError naming the holder when a live run
    has it."""
    while True:
        flags = os.O_RDWR | os.O_CREAT | (os.O_EXCL if fcntl is None else 0)
        try:
            descriptor = os.open(marker, flags, 0o644)
        except FileExistsError:
            raise ValueError(_in_use(folder, marker, marker.read_text(errors="replace"))) from None
        if fcntl is None:
            return descriptor
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(descriptor, 1000, 0).decode("utf-8", "replace")
            os.close(descriptor)
            raise ValueError(_in_use(folder, marker, holder)) from None
        except OSError as error:  # a file system without locks: the marker still tells the next run
            logger.warning(
                "Cannot lock %s (%s): a second run into %s would not be noticed.",
                marker,
                error.strerror or error,
                folder,
            )
            return descriptor
        if _is_current(descriptor, marker):
            return descriptor
        os.close(descriptor)  # its owner removed it as we opened it: take a fresh one


def _is_current(descriptor: int, marker: Path) -> bool:
    """Whether `descriptor` is still the file at `marker` (not one its owner removed meanwhile)."""
    try:
        now, ours = marker.stat(), os.fstat(descriptor)
    except OSError:
        return False
    return (now.st_dev, now.st_ino) == (ours.st_dev, ours.st_ino)


def _in_use(folder: Path, marker: Path, holder: str) -> str:
    holder = holder.strip() or "a run that is just starting"
    return (
        f"Output folder {folder} is in use by another run ({holder}): wait until it ends, or "
        "choose another "
        f"folder. The claim is {marker}; it goes away when that run ends, so delete it only if "
        "no such run is "
        "going on (e.g. one on another machine that was killed)."
    )


@atexit.register
def _release_at_exit():
    for folder, (_, process) in list(_claims.items()):
        if process == os.getpid():  # a forked child does not release its parent's claims
            release_output_dir(folder)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_claims.clear)


def check_inputs_outside(
    output_dir: str | os.PathLike,
    inputs: Mapping[str, str | os.PathLike | list | None],
    flag: str = "--output_dir",
) -> None:
    """Refuse an `output_dir` that is, or holds, one of `inputs` (what names them, e.g. "--dataset",
    -> a path or a list of paths): writing the output there would replace or delete that input.
    Paths that do not exist locally (Hub ids) are skipped."""
    output = Path(output_dir).resolve()
    for name, paths in inputs.items():
        for path in paths if isinstance(paths, (list, tuple)) else [paths]:
            if path is None or not Path(path).exists():
                continue
            source = Path(path).resolve()
            if output == source or output in source.parents:
                raise ValueError(
                    f"{flag} {output_dir} is or holds {name} {path}, an input of this run: writing "
                    "there would replace it. Choose an output folder outside it."
                )


# What marks a sub-folder as a saved model or a run of its own, which emptying a folder must not
# delete unasked.
SAVED_MARKERS = ("config.json", "trainer_state.json", CHECKSUMS_NAME)


def clear_output_dir(
    path: str | os.PathLike,
    inputs: Mapping[str, str | os.PathLike | list | None] | None = None,
    flag: str = "--overwrite_output_dir",
    deletable: Callable[[Path], bool] | None = None,
) -> None:
    """`flag` for a run that writes into its folder as it goes (training, evaluation): delete what
    `path` holds first, so that it ends holding only what this run writes, wherever the run stops (a
    file of the old run left beside the new ones is read with them: an old final model beside new
    checkpoints, old hypotheses).

    Refused, before anything is deleted, when the folder is or holds one of `inputs`
    (`check_inputs_outside`), holds the working directory, or holds a saved model or run in a
    sub-folder (anything with one of `SAVED_MARKERS`) (a folder of runs given by mistake), unless
    `deletable(sub_folder)` (a training run's own checkpoint-N)."""
    path = Path(path)
    if not path.is_dir():
        return
    check_inputs_outside(path, inputs or {})
    folder, here = path.resolve(), Path.cwd().resolve()
    if folder == here or folder in here.parents:
        raise ValueError(
            f"{flag} would delete what {path} holds, the current folder among it: choose another "
            "output folder."
        )
    entries = sorted(path.iterdir())
    saved = [
        entry.name
        for entry in entries
        if entry.is_dir()
        and not entry.is_symlink()
        and not (deletable and deletable(entry))
        and any(next(entry.rglob(marker), None) for marker in SAVED_MARKERS)
    ]
    if saved:
        raise ValueError(
            f"{flag} would delete what {path} holds, and it holds the saved model(s) or run(s) "
            f"{', '.join(saved[:3])}{', ...' if len(saved) > 3 else ''}: move them out (or "
            "delete them), "
            "or choose another output folder."
        )
    for entry in entries:
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()


def set_threads(threads: int | None) -> None:
    """`--threads`: torch's CPU threads, or torch's default for None."""
    if threads is None:
        return
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ValueError(f"--threads must be a positive number of CPU threads, got {threads!r}.")
    torch.set_num_threads(threads)


# How writers other than Python's report a full disk: torch.save a RuntimeError from its zip writer,
# the Rust writers (tokenizers, safetensors) an Exception carrying the OS error.
NO_SPACE_MESSAGES = re.compile(
    r"os error (28|122)\b|No space left|Disk quota exceeded|PytorchStreamWriter failed|"
    r"inline_container\.cc.*unexpected pos|file write failed"
)


def is_no_space_error(error: BaseException) -> bool:
    """Whether `error` (or an error it was raised from) says the disk is full, whichever
    library wrote."""
    while error is not None:
        if isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        if not isinstance(error, OSError) and NO_SPACE_MESSAGES.search(str(error)):
            return True
        error = error.__cause__ or error.__context__
    return False


class DiskFull(OSError):
    """The disk filled up while saving something: errno ENOSPC and a one-line message saying what
    and what to do."""


@contextlib.contextmanager
def no_space_reported(what: str, advice: str = "free space and run again") -> Iterator[None]:
    """A full disk while saving `what` becomes one `DiskFull` error saying so, whichever library was
    writing (torch and the Rust writers raise errors of their own, which would end a script in a
    traceback); other errors pass."""
    try:
        yield
    except DiskFull:
        raise
    except Exception as error:
        if not is_no_space_error(error):
            raise
        raise DiskFull(
            errno.ENOSPC, f"No space left on the device while saving {what}: {advice}."
        ) from error


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def write_checksums(folder: str | os.PathLike) -> Path:
    """Write ``checksums.json``: the SHA-256 of every file in `folder` (not in sub-folders),
    written last."""
    folder = Path(folder)
    files = sorted(
        path
        for path in folder.iterdir()
        if path.is_file()
        and path.name != CHECKSUMS_NAME
        and not UNCHECKED_FILES.fullmatch(path.name)
    )
    return atomic_write_json(
        folder / CHECKSUMS_NAME, {"sha256": {path.name: file_sha256(path) for path in files}}
    )


def verify_checksums(
    folder: str | os.PathLike, required: bool = False, optional: re.Pattern | None = None
) -> bool:
    """Check `folder` against its ``checksums.json``; a missing or changed file raises a ValueError
    naming it and saying how to accept the folder as it is. Files whose names match `optional` (what
    the caller does not need, e.g. a model's training records) are not checked: a copy without them
    is whole.

    Returns False when there is no manifest (models saved before manifests existed, or by other
    tools), which is an error only with `required`.
    """
    folder = Path(folder)
    manifest_path = folder / CHECKSUMS_NAME
    if not manifest_path.is_file():
        if required:
            raise ValueError(f"{folder} has no {CHECKSUMS_NAME}: it was not completely written.")
        return False
    try:
        expected = json.loads(manifest_path.read_text(encoding="utf-8"))["sha256"]
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError) as error:
        raise ValueError(
            f"{manifest_path} is unreadable or damaged ({error}); the folder cannot be checked."
        ) from error
    accept = f"if the folder is meant to be as it is now, record it so: {RECORD_COMMAND} {folder}"
    for name, digest in expected.items():
        if optional is not None and optional.fullmatch(name):
            continue
        path = folder / name
        if not path.is_file():
            raise ValueError(
                f"{path} is missing (listed in {CHECKSUMS_NAME}) and is needed: the folder is "
                f"incomplete. Copy it from where the folder was saved; {accept}."
            )
        if file_sha256(path) != digest:
            raise ValueError(
                f"{path} does not match its checksum in {CHECKSUMS_NAME}: the file is corrupted "
                "or was changed after saving. Restore it from a copy or save the model again; "
                f"{accept}."
            )
    return True


def looks_like_hub_id(name: str) -> bool:
    """True for "user/name" (a Hub repository id); False for anything shaped like a local path."""
    return (
        bool(re.fullmatch(r"[\w.-]+/[\w.-]+", name))
        and not name.startswith((".", "~"))
        and not Path(name.split("/")[0]).is_dir()
    )


def check_local_or_hub(name: str | os.PathLike, what: str) -> None:
    """Refuse a `name` that is meant as a local folder but does not exist, before transformers asks
    the Hub (a typo in a path would otherwise become a Hub lookup, which can take a minute to
    time out)."""
    if Path(name).is_file():
        raise ValueError(
            f"{what} {name} is a file; give the folder that holds the saved model or tokenizer."
        )
    if Path(name).exists():
        return
    if not looks_like_hub_id(str(name)):
        raise ValueError(
            f"{what} {name}: no such folder (a Hub id looks like 'user/name'). Check the path."
        )
    check_hub_reachable(str(name), what)


HUB_PROBE_SECONDS = 5


def check_hub_reachable(repo_id: str, what: str, repo_type: str = "model") -> None:
    """Ask the Hub once, briefly, before transformers or datasets look `repo_id` up: unreachable,
    they retry for about a minute before they fail, and a mistyped local folder ("rnus/model") looks
    like a Hub id. A repository in the local cache, or offline mode, is left to them (they load from
    the cache)."""
    if constants.HF_HUB_OFFLINE:
        return
    names = ("config.json", "tokenizer.json") if repo_type == "model" else ("README.md",)
    if any(
        isinstance(try_to_load_from_cache(repo_id, name, repo_type=repo_type), str)
        for name in names
    ):
        return
    try:
        get_session().head(constants.ENDPOINT, timeout=HUB_PROBE_SECONDS)
    # whatever the HTTP client raises: the Hub cannot be asked
    except Exception as error:  # noqa: BLE001
        raise ValueError(
            f"{what} {repo_id}: no such local folder, and the Hub ({constants.ENDPOINT}) cannot be "
            f"reached to look for a repository of that name ({error}). Check the path, or the "
            "network."
        ) from error


__all__ = [
    "CHECKSUMS_NAME",
    "BYTE_ORDER_MARK",
    "check_line_ends",
    "split_lines",
    "strip_line_end",
    "read_lines",
    "atomic_write_text",
    "atomic_write_json",
    "atomic_directory",
    "prepare_output_dir",
    "check_replaceable",
    "claim_output_dir",
    "claim_marker",
    "release_output_dir",
    "releasing_output_dirs",
    "check_inputs_outside",
    "is_no_space_error",
    "no_space_reported",
    "DiskFull",
    "write_checksums",
    "verify_checksums",
    "check_local_or_hub",
]
