"""Polling helpers: wait until something is true, and say what was awaited when it is not."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(predicate: Callable[[], T], timeout: float, what: str = "the condition",
             step: float = 0.05) -> T:
    """The first truthy value of predicate() within timeout seconds, else AssertionError."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(step)
    raise AssertionError(f"timed out after {timeout:.1f} s waiting for {what}")


def free_port() -> int:
    """A loopback port nobody listens on right now (the OS's choice)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
