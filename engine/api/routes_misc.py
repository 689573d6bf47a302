"""GET /v1/models, /v1/models/{id}, /health and /metrics."""

from __future__ import annotations

import hmac

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST

from ..runtime.types import ModelInfo
from .errors import ApiError
from .routes_openai import context

router = APIRouter()


def model_card(m: ModelInfo, expose_paths: bool = False) -> dict:
    """The model object; its folder's path only when the server was asked to show it
    (--expose-paths): a path tells clients about the host's file system."""
    return {
        "id": m.name,
        "object": "model",
        "created": int(m.created),
        "owned_by": "npu-console",
        "root": m.path if expose_paths else m.name,
        "architecture": m.architecture,
        "dtype": m.dtype,
        "quantization": m.quantization,
        "device": m.device,
        "max_model_len": m.max_context,
        "num_parameters": m.num_parameters,
        "path_kind": m.path_kind,
        "linear_kernels": m.linear_kernels,
        "decode_step": m.decode_step,
        # "" when batched; else "runs unbatched: no native support for X"
        "unbatched_reason": m.unbatched_reason,
        "int8_kernels": m.int8_kernels,
        # how chat replies are split into reasoning_content and content (None: not split)
        "reasoning_parser": m.reasoning_parser,
        # what requests that leave these fields unset get (the model's generation_config)
        "sampling_defaults": dict(m.sampling_defaults),
    }


@router.get("/v1/models", tags=["openai"])
async def list_models(request: Request) -> dict:
    ctx = context(request)
    return {"object": "list",
            "data": [model_card(m, ctx.settings.expose_paths) for m in ctx.engine.models()]}


@router.get("/v1/models/{model_id:path}", tags=["openai"])
async def get_model(model_id: str, request: Request) -> dict:
    ctx = context(request)
    for m in ctx.engine.models():
        if m.name == model_id:
            return model_card(m, ctx.settings.expose_paths)
    raise ApiError(404, f"model '{model_id}' not found", param="model", code="model_not_found")


@router.get("/health", tags=["ops"])
async def health(request: Request) -> Response:
    """200 when a model is ready to serve; 503 while one loads, when none is loaded, or when the
    engine has stopped. Cheap: one stats snapshot, no engine round trip.

    It needs no key, so without one it says only its status: model names, counts and the last
    error (which can hold a path of the host) go only to a request with the server's key."""
    ctx = context(request)
    try:
        stats = ctx.engine.stats()
    except Exception as exc:  # noqa: BLE001 - a dead engine still gets a truthful answer
        if not _keyed(request, ctx.settings):
            return JSONResponse({"status": "error"}, status_code=503)
        return JSONResponse({"status": "error", "detail": str(exc)}, status_code=503)
    body = {"status": "ok", "state": stats.state, "models": list(stats.models),
            "running": stats.running, "waiting": stats.waiting}
    code = 200
    if not (stats.state == "ready" and stats.models):
        code = 503
        if stats.loading:
            body.update(status="loading", loading=stats.loading)
        elif not stats.models:
            body.update(status="no_model")
        else:
            body.update(status=stats.state)
        if stats.last_error:
            body["last_error"] = stats.last_error
    if not _keyed(request, ctx.settings):
        body = {"status": body["status"]}
    return JSONResponse(body, status_code=code)


def _keyed(request: Request, settings) -> bool:
    """Whether the request carries the API key or the admin key (never on a keyless server:
    there nobody proves anything by sending one)."""
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return False
    given = token.strip().encode()
    return any(key and hmac.compare_digest(given, key.encode())
               for key in (settings.api_key, settings.admin_key))


@router.get("/metrics", tags=["ops"])
async def metrics(request: Request) -> Response:
    return Response(request.app.state.metrics.render(), media_type=CONTENT_TYPE_LATEST)
