"""/v1/admin: list the models under the server's roots, load and unload them, quantize one, and
follow or cancel those jobs. Off unless the server was started with `--allow-admin` (the
routes then answer 403 saying how to turn them on, and stay out of the OpenAPI schema); behind
the API key like every route but /health.

Writes must declare a JSON body and come from no foreign Origin (cross_site.py), so a web page
cannot drive a keyless loopback server; the Host check stops DNS rebinding. --admin-key gives
these routes a key of their own.
"""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from .admin_jobs import FINAL, AdminJob, JobConflict
from .admin_paths import PathNotFound, PathRefused
from .admin_schemas import LoadBody, QuantizeBody, UnloadBody
from .admin_service import AdminService
from .errors import ApiError
from .sse import DONE, SSEResponse, sse_data

router = APIRouter(prefix="/v1/admin", tags=["admin"])


def admin_of(request: Request) -> AdminService:
    service = getattr(request.app.state, "admin", None)
    if service is None:
        raise ApiError(403, "admin endpoints are off on this server: start it with "
                            "`npu-console serve --allow-admin --model-root DIR` (and --api-key "
                            "KEY unless it listens on loopback only)", code="admin_disabled")
    return service


async def _call(service: AdminService, fn, *args):
    """Run service code off the event loop on the admin threads (never the pool that serves
    completions), its path and job refusals as HTTP answers."""
    try:
        return await asyncio.get_running_loop().run_in_executor(service.executor, fn, *args)
    except PathRefused as exc:
        raise ApiError(403, str(exc), param="path", code="path_outside_roots") from None
    except PathNotFound as exc:
        raise ApiError(404, str(exc), param="path", code="not_found") from None
    except JobConflict as exc:
        raise ApiError(409, str(exc), code="job_conflict",
                       error_type="invalid_request_error") from None
    except ValueError as exc:
        raise ApiError(400, str(exc), code="invalid_value") from None


def _job(service: AdminService, job_id: str) -> AdminJob:
    job = service.jobs.get(job_id)
    if job is None:
        raise ApiError(404, f"no job {job_id!r} (finished jobs are kept for a while; see GET "
                            "/v1/admin/jobs)", param="job_id", code="job_not_found")
    return job


@router.get("/models")
async def list_models(request: Request) -> JSONResponse:
    """Model folders and GGUF files under the roots (paths as ROOT/REL, never absolute), with
    what the folder check reads from them, and the models this server runs now."""
    service = admin_of(request)
    return JSONResponse(await _call(service, service.models))


@router.post("/load", status_code=202)
async def load(body: LoadBody, request: Request) -> JSONResponse:
    """Start loading a model under the roots into the served engine; answers the job."""
    service = admin_of(request)
    job = await _call(service, service.start_load, body)
    return JSONResponse(job.snapshot(), status_code=202)


@router.post("/unload")
async def unload(body: UnloadBody, request: Request) -> JSONResponse:
    """Remove a served model; its running and waiting requests end with an error."""
    service = admin_of(request)
    return JSONResponse(await _call(service, service.unload, body.name))


@router.post("/quantize", status_code=202)
async def quantize(body: QuantizeBody, request: Request) -> JSONResponse:
    """Start quantizing a model under the roots into OUTPUT_ROOT/out_name (one at a time)."""
    service = admin_of(request)
    job = await _call(service, service.start_quantize, body)
    return JSONResponse(job.snapshot(), status_code=202)


@router.get("/jobs")
async def jobs(request: Request) -> JSONResponse:
    service = admin_of(request)
    return JSONResponse({"object": "list", "data": [j.snapshot() for j in service.jobs.all()]})


@router.get("/jobs/{job_id}")
async def job_status(job_id: str, request: Request) -> JSONResponse:
    service = admin_of(request)
    return JSONResponse(_job(service, job_id).snapshot())


@router.delete("/jobs/{job_id}")
async def cancel_job(job_id: str, request: Request) -> JSONResponse:
    """Cancel a job and wait (up to 10 s) for it to stop: 200 with its final state, or 202
    while it is still stopping. A finished job is left as it is."""
    service = admin_of(request)
    job = _job(service, job_id)
    ended = await _call(service, service.cancel, job)
    return JSONResponse(job.snapshot(), status_code=200 if ended else 202)


@router.get("/jobs/{job_id}/events")
async def job_events(job_id: str, request: Request) -> SSEResponse:
    """Server-sent events: the job's state at once, then on each change (a client that reads
    slowly skips to the newest), ending with its final state and [DONE]."""
    service = admin_of(request)
    job = _job(service, job_id)

    async def events():
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue = asyncio.Queue()

        def offer(snap) -> None:
            # newest wins: every snapshot is the whole state, so skipping is harmless
            while queue.qsize() >= 2:
                queue.get_nowait()
            queue.put_nowait(snap)

        def offer_threadsafe(snap) -> None:
            try:
                loop.call_soon_threadsafe(offer, snap)
            except RuntimeError:
                pass  # the loop is closed: nobody is listening any more

        # a stopping server cancels its jobs (AdminJobs.close), which ends these streams
        unsubscribe = job.subscribe(offer_threadsafe)
        try:
            while True:
                snap = await queue.get()
                yield sse_data(snap)
                if snap["state"] in FINAL:
                    yield DONE
                    return
        finally:
            unsubscribe()

    return SSEResponse(events())
