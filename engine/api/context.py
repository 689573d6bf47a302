"""What every route needs: the engine, the settings, the request log and the live requests."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from npu_console.engine.api.request_log import RequestLog
from npu_console.engine.api.settings import ApiSettings
from npu_console.engine.runtime.types import EngineClient, RequestHandle


@dataclass
class ApiContext:
    engine: EngineClient
    settings: ApiSettings
    request_log: RequestLog
    _active: dict[str, RequestHandle] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def track(self, handle: RequestHandle) -> None:
        with self._lock:
            self._active[handle.request_id] = handle

    def untrack(self, request_id: str) -> None:
        with self._lock:
            self._active.pop(request_id, None)

    def active_count(self) -> int:
        with self._lock:
            return len(self._active)

    def cancel_all(self) -> int:
        """Cancel every engine request this app started (server stop after its grace period)."""
        with self._lock:
            handles = list(self._active.values())
        for h in handles:
            h.cancel()
        return len(handles)
