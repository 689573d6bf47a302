"""The console's Qt-free models announce their changes through an Emitter: plain callbacks,
called on the thread that emits (the GUI thread, for every model fed from Qt signals), so a
model can be tested, and driven, without Qt."""

from __future__ import annotations

import logging
from collections.abc import Callable

log = logging.getLogger(__name__)


class Emitter:
    def __init__(self):
        self._listeners: dict[str, list[Callable]] = {}

    def subscribe(self, event: str, fn: Callable) -> Callable[[], None]:
        """Call `fn(*args)` on every `emit(event, *args)`; returns the unsubscribe."""
        self._listeners.setdefault(event, []).append(fn)

        def unsubscribe() -> None:
            fns = self._listeners.get(event, [])
            if fn in fns:
                fns.remove(fn)

        return unsubscribe

    def emit(self, event: str, *args) -> None:
        # one failing listener must not keep the others (or the model) from the news
        for fn in list(self._listeners.get(event, ())):
            try:
                fn(*args)
            except Exception:
                log.exception("listener of %r failed", event)
