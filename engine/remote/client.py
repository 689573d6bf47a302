"""RemoteEngine: the EngineClient contract over a remote OpenAI-compatible server.

Front ends (chat, GUI, benchmarks) use a remote vLLM / vllm-ascend / MindIE / npu-console server
exactly like the local engine. Each request is one streaming HTTP request: submit() returns once
the server has accepted it (HTTP errors become the engine's typed errors at once, as the local
engine raises them), then the stream is read on a private event loop thread and turned into
TokenEvents and a FinishEvent. Timings are measured here, on the client; usage comes from the
stream's usage chunk. cancel() closes the stream, which a well-behaved server treats as an
abort. stats() reads the server's Prometheus /metrics through a background poller.

Token ids are not part of OpenAI streams: TokenEvent.token_ids is empty for remote requests.
Reasoning deltas (`reasoning_content`, or `reasoning`, as vLLM's reasoning parsers send them)
arrive in TokenEvent.reasoning, counted one token a chunk until the usage chunk gives the number.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import threading
import time
from typing import Any

import httpx

from ..runtime.handle import LocalRequestHandle
from ..runtime.types import (
    EngineError,
    EngineStats,
    EngineStoppedError,
    FinishEvent,
    GenerationRequest,
    InvalidRequestError,
    ModelInfo,
    RequestTimings,
    SamplingParams,
    TokenEvent,
    Usage,
)
from .errors import connection_error, error_from_response
from .prom import MetricsSnapshot, figures, parse_metrics
from .sse import (
    chunk_reasoning,
    chunk_text,
    error_message,
    read_capped,
    reasoning_tokens,
    sse_events,
)
from .urls import normalize_base_url

log = logging.getLogger(__name__)

_DEFAULTS = SamplingParams()


def _numbers(d: Any) -> dict[str, float]:
    """The numeric entries of a JSON object from a server (anything else is ignored)."""
    if not isinstance(d, dict):
        return {}
    return {str(k): v for k, v in d.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool)}


def request_body(req: GenerationRequest, model: str | None,
                 server_defaults: dict[str, float] | None = None) -> tuple[str, dict[str, Any]]:
    """(path, JSON body) of the streaming request for `req`. Standard OpenAI fields always;
    vLLM's extensions (top_k, min_p, repetition_penalty, ignore_eos, stop_token_ids,
    add_special_tokens) only when they differ from the default, so strict servers still work.

    Sampling fields the caller left to the model (`params.model_defaults`) are left out, so the
    server applies the model's values; a field the caller set is sent even at its default value
    when the server says (`server_defaults`, from /v1/models) it would otherwise put the
    model's value in its place."""
    sources = [x is not None for x in (req.prompt, req.prompt_token_ids, req.messages)]
    if sum(sources) != 1:
        raise InvalidRequestError("give exactly one of prompt, prompt_token_ids or messages",
                                  param="prompt")
    p = req.params
    server_defaults = server_defaults or {}
    body: dict[str, Any] = {"stream": True, "stream_options": {"include_usage": True},
                            "max_tokens": p.max_tokens}
    for name in ("temperature", "top_p"):
        if name not in p.model_defaults:
            body[name] = getattr(p, name)
    if model:
        body["model"] = model
    for name in ("presence_penalty", "frequency_penalty"):
        if getattr(p, name) != getattr(_DEFAULTS, name):
            body[name] = getattr(p, name)
    if p.seed is not None:
        body["seed"] = p.seed
    if p.stop:
        body["stop"] = list(p.stop)
    for name in ("top_k", "min_p", "repetition_penalty", "ignore_eos"):
        if name in p.model_defaults:
            continue
        if getattr(p, name) != getattr(_DEFAULTS, name) or name in server_defaults:
            body[name] = getattr(p, name)
    if p.stop_token_ids:
        body["stop_token_ids"] = list(p.stop_token_ids)
    if req.messages is not None:
        body["messages"] = req.messages
        return "/v1/chat/completions", body
    body["prompt"] = req.prompt if req.prompt is not None else list(req.prompt_token_ids)
    if not req.add_special_tokens:
        body["add_special_tokens"] = False
    return "/v1/completions", body


class _Stream:
    """Client-side state of one remote request."""

    def __init__(self, handle: LocalRequestHandle, t0: float, arrival: float):
        self.handle = handle
        self.t0 = t0
        self.arrival = arrival
        self.token_times: list[float] = []
        self.first_answer: float | None = None  # monotonic time of the first answer text
        self.reasoning_times: list[float] = []  # chunks that carried reasoning
        self.chunks = 0
        self.usage: Usage | None = None
        self.finish_reason: str | None = None
        self.stop_reason: Any = None
        self.error: str | None = None
        self.queue_s: float | None = None
        self.model = handle.model
        self.task: asyncio.Task | None = None

    def finish_event(self, reason: str, error: str | None = None) -> FinishEvent:
        end = time.monotonic()
        times = self.token_times
        ttft = times[0] - self.t0 if times else None
        e2e = (times[-1] if times else end) - self.t0
        usage = self.usage or Usage(0, self.chunks)
        n = usage.completion_tokens
        # as types.py and vLLM define it: the decode time after the first token, per token
        tpot = (e2e - ttft) / (n - 1) if ttft is not None and n > 1 else None
        itl = tuple(b - a for a, b in itertools.pairwise(times))
        first_answer = self.first_answer - self.t0 if self.first_answer is not None else None
        r = self.reasoning_times
        timings = RequestTimings(arrival=self.arrival, queue_s=self.queue_s or 0.0, ttft_s=ttft,
                                 e2e_s=e2e, tpot_s=tpot, itl_s=itl,
                                 first_answer_s=first_answer if r else ttft,
                                 reasoning_s=r[-1] - r[0] if r else None)
        return FinishEvent(self.handle.request_id, reason, usage, timings, self.model,
                           error=error, stop_reason=self.stop_reason)


class RemoteEngine:
    """An EngineClient for a remote OpenAI-compatible endpoint. Thread-safe."""

    def __init__(self, base_url: str, api_key: str | None = None, model: str | None = None,
                 *, timeout_s: float = 600.0, connect_timeout_s: float = 10.0,
                 poll_interval_s: float | None = 1.0, models_ttl_s: float = 5.0):
        self.base_url = normalize_base_url(base_url)
        self.api_key = api_key
        self.model = model
        self.connect_timeout_s = connect_timeout_s
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._timeout = httpx.Timeout(timeout_s, connect=connect_timeout_s)
        self._headers = headers
        self._lock = threading.Lock()
        self._streams: dict[str, _Stream] = {}
        self._closed = False
        self._finished = 0
        self._failed = 0
        self._last_error: str | None = None
        self._reachable: bool | None = None  # None until the first answer or failure
        self._models_cache: tuple[float, list[ModelInfo]] | None = None
        self._models_ttl_s = models_ttl_s
        # sync client for models() and /metrics: callers may be on any thread or loop
        self._sync = httpx.Client(base_url=self.base_url, headers=headers,
                                  timeout=httpx.Timeout(15.0, connect=connect_timeout_s))
        self._loop = asyncio.new_event_loop()
        self._client: httpx.AsyncClient | None = None
        self._loop_thread = threading.Thread(target=self._run_loop, name="remote-engine",
                                             daemon=True)
        self._loop_thread.start()
        self._snap: MetricsSnapshot | None = None
        self._prev: MetricsSnapshot | None = None
        self._metrics_ok: bool | None = None
        self._poll_stop = threading.Event()
        self._poller = None
        if poll_interval_s:
            self._poller = threading.Thread(target=self._poll, args=(poll_interval_s,),
                                            name="remote-metrics", daemon=True)
            self._poller.start()

    # ---------------------------------------------------------------- event loop thread
    def _run_loop(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._client = httpx.AsyncClient(base_url=self.base_url, headers=self._headers,
                                         timeout=self._timeout,
                                         limits=httpx.Limits(max_connections=None,
                                                             max_keepalive_connections=32))
        self._loop.run_forever()

    # ---------------------------------------------------------------- EngineClient
    def submit(self, request: GenerationRequest) -> LocalRequestHandle:
        if self._closed:
            raise EngineStoppedError("the remote engine client is shut down")
        model = request.model or self.model
        path, body = request_body(request, model, self._server_defaults(model))
        with self._lock:
            if request.request_id in self._streams:
                raise InvalidRequestError(f"request id {request.request_id!r} is already in use",
                                          param="request_id")
        handle = LocalRequestHandle(request.request_id, model or "", self.cancel)
        stream = _Stream(handle, time.monotonic(), time.time())
        if threading.current_thread() is self._loop_thread:
            raise RuntimeError("RemoteEngine.submit must not be called from its own loop")
        fut = asyncio.run_coroutine_threadsafe(self._open(stream, path, body), self._loop)
        try:
            fut.result(self.connect_timeout_s + 60.0)
        except TimeoutError:
            fut.cancel()  # nobody would read a stream that opens after this
            raise connection_error(httpx.ReadTimeout("no answer"), self.base_url) from None
        return handle

    async def _open(self, stream: _Stream, path: str, body: dict) -> None:
        assert self._client is not None
        try:
            resp = await self._client.send(self._client.build_request("POST", path, json=body),
                                           stream=True)
        except httpx.HTTPError as exc:
            err = connection_error(exc, self.base_url)
            self._last_error = err.message
            self._reachable = False
            raise err from None
        self._reachable = True
        if resp.status_code != 200:
            content = await read_capped(resp)  # a hostile server's error body is capped
            await resp.aclose()
            raise error_from_response(resp.status_code, content, resp.headers, self.base_url)
        stream.task = asyncio.ensure_future(self._pump(stream, resp))
        with self._lock:
            self._streams[stream.handle.request_id] = stream

    async def _pump(self, stream: _Stream, resp: httpx.Response) -> None:
        fin: FinishEvent | None = None
        events = sse_events(resp)
        try:
            async for ev in events:
                now = time.monotonic()
                if "error" in ev and not ev.get("choices"):
                    stream.error = error_message(ev)[0]
                    continue
                if ev.get("model"):
                    stream.model = ev["model"]
                text, finish, stop_reason = chunk_text(ev)
                reasoning = chunk_reasoning(ev)
                if text or reasoning:
                    stream.token_times.append(now)
                    stream.chunks += 1
                    if reasoning:
                        stream.reasoning_times.append(now)
                    if text and stream.first_answer is None:
                        stream.first_answer = now
                    stream.handle._push([TokenEvent(stream.handle.request_id, text, (),
                                                    reasoning=reasoning,
                                                    reasoning_tokens=1 if reasoning else 0)])
                if finish is not None:
                    stream.finish_reason = finish
                    stream.stop_reason = stop_reason
                usage = ev.get("usage")
                if usage:
                    details = usage.get("prompt_tokens_details") or {}
                    stream.usage = Usage(int(usage.get("prompt_tokens") or 0),
                                         int(usage.get("completion_tokens") or 0),
                                         int(details.get("cached_tokens") or 0),
                                         reasoning_tokens(usage))
                timings = ev.get("timings")
                if isinstance(timings, dict) and timings.get("queue_ms") is not None:
                    stream.queue_s = float(timings["queue_ms"]) / 1000.0
            if stream.error or stream.finish_reason == "error":
                fin = stream.finish_event("error", stream.error or "the server reported an error")
            elif stream.finish_reason is None:
                fin = stream.finish_event("error", "the stream ended without a finish reason")
            else:
                reason = stream.finish_reason
                fin = stream.finish_event(reason if reason in ("stop", "length") else "stop")
        except asyncio.CancelledError:
            fin = stream.finish_event("cancelled")
        except httpx.HTTPError as exc:
            fin = stream.finish_event("error", connection_error(exc, self.base_url).message)
        except Exception as exc:  # a finish event must always come
            log.exception("remote stream failed")
            fin = stream.finish_event("error", f"{type(exc).__name__}: {exc}")
        finally:
            # closing a broken connection may fail too
            with contextlib.suppress(Exception):
                await events.aclose()
            with contextlib.suppress(Exception):
                await asyncio.shield(resp.aclose())
            with self._lock:
                self._streams.pop(stream.handle.request_id, None)
                if fin is not None:
                    if fin.finish_reason == "error":
                        self._failed += 1
                        self._last_error = fin.error
                    else:
                        self._finished += 1
            if fin is not None:
                stream.handle._push([fin])

    def cancel(self, request_id: str) -> None:
        with self._lock:
            stream = self._streams.get(request_id)
        if stream is not None and stream.task is not None:
            self._loop.call_soon_threadsafe(stream.task.cancel)

    def models(self) -> list[ModelInfo]:
        cached = self._models_cache
        if cached and time.monotonic() - cached[0] < self._models_ttl_s:
            return list(cached[1])
        try:
            r = self._sync.get("/v1/models")
        except httpx.HTTPError as exc:
            err = connection_error(exc, self.base_url)
            self._last_error, self._reachable = err.message, False
            raise err from None
        self._reachable = True
        if r.status_code != 200:
            raise error_from_response(r.status_code, r.content, r.headers, self.base_url)
        try:
            cards = r.json().get("data", [])
        except (ValueError, AttributeError):
            raise EngineError(f"{self.base_url}/v1/models did not answer JSON") from None
        infos = [self._model_info(c) for c in cards if isinstance(c, dict) and c.get("id")]
        self._models_cache = (time.monotonic(), infos)
        return list(infos)

    def _server_defaults(self, model: str | None) -> dict[str, float]:
        """The sampling defaults the server advertised for `model` (cached /v1/models)."""
        cached = self._models_cache
        infos = cached[1] if cached else []
        info = next((m for m in infos if m.name == model), infos[0] if infos and not model
                    else None)
        return dict(info.sampling_defaults) if info else {}

    def _model_info(self, card: dict) -> ModelInfo:
        def num(key: str) -> int:
            v = card.get(key)
            return int(v) if isinstance(v, (int, float)) else 0

        return ModelInfo(
            name=str(card["id"]), path=str(card.get("root") or card["id"]),
            architecture=str(card.get("architecture") or "remote"),
            dtype=str(card.get("dtype") or "unknown"), quantization=card.get("quantization"),
            device=f"remote {self.base_url}" + (f" ({card['device']})" if card.get("device")
                                                else ""),
            max_context=num("max_model_len"), num_parameters=num("num_parameters"),
            weight_bytes=0, kv_bytes=0, path_kind="remote",
            created=float(card.get("created") or 0.0),
            sampling_defaults=tuple(_numbers(card.get("sampling_defaults")).items()),
            unbatched_reason=str(card.get("unbatched_reason") or ""),
            reasoning_parser=card.get("reasoning_parser") if isinstance(
                card.get("reasoning_parser"), str) else None)

    def stats(self) -> EngineStats:
        with self._lock:
            inflight = len(self._streams)
            finished, failed, last_error = self._finished, self._failed, self._last_error
        snap, prev = self._snap, self._prev
        cached = self._models_cache
        models = tuple(m.name for m in cached[1]) if cached else ((self.model,) if self.model
                                                                    else ())
        if self._closed:
            state = "stopped"
        elif self._reachable is False:
            state = "error"
        else:
            state = "ready"
        running = waiting = None
        kv_used = kv_total = 0
        prompt_tps = gen_tps = 0.0
        prefix = 0.0
        steps = 0
        if snap is not None:
            f = figures(snap, prev)
            running, waiting = f.running, f.waiting
            kv_used, kv_total = f.kv_used_tokens, f.kv_total_tokens
            prompt_tps, gen_tps = f.prompt_tps, f.generation_tps
            prefix, steps = f.prefix_hit_rate, f.steps
            if f.finished is not None:
                finished = int(f.finished)
            if f.failed is not None:
                failed = int(f.failed)
        return EngineStats(
            state=state, running=int(running if running is not None else inflight),
            waiting=int(waiting or 0), max_running=0, max_waiting=0,
            kv_used_tokens=kv_used, kv_total_tokens=kv_total, prefix_hit_rate=prefix,
            prompt_tokens_per_s=prompt_tps, generation_tokens_per_s=gen_tps, steps=steps,
            requests_finished=finished, requests_failed=failed, models=models,
            last_error=last_error)

    def scrape(self) -> MetricsSnapshot | None:
        """Read /metrics once now (the poller calls this); None when the server has none."""
        try:
            r = self._sync.get("/metrics")
        except httpx.HTTPError as exc:
            self._last_error = connection_error(exc, self.base_url).message
            self._metrics_ok = self._reachable = False
            return None
        self._reachable = True
        if r.status_code != 200:
            self._metrics_ok = False
            return None
        try:
            snap = parse_metrics(r.text, time.monotonic())
        except ValueError as exc:
            log.debug("unreadable /metrics from %s: %s", self.base_url, exc)
            self._metrics_ok = False
            return None
        self._metrics_ok = True
        self._prev, self._snap = self._snap, snap
        return snap

    def _poll(self, interval: float) -> None:
        while not self._poll_stop.wait(0 if self._snap is None and self._metrics_ok is None
                                       else interval):
            self.scrape()
            if self._models_cache is None:
                try:
                    self.models()
                except EngineError:
                    pass

    def shutdown(self, timeout: float = 5.0) -> None:
        if self._closed:
            return
        self._closed = True
        self._poll_stop.set()
        with self._lock:
            streams = list(self._streams.values())
        for s in streams:
            if s.task is not None:
                self._loop.call_soon_threadsafe(s.task.cancel)

        async def close() -> None:
            pending = [s.task for s in streams if s.task is not None]
            if pending:
                await asyncio.wait(pending, timeout=timeout)
            if self._client is not None:
                await self._client.aclose()
            await self._loop.shutdown_asyncgens()

        with contextlib.suppress(Exception):  # shutting down regardless
            asyncio.run_coroutine_threadsafe(close(), self._loop).result(timeout + 1.0)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._loop_thread.join(timeout)
        self._sync.close()
        if self._poller is not None:
            self._poller.join(timeout)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.shutdown()


