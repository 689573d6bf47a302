"""OpenAI-compatible HTTP API over an EngineClient (FastAPI + uvicorn; no Qt).

`build_app(engine, settings)` gives the ASGI app; `ServerController` runs it on a thread of its
own for the GUI and for `npu-console serve`.
"""

from engine.api.app import build_app
from engine.api.request_log import RequestLog, RequestLogEntry
from engine.api.server import PortInUseError, ServerController, ServerStartError, port_in_use
from engine.api.settings import ApiSettings, UnsafeSettingsError

__all__ = [
    "ApiSettings",
    "PortInUseError",
    "RequestLog",
    "RequestLogEntry",
    "ServerController",
    "ServerStartError",
    "UnsafeSettingsError",
    "build_app",
    "port_in_use",
]
