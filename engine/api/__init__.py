"""OpenAI-compatible HTTP API over an EngineClient (FastAPI + uvicorn; no Qt).

`build_app(engine, settings)` gives the ASGI app; `ServerController` runs it on a thread of its
own for the GUI and for `npu-console serve`. Names are imported on first use, so that checking
settings (`engine.api.settings`) does not pay for importing FastAPI.
"""

from __future__ import annotations

import importlib

_WHERE = {
    "build_app": "engine.api.app",
    "RequestLog": "engine.api.request_log",
    "RequestLogEntry": "engine.api.request_log",
    "PortInUseError": "engine.api.ports",
    "ServerController": "engine.api.server",
    "ServerStartError": "engine.api.ports",
    "port_in_use": "engine.api.ports",
    "ApiSettings": "engine.api.settings",
    "UnsafeSettingsError": "engine.api.settings",
}

__all__ = [
    "ApiSettings", "PortInUseError", "RequestLog", "RequestLogEntry", "ServerController",
    "ServerStartError", "UnsafeSettingsError", "build_app", "port_in_use",
]


def __getattr__(name: str):
    if name in _WHERE:
        return getattr(importlib.import_module(_WHERE[name]), name)
    raise AttributeError(f"module 'engine.api' has no attribute {name!r}")
