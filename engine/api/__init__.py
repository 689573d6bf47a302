"""OpenAI-compatible HTTP API over an EngineClient (FastAPI + uvicorn; no Qt).

`build_app(engine, settings)` gives the ASGI app; `ServerController` runs it on a thread of its
own for the GUI and for `npu-console serve`. Names are imported on first use, so that checking
settings (`engine.api.settings`) does not pay for importing FastAPI.
"""

from __future__ import annotations

import importlib

_WHERE = {
    "build_app": "npu_console.engine.api.app",
    "RequestLog": "npu_console.engine.api.request_log",
    "RequestLogEntry": "npu_console.engine.api.request_log",
    "PortInUseError": "npu_console.engine.api.ports",
    "ServerController": "npu_console.engine.api.server",
    "ServerStartError": "npu_console.engine.api.ports",
    "port_in_use": "npu_console.engine.api.ports",
    "ApiSettings": "npu_console.engine.api.settings",
    "UnsafeSettingsError": "npu_console.engine.api.settings",
}

__all__ = [
    "ApiSettings", "PortInUseError", "RequestLog", "RequestLogEntry", "ServerController",
    "ServerStartError", "UnsafeSettingsError", "build_app", "port_in_use",
]


def __getattr__(name: str):
    if name in _WHERE:
        return getattr(importlib.import_module(_WHERE[name]), name)
    raise AttributeError(f"module 'npu_console.engine.api' has no attribute {name!r}")
