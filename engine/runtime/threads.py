"""Keep CPU torch work off long-lived threads, so that the engine thread's OpenMP team is fast.

PyTorch's CPU kernels run on OpenMP (GNU libgomp in the Linux wheels). Every thread that runs
a multi-threaded torch op gets its own team of worker threads, and that team lives as long as
the thread. libgomp counts all those workers, and once they outnumber the CPUs it makes every
team's workers go to sleep almost at once after each parallel region instead of spinning for
the next one (a 100-spin wait instead of 300,000). A decode step is a thousand small parallel
regions, so each then pays a futex wake-up: measured on the 2-core VM, a 64 x 896 SiLU went
from 60 to 265 us and a Qwen2.5-0.5B W8A16 decode step from 68 to 109 ms when the main thread
had done one parallel matmul before the engine thread started (docs/engine.md, "Threads").

A thread's team is freed when the thread ends. So loading, quantizing and measuring run on a
short-lived thread (`run_in_fresh_thread`) and the engine thread is the only long-lived one
holding a team.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def run_in_fresh_thread(fn: Callable[..., T], /, *args: Any, name: str = "torch-work",
                        **kwargs: Any) -> T:
    """Call fn(*args, **kwargs) on a new thread, wait for it, return its result or raise its
    exception. The wait wakes up often, so Ctrl-C still reaches the caller (the work thread is
    a daemon and ends with the process)."""
    box: dict[str, Any] = {}

    def work() -> None:
        try:
            box["result"] = fn(*args, **kwargs)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller
            box["error"] = exc

    t = threading.Thread(target=work, name=name, daemon=True)
    t.start()
    while t.is_alive():
        t.join(0.1)
    if "error" in box:
        raise box["error"]
    return box["result"]
