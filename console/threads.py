"""Where the console starts its worker threads: `start_thread` (the engine host's loads, the
job runner in console/jobs.py, the server service's start / stop, the telemetry control); the
bridge (console/bridge.py) starts its stream readers and sampler itself. Never a page
(tests/test_architecture_bars.py checks that). No Qt here."""

from __future__ import annotations

import threading
from collections.abc import Callable


def start_thread(fn: Callable[[], object], name: str) -> threading.Thread:
    """Run `fn` on a new daemon thread named `name` (daemon: a hung worker never keeps the
    process alive after the window closed); returns the started thread."""
    t = threading.Thread(target=fn, name=name, daemon=True)
    t.start()
    return t
