"""HTTP answers of an OpenAI-compatible server mapped to the engine's typed errors (types.py)."""

from __future__ import annotations

import json

import httpx

from ..runtime.types import (
    ContextLengthError,
    EngineError,
    InvalidRequestError,
    ModelNotFoundError,
    NoModelLoadedError,
    QueueFullError,
)
from .sse import error_message


class RemoteConnectionError(EngineError):
    """The remote server cannot be reached (refused, timed out, TLS, DNS)."""

    http_status = 503
    error_type = "service_unavailable"


class RemoteAuthError(EngineError):
    """The remote server refused the API key (HTTP 401 / 403)."""

    http_status = 401
    error_type = "authentication_error"


def _retry_after(headers: httpx.Headers) -> float:
    try:
        return max(0.0, float(headers.get("retry-after", "1")))
    except ValueError:
        return 1.0


def error_from_response(status: int, content: bytes, headers: httpx.Headers | None = None,
                        url: str = "") -> EngineError:
    try:
        body = json.loads(content) if content else None
    except (json.JSONDecodeError, UnicodeDecodeError):
        body = content.decode("utf-8", "replace").strip() if content else None
    message, param, code = error_message(body, status)
    lower = message.lower()
    if status == 400 or status == 413 or status == 422:
        if code == "context_length_exceeded" or "context length" in lower \
                or "maximum context" in lower:
            return ContextLengthError(message, param=param)
        return InvalidRequestError(message, param=param)
    if status == 404:
        return ModelNotFoundError(message, param=param or "model")
    if status == 429:
        return QueueFullError(message, retry_after_s=_retry_after(headers or httpx.Headers()))
    if status == 503:
        return NoModelLoadedError(message)
    if status in (401, 403):
        return RemoteAuthError(f"the server at {url or 'the remote'} refused the API key "
                               f"(HTTP {status}): {message}")
    return EngineError(f"remote server error (HTTP {status}): {message}")


def connection_error(exc: Exception, url: str) -> RemoteConnectionError:
    if isinstance(exc, httpx.ConnectError):
        why = "connection refused or host unreachable"
    elif isinstance(exc, httpx.TimeoutException):
        why = "timed out"
    else:
        why = f"{type(exc).__name__}: {exc}".splitlines()[0]
    return RemoteConnectionError(f"cannot reach {url}: {why}")
