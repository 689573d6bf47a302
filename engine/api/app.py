"""build_app(engine, settings) -> the ASGI app, the same for `npu-console serve` and the GUI."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from starlette.middleware.cors import CORSMiddleware

from .. import __version__
from ..runtime.types import EngineClient
from .context import ApiContext
from .cross_site import CrossSiteGuardMiddleware
from .errors import install_error_handlers
from .metrics import ApiMetrics
from .middleware import (
    AdmissionMiddleware,
    ApiKeyMiddleware,
    BodyLimitMiddleware,
    HostCheckMiddleware,
    RequestLogMiddleware,
)
from .request_log import RequestLog
from .routes_admin import router as admin_router
from .routes_misc import router as misc_router
from .routes_openai import router as openai_router
from .routes_telemetry import TelemetryStreams
from .routes_telemetry import router as telemetry_router
from .settings import ApiSettings


def build_app(engine: EngineClient, settings: ApiSettings | None = None, *,
              request_log: RequestLog | None = None, telemetry_poller: Any = None) -> FastAPI:
    """The OpenAI-compatible app over `engine`.

    `request_log` lets a caller (the GUI's server page) keep one log across restarts;
    `telemetry_poller` adds device metrics to /metrics and serves /v1/telemetry(/stream).
    """
    settings = settings or ApiSettings()
    settings.check_safe()
    ctx = ApiContext(engine=engine, settings=settings,
                     request_log=request_log if request_log is not None
                     else RequestLog(settings.request_log_size))
    app = FastAPI(title="NPU Console API", version=__version__,
                  description="OpenAI-compatible API of the NPU Console engine")
    app.state.ctx = ctx
    app.state.metrics = ApiMetrics(ctx, telemetry_poller)
    app.state.telemetry_poller = telemetry_poller
    app.state.telemetry_streams = TelemetryStreams()
    install_error_handlers(app)
    app.include_router(openai_router)
    app.include_router(misc_router)
    app.include_router(telemetry_router)
    # the admin routes always answer (403 when off, saying how to turn them on), but only a
    # server that allows them lists them in its schema
    app.include_router(admin_router, include_in_schema=settings.allow_admin)
    app.state.admin = None
    if settings.allow_admin:
        from .admin_service import AdminService

        app.state.admin = AdminService(engine, settings.model_roots, settings.output_root)
    # added innermost first: CORS (outermost) answers preflights before auth, the log sees
    # every answer including 400 (foreign Host), 401 and 413, auth runs before a body is
    # read, and a full queue answers 429 before any parsing
    app.add_middleware(BodyLimitMiddleware, limit=settings.max_body_bytes,
                       timeout=settings.body_timeout_s)
    app.add_middleware(AdmissionMiddleware, engine=engine)
    if settings.api_key or settings.admin_key:
        app.add_middleware(ApiKeyMiddleware, api_key=settings.api_key,
                           admin_key=settings.admin_key)
    # non-JSON bodies (415) and browsers' cross-site writes (403), before auth and any parsing
    app.add_middleware(CrossSiteGuardMiddleware, cors_origins=settings.cors_origins)
    app.add_middleware(HostCheckMiddleware, settings=settings)
    app.add_middleware(RequestLogMiddleware, request_log=ctx.request_log,
                       log_prompts=settings.log_prompts)
    if settings.cors_origins:
        app.add_middleware(CORSMiddleware, allow_origins=list(settings.cors_origins),
                           allow_methods=["GET", "POST", "DELETE", "OPTIONS"],
                           allow_headers=["Authorization", "Content-Type"],
                           allow_credentials=False, max_age=600)
    return app


def context_of(app: FastAPI) -> ApiContext:
    return app.state.ctx
