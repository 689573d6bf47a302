"""Every failure leaves the API in OpenAI's shape: {"error": {message, type, param, code}}.

Bad input is a 400 that names the parameter (FastAPI's default 422 is replaced), engine errors map
to the status their class carries, and anything unexpected becomes a plain 500 whose traceback
stays in the server log, never in the response.
"""

from __future__ import annotations

import logging
import math
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from ..runtime.types import (
    ContextLengthError,
    EngineError,
    ModelNotFoundError,
    QueueFullError,
)

log = logging.getLogger("npu_console.engine.api")

_TYPE_BY_STATUS = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    413: "invalid_request_error",
    429: "rate_limit_error",
    503: "service_unavailable",
}


class ApiError(Exception):
    """Raised by route code for a failure the client caused or must wait out."""

    def __init__(self, status: int, message: str, param: str | None = None,
                 code: str | None = None, headers: dict[str, str] | None = None,
                 error_type: str | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.headers = headers
        self.error_type = error_type or _TYPE_BY_STATUS.get(status, "server_error")


def error_body(message: str, error_type: str, param: str | None = None,
               code: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": error_type, "param": param, "code": code}}


def error_response(status: int, message: str, param: str | None = None, code: str | None = None,
                   headers: dict[str, str] | None = None,
                   error_type: str | None = None) -> JSONResponse:
    etype = error_type or _TYPE_BY_STATUS.get(status, "server_error")
    return JSONResponse(error_body(message, etype, param, code), status_code=status,
                        headers=headers)


def api_error_from_engine(exc: EngineError) -> ApiError:
    """The engine's typed errors carry their HTTP status; add the code and headers clients use."""
    headers = None
    code = None
    if isinstance(exc, QueueFullError):
        headers = {"Retry-After": str(max(1, math.ceil(exc.retry_after_s)))}
        code = "queue_full"
    elif isinstance(exc, ContextLengthError):
        code = "context_length_exceeded"
    elif isinstance(exc, ModelNotFoundError):
        code = "model_not_found"
    status = exc.http_status
    if status >= 500 and status != 503:
        # an engine failure is ours, not the client's: keep the message generic but truthful
        return ApiError(500, f"engine error: {exc.message}", code="engine_error",
                        error_type="server_error")
    return ApiError(status, exc.message, param=exc.param, code=code, headers=headers,
                    error_type=exc.error_type)


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def validation_message(errors: list[dict[str, Any]]) -> tuple[str, str | None]:
    """First pydantic error -> (one-line message naming the parameter, dotted param path)."""
    if not errors:
        return "invalid request", None
    err = errors[0]
    loc = [str(p) for p in err.get("loc", ()) if p != "body"]
    etype = err.get("type", "")
    if etype == "json_invalid":
        detail = (err.get("ctx") or {}).get("error", "")
        return f"request body is not valid JSON{': ' + detail if detail else ''}", None
    if not loc:
        if etype == "missing":
            return "request body is required: send a JSON object", None
        return f"request body: {err.get('msg', 'invalid')}", None
    param = ".".join(loc)
    msg = err.get("msg", "invalid value")
    if etype == "missing":
        return f"missing required parameter '{param}'", param
    if etype == "extra_forbidden":
        return f"unknown parameter '{param}'", param
    got = f" (got {_short(err['input'])})" if "input" in err else ""
    more = f" (and {len(errors) - 1} more error{'s' if len(errors) > 2 else ''})" \
        if len(errors) > 1 else ""
    return f"invalid value for '{param}': {msg}{got}{more}", param


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def _api_error(_: Request, exc: ApiError) -> JSONResponse:
        return error_response(exc.status, exc.message, exc.param, exc.code, exc.headers,
                              exc.error_type)

    @app.exception_handler(EngineError)
    async def _engine_error(_: Request, exc: EngineError) -> JSONResponse:
        e = api_error_from_engine(exc)
        return error_response(e.status, e.message, e.param, e.code, e.headers, e.error_type)

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        message, param = validation_message(list(exc.errors()))
        return error_response(400, message, param, code="invalid_value")

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        message = str(exc.detail) if exc.detail else "error"
        if exc.status_code == 404 and message == "Not Found":
            message = "no such route: see GET /v1/models, POST /v1/chat/completions, " \
                      "POST /v1/completions"
        return error_response(exc.status_code, message, headers=getattr(exc, "headers", None))

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return error_response(500, f"internal server error ({type(exc).__name__})",
                              code="internal_error", error_type="server_error")
