"""Safe file handling shared by training, evaluation, averaging, tokenizers and the Hub code.

- One line-splitting rule (`split_lines`, `strip_line_end`): a line ends at ``\\n`` (an ``\\r`` before it is
  dropped) and nowhere else, so U+2028, U+0085, form feeds or a lone ``\\r`` inside a sentence never shift
  the lines of one file against those of another (``str.splitlines`` splits on all of them).
- One atomic-write rule (`atomic_write_text`, `atomic_directory`): a file or folder is written under a
  temporary name beside its destination and renamed into place when complete, so no reader ever sees
  a half-written one.
- Output folders are checked before any work (`prepare_output_dir`): refused when they hold something,
  unless overwriting was asked for, and probed for writability.
- A checksum manifest (`write_checksums`, `verify_checksums`): safetensors has no checksum, so a saved
  model or checkpoint gets ``checksums.json`` (SHA-256 of each file), checked before it is used.
"""

import contextlib
import errno
import hashlib
import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import torch

CHECKSUMS_NAME = "checksums.json"
# Files that change after a model is saved (logs, metrics written later): never in a manifest.
UNCHECKED_FILES = re.compile(r".*\.log|.*_results\.json|.*\.tmp")


def strip_line_end(line: str) -> str:
    """A line without its ``\\n`` or ``\\r\\n`` end (the one rule every reader of line files follows)."""
    line = line.removesuffix("\n")
    return line.removesuffix("\r")


def split_lines(text: str) -> list[str]:
    """The lines of `text`, split at ``\\n`` only (see the module docstring); no empty last line for a final newline."""
    if not text:
        return []
    return [strip_line_end(line) for line in text.removesuffix("\n").split("\n")]


BYTE_ORDER_MARK = "\ufeff"  # some Windows editors start UTF-8 files with it; it is no part of the first sentence


def read_lines(path: str | os.PathLike) -> list[str]:
    """The lines of a UTF-8 text file by `split_lines`, without a byte-order mark; an unreadable file, or one whose
    lines end in lone carriage returns, gives a ValueError naming it."""
    try:
        text = Path(path).read_bytes().decode("utf-8").removeprefix(BYTE_ORDER_MARK)
    except (OSError, UnicodeDecodeError) as error:
        raise ValueError(f"Cannot read the text file {path}: {error}") from error
    check_line_ends(path, text.count("\n"), text.count("\r") - text.count("\r\n"))
    return split_lines(text)


def check_line_ends(path, line_ends: int, lone_returns: int) -> None:
    """Refuse a file with more lone carriage returns than line ends: its lines end in ``\\r`` (old Mac style),
    and by the one rule (``\\n`` only) it would be read as one long sentence. A few ``\\r`` inside sentences
    stay allowed."""
    if lone_returns > max(line_ends, 1):  # one lone \r: one line either way
        raise ValueError(f"{path}: its lines end in lone carriage returns (\\r, {lone_returns} of them, and "
                         f"{line_ends} \\n): it would be read as one sentence. Convert it to \\n line ends, e.g. "
                         "tr '\\r' '\\n' < old > new.")


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    """Write `text` (UTF-8) to `path` through a temporary file beside it and a rename; return the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", encoding="utf-8", dir=path.parent, prefix=f".{path.name}.", suffix=".tmp",
                                     delete=False) as file:
        temporary = Path(file.name)
        try:
            file.write(text)
            file.flush()
            os.fsync(file.fileno())
        except BaseException:
            file.close()
            temporary.unlink(missing_ok=True)
            raise
    os.replace(temporary, path)
    return path


def atomic_write_json(path: str | os.PathLike, value) -> Path:
    """`atomic_write_text` of `value` as indented JSON (non-ASCII kept readable)."""
    return atomic_write_text(path, json.dumps(value, indent=2, ensure_ascii=False, default=str) + "\n")


@contextlib.contextmanager
def atomic_directory(path: str | os.PathLike, replace: bool = False) -> Iterator[Path]:
    """Yield an empty staging folder beside `path`; on success it becomes `path`, on any error it is removed.

    `replace=True` lets it take the place of an existing `path` (which is removed only once the new one is
    complete); otherwise an existing `path` is an error.
    """
    path = Path(path)
    if path.exists() and not replace:
        raise ValueError(f"{path} already exists; choose a new output folder (nothing is overwritten).")
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".incomplete", dir=path.parent))
    try:
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


def prepare_output_dir(path: str | os.PathLike, overwrite: bool = False, flag: str = "--overwrite_output_dir") -> Path:
    """Create `path` if needed and check, before any work, that it is empty (unless `overwrite`) and writable."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise ValueError(f"Output folder {path} is a file; choose another folder.")
    if path.is_dir() and not overwrite:
        entries = sorted(entry.name for entry in path.iterdir())
        if entries:
            shown = ", ".join(entries[:5]) + (", ..." if len(entries) > 5 else "")
            raise ValueError(f"Output folder {path} is not empty (holds {shown}); choose another folder, or pass "
                             f"{flag} to replace what is there.")
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as error:
        raise ValueError(f"Cannot write to output folder {path}: {error.strerror or error}; choose another "
                         "folder.") from error
    return path


def set_threads(threads: int | None) -> None:
    """`--threads`: torch's CPU threads, or torch's default for None."""
    if threads is None:
        return
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ValueError(f"--threads must be a positive number of CPU threads, got {threads!r}.")
    torch.set_num_threads(threads)


def is_no_space_error(error: BaseException) -> bool:
    return isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT)


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def write_checksums(folder: str | os.PathLike) -> Path:
    """Write ``checksums.json``: the SHA-256 of every file in `folder` (not in sub-folders), written last."""
    folder = Path(folder)
    files = sorted(path for path in folder.iterdir()
                   if path.is_file() and path.name != CHECKSUMS_NAME and not UNCHECKED_FILES.fullmatch(path.name))
    return atomic_write_json(folder / CHECKSUMS_NAME, {"sha256": {path.name: file_sha256(path) for path in files}})


def verify_checksums(folder: str | os.PathLike, required: bool = False) -> bool:
    """Check `folder` against its ``checksums.json``; a missing or changed file raises a ValueError naming it.

    Returns False when there is no manifest (models saved before manifests existed, or by other tools),
    which is an error only with `required`.
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
        raise ValueError(f"{manifest_path} is unreadable or damaged ({error}); the folder cannot be checked.") from error
    for name, digest in expected.items():
        path = folder / name
        if not path.is_file():
            raise ValueError(f"{path} is missing (listed in {CHECKSUMS_NAME}): the saved model is incomplete.")
        if file_sha256(path) != digest:
            raise ValueError(f"{path} does not match its checksum in {CHECKSUMS_NAME}: the file is corrupted or "
                             "was changed after saving. Restore it from a copy or save the model again.")
    return True


def looks_like_hub_id(name: str) -> bool:
    """True for "user/name" (a Hub repository id); False for anything shaped like a local path."""
    return bool(re.fullmatch(r"[\w.-]+/[\w.-]+", name)) and not name.startswith((".", "~")) and not Path(
        name.split("/")[0]).is_dir()


def check_local_or_hub(name: str | os.PathLike, what: str) -> None:
    """Refuse a `name` that is meant as a local folder but does not exist, before transformers asks the Hub
    (a typo in a path would otherwise become a Hub lookup, which can take a minute to time out)."""
    if Path(name).is_file():
        raise ValueError(f"{what} {name} is a file; give the folder that holds the saved model or tokenizer.")
    if Path(name).exists():
        return
    if not looks_like_hub_id(str(name)):
        raise ValueError(f"{what} {name}: no such folder (a Hub id looks like 'user/name'). Check the path.")
    check_hub_reachable(str(name), what)


HUB_PROBE_SECONDS = 5


def check_hub_reachable(repo_id: str, what: str, repo_type: str = "model") -> None:
    """Ask the Hub once, briefly, before transformers or datasets look `repo_id` up: unreachable, they retry for
    about a minute before they fail, and a mistyped local folder ("rnus/model") looks like a Hub id. A repository
    in the local cache, or offline mode, is left to them (they load from the cache)."""
    from huggingface_hub import constants, try_to_load_from_cache
    from huggingface_hub.utils import get_session

    if constants.HF_HUB_OFFLINE:
        return
    names = ("config.json", "tokenizer.json") if repo_type == "model" else ("README.md",)
    if any(isinstance(try_to_load_from_cache(repo_id, name, repo_type=repo_type), str) for name in names):
        return
    try:
        get_session().head(constants.ENDPOINT, timeout=HUB_PROBE_SECONDS)
    except Exception as error:  # noqa: BLE001  (whatever the HTTP client raises: the Hub cannot be asked)
        raise ValueError(f"{what} {repo_id}: no such local folder, and the Hub ({constants.ENDPOINT}) cannot be "
                         f"reached to look for a repository of that name ({error}). Check the path, or the "
                         "network.") from error


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
    "write_checksums",
    "verify_checksums",
    "check_local_or_hub",
]
