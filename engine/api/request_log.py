"""A bounded log of recent HTTP requests that a GUI can show and subscribe to.

Entries are immutable dataclasses; subscribers are called on the server's thread, so a GUI must
hop to its own thread (the console's bridge does that with a queued signal).
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger("npu_console.engine.api")


@dataclass(frozen=True)
class RequestLogEntry:
    time: float  # time.time() when the request arrived
    method: str
    route: str
    status: int
    duration_s: float
    model: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    ttft_s: float | None = None
    stream: bool = False
    client: str | None = None
    finish_reason: str | None = None
    error: str | None = None  # the error message for 4xx/5xx answers
    prompt: str | None = None  # only when prompt logging is enabled
    # the matched route's template ("/v1/models/{model_id:path}"), None for no route: what
    # metrics label requests with, so that clients cannot make up new label values
    template: str | None = None


@dataclass
class RequestInfo:
    """Filled in by a route while it runs; turned into a RequestLogEntry when the response ends."""

    model: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    ttft_s: float | None = None
    stream: bool = False
    finish_reason: str | None = None
    error: str | None = None
    prompt: str | None = None


Subscriber = Callable[[RequestLogEntry], None]


class RequestLog:
    def __init__(self, size: int = 500):
        self._entries: deque[RequestLogEntry] = deque(maxlen=max(1, size))
        self._subscribers: list[Subscriber] = []
        self._lock = threading.Lock()

    def add(self, entry: RequestLogEntry) -> None:
        with self._lock:
            self._entries.append(entry)
            subscribers = list(self._subscribers)
        for fn in subscribers:
            try:
                fn(entry)
            except Exception:  # a broken viewer must not break serving
                log.exception("request log subscriber failed")

    def entries(self) -> list[RequestLogEntry]:
        with self._lock:
            return list(self._entries)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def subscribe(self, fn: Subscriber) -> Callable[[], None]:
        """Call `fn(entry)` for each new entry; returns the function that unsubscribes."""
        with self._lock:
            self._subscribers.append(fn)

        def unsubscribe() -> None:
            with self._lock:
                if fn in self._subscribers:
                    self._subscribers.remove(fn)

        return unsubscribe

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)
