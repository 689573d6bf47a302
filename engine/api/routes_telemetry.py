"""GET /v1/telemetry (the poller's latest snapshot) and /v1/telemetry/stream (SSE, one event per
sample at the poller's cadence): the device view of `npu-console smi --json`, over HTTP.

Both sit behind the API key like every route but /health. The poller is the one the app was
built with (`build_app(..., telemetry_poller=)`: `serve` makes one, the GUI passes its own);
without one both answer 404 (telemetry off). Streams end when the server stops (`TelemetryStreams.close_all`),
so an open dashboard never holds a shutdown for its grace period.
"""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from ..telemetry.snapshot_json import snapshot_json
from .errors import ApiError
from .live import LiveSet
from .sse import SSEResponse, sse_data

router = APIRouter()

_STOP = object()  # queued to a stream: the server is stopping


class TelemetryStreams(LiveSet[tuple[asyncio.AbstractEventLoop, asyncio.Queue]]):
    """The open /v1/telemetry/stream responses, so a stopping server can end them at once."""

    def close_all(self) -> int:
        """End every open stream (thread-safe); later ones end as soon as they start."""
        streams = self.take_all(close=True)
        for loop, queue in streams:
            _offer_threadsafe(loop, queue, _STOP)
        return len(streams)


def _offer(queue: asyncio.Queue, item: Any) -> None:
    """Newest wins: a client that reads slower than the poller skips samples, never lags."""
    if item is not _STOP:
        while queue.qsize() >= 2:
            queue.get_nowait()
    queue.put_nowait(item)


def _offer_threadsafe(loop: asyncio.AbstractEventLoop, queue: asyncio.Queue, item: Any) -> None:
    try:
        loop.call_soon_threadsafe(_offer, queue, item)
    except RuntimeError:
        pass  # the server's loop is closed: nothing left to tell


def _poller(request: Request):
    poller = getattr(request.app.state, "telemetry_poller", None)
    if poller is None:
        # 404, not 503: nothing is failing, this server simply has no telemetry to give
        raise ApiError(404, "telemetry is off on this server (npu-console serve "
                            "--telemetry-source off, or an embedding without a poller)",
                       code="telemetry_unavailable")
    return poller


def streams_of(app) -> TelemetryStreams:
    streams = getattr(app.state, "telemetry_streams", None)
    if streams is None:
        streams = app.state.telemetry_streams = TelemetryStreams()
    return streams


@router.get("/v1/telemetry", tags=["telemetry"])
async def telemetry(request: Request) -> JSONResponse:
    """The latest snapshot: devices (with their `info -t` details), processes, host, active
    alerts; the schema of `npu-console smi --once --json`."""
    poller = _poller(request)
    snap = poller.latest
    if snap is None:  # a poller that has not sampled yet: sample now, off the event loop
        snap = await asyncio.to_thread(poller.poll_once)
    return JSONResponse(snapshot_json(snap, poller.active_alerts()))


@router.get("/v1/telemetry/stream", tags=["telemetry"])
async def telemetry_stream(request: Request) -> SSEResponse:
    """Server-sent events: the latest snapshot at once, then one per poller sample."""
    poller = _poller(request)
    streams = streams_of(request.app)
    if streams.closed:
        raise ApiError(503, "the server is stopping", code="server_stopping")

    async def events():
        # set up inside the generator: its `finally` is then sure to run (a response closed
        # before it starts never runs an unstarted generator's cleanup)
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue = asyncio.Queue()
        if poller.latest is not None:
            _offer(queue, poller.latest)
        unsubscribe = poller.subscribe(lambda snap: _offer_threadsafe(loop, queue, snap))
        key = id(queue)
        streams.add(key, (loop, queue))
        if streams.closed:
            _offer(queue, _STOP)
        try:
            while True:
                snap = await queue.get()
                if snap is _STOP:
                    return
                yield sse_data(snapshot_json(snap, poller.active_alerts()))
        finally:
            unsubscribe()
            streams.remove(key)

    return SSEResponse(events())
