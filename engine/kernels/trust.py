"""Trust rules for the compiled-kernel cache: a shared object is code, so one is loaded only
from a folder that belongs to the current user and no one else can write (0700), and only if
it is a regular file owned by that user and not writable by group or others. Anything else
(planted by another local user, who can compute its name, or loosened by a chmod) is refused
and rebuilt."""

from __future__ import annotations

import ctypes
import os
import stat
from pathlib import Path


def private_dir(d: Path) -> str | None:
    """Create `d` (0700) or tighten it to 0700; why it cannot be used, or None."""
    d.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = os.lstat(d)
    if not stat.S_ISDIR(st.st_mode):
        return f"{d} is not a folder"
    if st.st_uid != os.getuid():
        return f"{d} belongs to another user (uid {st.st_uid})"
    if stat.S_IMODE(st.st_mode) != 0o700:
        os.chmod(d, 0o700)
    return None


def untrusted(path: Path, folder: bool = False) -> str | None:
    """Why the cached file (or, `folder`, the cache entry folder) at `path` must not be read,
    or None when it may be."""
    return _untrusted_stat(os.lstat(path), folder)


_LOADED_FDS: list[int] = []


def load_trusted(path: Path) -> ctypes.CDLL:
    """dlopen `path` as checked: opened once (O_NOFOLLOW: no symlink), the open file checked
    with fstat, and loaded from that descriptor through /proc/self/fd, so a file swapped in
    between the check and the load is never the one loaded. OSError when it is refused."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        why = _untrusted_stat(os.fstat(fd))
        if why is not None:
            raise OSError(f"refusing {path}: {why}")
        by_fd = f"/proc/self/fd/{fd}"
        # without /proc (not Linux) the path is loaded: its folder is private (private_dir)
        lib = ctypes.CDLL(by_fd if os.path.exists(by_fd) else str(path))
    except BaseException:
        os.close(fd)
        raise
    # The descriptor stays open as long as the process: dlopen knows a library by the name it
    # was opened under, so a later load of another build through a reused /proc/self/fd/N
    # would be handed this one (a test build with other flags got the wrong symbols)
    _LOADED_FDS.append(fd)
    return lib


def _untrusted_stat(st: os.stat_result, folder: bool = False) -> str | None:
    if folder and not stat.S_ISDIR(st.st_mode):
        return "not a folder"
    if not folder and not stat.S_ISREG(st.st_mode):
        return "not a regular file"
    if st.st_uid != os.getuid():
        return f"owned by uid {st.st_uid}, not by this user ({os.getuid()})"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return "writable by group or others"
    return None
