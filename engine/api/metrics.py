"""The Prometheus registry behind GET /metrics: engine, telemetry and the API's own counters.

The engine and telemetry exporters live with their owners (engine/runtime/prometheus.py,
engine/telemetry/prometheus.py); this module only puts them in one registry per app, so several
apps (tests, GUI restarts) never collide in prometheus_client's global registry.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

from .context import ApiContext
from .request_log import RequestLogEntry

log = logging.getLogger("npu_console.engine.api")


class ApiMetrics:
    def __init__(self, ctx: ApiContext, telemetry_poller: Any = None):
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter("npu_console_api_requests", "HTTP requests answered",
                                ["route", "status"], registry=self.registry)
        self.tokens = Counter("npu_console_api_tokens", "Tokens through the HTTP API",
                              ["kind"], registry=self.registry)
        live = Gauge("npu_console_api_engine_requests_live",
                     "Engine requests started by HTTP clients and not yet finished",
                     registry=self.registry)
        live.set_function(ctx.active_count)
        self._detach: list[Callable[[], None]] = []
        self._register_engine(ctx.engine)
        if telemetry_poller is not None:
            self._register_telemetry(telemetry_poller)
        self._detach.append(ctx.request_log.subscribe(self._on_request))

    def close(self) -> None:
        """Detach from the engine and the request log, which outlive this app (GUI restarts)."""
        while self._detach:
            self._detach.pop()()

    def _register_engine(self, engine: Any) -> None:
        try:
            from ..runtime.prometheus import register_engine_metrics
        except ImportError:
            log.warning("engine metrics exporter not available; /metrics shows API metrics only")
            return
        detach = register_engine_metrics(self.registry, engine)
        if callable(detach):
            self._detach.append(detach)

    def _register_telemetry(self, poller: Any) -> None:
        try:
            from ..telemetry.prometheus import TelemetryCollector
        except ImportError:
            log.warning("telemetry exporter not available; /metrics has no device metrics")
            return
        self.registry.register(TelemetryCollector(poller))

    def _on_request(self, entry: RequestLogEntry) -> None:
        # route templates only: a raw path would let any client add label values without end
        self.requests.labels(entry.template or "unmatched", str(entry.status)).inc()
        if entry.prompt_tokens:
            self.tokens.labels("prompt").inc(entry.prompt_tokens)
        if entry.completion_tokens:
            self.tokens.labels("completion").inc(entry.completion_tokens)

    def render(self) -> bytes:
        return generate_latest(self.registry)
