"""The console's one route from a worker thread back to the GUI thread: `post(fn, *args)`.

Loads, jobs, server start / stop, attached servers and the fleet's pollers all finish on worker
threads, and all of them hand their news to the GUI thread through here: one queue, so what one
worker posts arrives in the order it was posted, and a call that fails (a widget deleted while
the call waited, a page's bug) is logged without taking the window or the other calls with it.
The one other way news reaches the GUI is the bridge's token buffers, which worker threads fill
and a GUI-thread timer drains (console/bridge.py): a throttle for streams, not a call.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from PySide6.QtCore import QCoreApplication, QObject, Qt, Signal

log = logging.getLogger(__name__)


class _Poster(QObject):
    call = Signal(object, object)  # fn, args

    def __init__(self):
        super().__init__()
        self.call.connect(self._run, Qt.QueuedConnection)

    def _run(self, fn: Callable, args: tuple) -> None:
        try:
            fn(*args)
        except RuntimeError as exc:
            if "already deleted" in str(exc):  # its widget went while the call was queued
                log.debug("posted call to a deleted object: %s", exc)
            else:
                log.exception("posted call %r failed", fn)
        except Exception:  # one failing call must not stop the others
            log.exception("posted call %r failed", fn)


_poster: _Poster | None = None
_lock = threading.Lock()


def _instance() -> _Poster:
    global _poster
    with _lock:
        if _poster is None:
            app = QCoreApplication.instance()
            if app is None:
                raise RuntimeError("post() needs the console's QApplication")
            p = _Poster()
            p.moveToThread(app.thread())  # its slot runs there, whoever made it first
            _poster = p
        return _poster


def post(fn: Callable, *args) -> None:
    """Call `fn(*args)` on the GUI thread, after what is already queued there. Safe from any
    thread, the GUI thread included (the call then waits for the next turn of the loop)."""
    _instance().call.emit(fn, args)
