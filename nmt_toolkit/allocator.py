"""glibc's allocator told to keep the memory a process frees (`keep_freed_memory`): a process-wide
setting for a decoding process. The translate and evaluate commands make it
(`evaluation.prepare_decoding_process`; `--no_keep_freed_memory` leaves glibc's defaults), the
models' `generate()` never does: the process is its owner's. The benchmark (`nmt_toolkit.lab.speed`)
measures with and without it.
"""

import ctypes
import os
import platform

# glibc's mallopt parameters, and the largest block it will serve from the heap (HEAP_MAX_SIZE / 2
# on 64-bit).
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
HEAP_BLOCK_LIMIT = 32 << 20
# mallopt takes an int: 2 GB free at the top of the heap before any is returned
NEVER_TRIM = 2**31 - 1
ALLOCATOR_VARIABLES = (
    "MALLOC_MMAP_THRESHOLD_",
    "MALLOC_TRIM_THRESHOLD_",
    "MALLOC_TOP_PAD_",
    "MALLOC_MMAP_MAX_",
)
_freed_memory_kept = False


def freed_memory_kept() -> bool:
    """Whether `keep_freed_memory` has told this process's allocator to keep freed memory."""
    return _freed_memory_kept


def keep_freed_memory() -> bool:
    """Tell glibc's allocator to keep the memory this process frees for its next allocations, as
    `MALLOC_MMAP_THRESHOLD_=33554432 MALLOC_TRIM_THRESHOLD_=<large>` would: blocks up to 32 MB come
    from the heap and the heap is not trimmed. Decoding allocates and frees large tensors at every
    step, the self-attention cache a little larger than the step before; by default glibc serves
    such blocks with fresh zeroed pages from the operating system and hands them back when they are
    freed (docs/inference.md has what it costs). CTranslate2 keeps its memory the same way, with a
    caching allocator of its own.

    Process-wide, as those environment variables are: the process keeps the memory it has freed (its
    peak, up to 2 GB free) instead of returning it. Returns True if the allocator was told so;
    False, changing nothing, where the C library is not glibc or the environment already sets one of
    glibc's MALLOC_ variables (the user's own choice)."""
    global _freed_memory_kept
    if _freed_memory_kept:
        return True
    if (
        platform.system() != "Linux"
        or platform.libc_ver()[0] != "glibc"
        or any(name in os.environ for name in ALLOCATOR_VARIABLES)
    ):
        return False
    libc = ctypes.CDLL("libc.so.6")
    _freed_memory_kept = bool(
        libc.mallopt(M_MMAP_THRESHOLD, HEAP_BLOCK_LIMIT)
        and libc.mallopt(M_TRIM_THRESHOLD, NEVER_TRIM)
    )
    return _freed_memory_kept


__all__ = ["freed_memory_kept", "keep_freed_memory"]
