"""Freed memory back to the system. glibc keeps what a process frees in its heaps for the next
allocation; reading a GGUF a tensor at a time frees buffers of every size, and a 7B model's
load ended holding 1.26 GB of them beside 7.38 GB of live tensors (docs/benchmarks.md, "fp16
scales in the packed layout"). malloc_trim hands the whole free pages of every heap back."""

from __future__ import annotations

import ctypes
import ctypes.util
import functools


@functools.cache
def _malloc_trim():
    """glibc's malloc_trim, or None (musl, macOS, Windows: nothing to call)."""
    name = ctypes.util.find_library("c")
    try:
        fn = ctypes.CDLL(name).malloc_trim if name else None
    except (OSError, AttributeError):
        return None
    if fn is not None:
        fn.argtypes, fn.restype = [ctypes.c_size_t], ctypes.c_int
    return fn


def give_back_freed_memory() -> bool:
    """Return the free pages of the process's heaps to the system (a few ms); False where the C
    library has no malloc_trim."""
    fn = _malloc_trim()
    if fn is None:
        return False
    fn(0)
    return True
