"""What every route needs: the engine, the settings, the request log and the live requests."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..runtime.types import EngineClient, RequestHandle
from .live import LiveSet
from .request_log import RequestLog
from .settings import ApiSettings


@dataclass
class ApiContext:
    engine: EngineClient
    settings: ApiSettings
    request_log: RequestLog
    _active: LiveSet[RequestHandle] = field(default_factory=LiveSet)

    def track(self, handle: RequestHandle) -> None:
        self._active.add(handle.request_id, handle)

    def untrack(self, request_id: str) -> None:
        self._active.remove(request_id)

    def active_count(self) -> int:
        return self._active.count()

    def cancel_all(self) -> int:
        """Cancel every engine request this app started (server stop after its grace period)."""
        handles = self._active.take_all()
        for h in handles:
            h.cancel()
        return len(handles)
