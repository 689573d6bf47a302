"""What a stopping server must reach that is still in flight (engine requests, open streams):
a registry any thread adds to and removes from, read out whole when the server stops."""

from __future__ import annotations

import threading
from typing import Generic, TypeVar

T = TypeVar("T")


class LiveSet(Generic[T]):
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._items: dict[object, T] = {}
        self.closed = False  # set by take_all(close=True): later arrivals end on their own

    def add(self, key: object, item: T) -> None:
        with self._lock:
            self._items[key] = item

    def remove(self, key: object) -> None:
        with self._lock:
            self._items.pop(key, None)

    def count(self) -> int:
        with self._lock:
            return len(self._items)

    def take_all(self, close: bool = False) -> list[T]:
        """The items in flight now (they stay registered until their owners remove them)."""
        with self._lock:
            self.closed = self.closed or close
            return list(self._items.values())
