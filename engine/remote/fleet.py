"""FleetMonitor: several `npu-console serve` hosts watched at once (the console's fleet view).

One worker thread per server polls GET /v1/telemetry (the `smi --json` snapshot), /metrics
(running, waiting, tok/s) and, less often, /v1/models. Timeouts are short, so a lost server
turns 'unreachable' within seconds, not after a TCP timeout; retries back off (1, 2, 4 ... 30 s,
jittered, so hosts that dropped off together do not come back in lock-step) and the host turns
'up' again when it answers. A refused key (401 / 403) is 'unauthorized' and retried only at
the slowest pace: nothing hammers a server that already said no.

Callers never wait: add / remove / close return at once (a worker stuck in a request exits
when its timeout ends), snapshots() hands out copies, and subscribers are called on the
workers' threads (the console re-posts them to its GUI thread: console/fleet_control.py).

`HostSnapshot` here is one server's state, not `engine.telemetry.types.HostSnapshot` (the host
CPU inside a telemetry snapshot).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Self

import httpx
import numpy as np

from ..runtime.types import EngineStats
from ..telemetry.alerts import AlertEvent
from ..telemetry.history import MetricHistory
from ..telemetry.poller import history_values
from ..telemetry.snapshot_json import snapshot_from_json
from ..telemetry.types import TelemetrySnapshot
from .errors import connection_error
from .fleet_types import (  # noqa: F401 - the fleet API in one import
    ChipSummary,
    HostSnapshot,
    HostState,
    ServerRef,
    chip_summary,
    health_rank,
    host_of,
)
from .prom import (
    LATENCY_KEYS,
    LatencyWindow,
    MetricsSnapshot,
    figures,
    parse_metrics,
)
from .urls import normalize_base_url

log = logging.getLogger(__name__)

POLL_S = 1.0
MODELS_EVERY_S = 10.0  # model lists change on a load, not every second
CONNECT_TIMEOUT_S = 1.5
READ_TIMEOUT_S = 2.5  # a poll that hangs still ends well inside the 5 s the view promises
MAX_BACKOFF_S = 30.0
JITTER = 0.2  # each delay is scaled by a random factor in [1 - JITTER, 1 + JITTER]
HISTORY_SAMPLES = 3600  # an hour of plots at one sample a second
# what one host may make this process keep: the server is not trusted (issue 35)
MAX_DEVICES = 64  # chips shown per host (an Ascend server has 8 or 16)
MAX_LIST = 256  # processes, alerts, warnings and model ids kept per host
MAX_HISTORY_KEYS = MAX_DEVICES * 5 + 16  # history rings per host (5 device metrics each)
MAX_RESPONSE_BYTES = 4 * 1024 * 1024  # one answer, read in pieces and dropped past this
POLL_DEADLINE_S = 5.0  # one round of requests, whole; a trickling server turns unreachable
ENGINE_KEYS = ("engine:generation_tps", "engine:prompt_tps", "engine:running",
               "engine:waiting", "engine:kv_pct") + LATENCY_KEYS  # latency in ms
# npu-smi's health levels (engine/telemetry/npu_health.py); a status npu-smi does not document
# ranks with a warning: it needs a look but is not known to be critical
def backoff_s(failures: int, rand: Callable[[], float] = random.random, first_s: float = 1.0,
              max_s: float = MAX_BACKOFF_S) -> float:
    """Seconds before retry number `failures` (first_s, 2 first_s, 4 first_s ... max_s, each
    jittered)."""
    base = min(max_s, first_s * 2.0 ** min(max(0, failures - 1), 16))
    return min(max_s, base * (1.0 - JITTER + 2.0 * JITTER * rand()))


class _Refused(Exception):
    """The server refused the key."""


class _NoAnswer(Exception):
    """Something listens there, but none of the routes answered usefully."""


def _engine_stats(snap: MetricsSnapshot, prev: MetricsSnapshot | None,
                  models: tuple[str, ...]) -> EngineStats:
    f = figures(snap, prev)
    return EngineStats(
        state="ready" if models else "idle", running=int(f.running or 0),
        waiting=int(f.waiting or 0), max_running=0, max_waiting=0,
        kv_used_tokens=f.kv_used_tokens, kv_total_tokens=f.kv_total_tokens,
        prefix_hit_rate=f.prefix_hit_rate, prompt_tokens_per_s=f.prompt_tps,
        generation_tokens_per_s=f.generation_tps, steps=f.steps,
        requests_finished=int(f.finished or 0), requests_failed=int(f.failed or 0),
        models=models)


@dataclass(frozen=True)
class _Answer:
    """A whole (size-capped) answer: what the poll reads of a reply."""

    status_code: int
    content: bytes
    encoding: str = "utf-8"

    @property
    def text(self) -> str:
        return self.content.decode(self.encoding, errors="replace")

    def json(self):
        return json.loads(self.content)


def _capped(telemetry: TelemetrySnapshot, alerts: tuple[AlertEvent, ...],
            notes: list[str]) -> tuple[TelemetrySnapshot, tuple[AlertEvent, ...]]:
    """At most MAX_DEVICES chips and MAX_LIST of each list: the server is not trusted."""
    if len(telemetry.devices) > MAX_DEVICES:
        notes.append(f"{len(telemetry.devices)} devices, showing the first {MAX_DEVICES}")
    telemetry = dataclasses.replace(
        telemetry, devices=telemetry.devices[:MAX_DEVICES],
        processes=telemetry.processes[:MAX_LIST], warnings=telemetry.warnings[:MAX_LIST])
    return telemetry, alerts[:MAX_LIST]


def _json_list(reply: _Answer) -> list | None:
    """The `data` list of an OpenAI list answer, or None."""
    if reply.status_code != 200:
        return None
    try:
        data = reply.json().get("data")
    except (ValueError, AttributeError):
        return None
    return data if isinstance(data, list) else None


def _metrics(reply: _Answer) -> MetricsSnapshot | None:
    if reply.status_code != 200:
        return None
    try:
        return parse_metrics(reply.text, time.monotonic())
    except ValueError:
        return None


class _Worker:
    """One server's polling thread and what it last saw."""

    def __init__(self, ref: ServerRef, publish: Callable[[_Worker, HostSnapshot], None],
                 poll_s: float, rand: Callable[[], float], backoff: tuple[float, float]):
        self.ref = ref
        self.poll_s = poll_s
        self._publish = publish
        self._rand = rand
        self._backoff = backoff  # (first_s, max_s)
        self.stop = threading.Event()
        self.history = MetricHistory(HISTORY_SAMPLES, max_keys=MAX_HISTORY_KEYS)
        now = time.time()
        self.latest = HostSnapshot(ref.url, ref.name, "connecting", since=now)
        self._metrics: MetricsSnapshot | None = None
        self._latency = LatencyWindow()
        self._models: tuple[str, ...] = ()
        self._models_at = 0.0
        self._remote_stamp: float | None = None
        self.thread = threading.Thread(target=self._run, name=f"fleet-{host_of(ref.url)}",
                                       daemon=True)

    def _delay(self, failures: int) -> float:
        return backoff_s(failures, self._rand, *self._backoff)

    def _run(self) -> None:
        headers = {"Authorization": f"Bearer {self.ref.api_key}"} if self.ref.api_key else {}
        timeout = httpx.Timeout(READ_TIMEOUT_S, connect=CONNECT_TIMEOUT_S)
        failures = 0
        client: httpx.Client | None = None
        self._publish(self, self.latest)
        try:
            while not self.stop.is_set():
                if client is None or client.is_closed:
                    client = httpx.Client(base_url=self.ref.url, headers=headers,
                                          timeout=timeout)
                # the poll's total deadline: _get checks it between pieces of an answer; a
                # server that trickles its headers is cut off by closing the client
                deadline = time.monotonic() + POLL_DEADLINE_S
                watchdog = threading.Timer(POLL_DEADLINE_S + 0.5, client.close)
                watchdog.daemon = True
                watchdog.start()
                try:
                    snap = self._poll(client, deadline)
                    failures = 0
                    delay = self.poll_s
                except _Refused as exc:
                    delay = self._delay(10**6)  # the slowest pace
                    snap = self._failed("unauthorized", str(exc), delay)
                except (httpx.HTTPError, _NoAnswer, RuntimeError) as exc:
                    failures += 1
                    delay = self._delay(failures)
                    if client.is_closed or time.monotonic() > deadline:
                        why = (f"{host_of(self.ref.url)} gave no whole answer within "
                               f"{POLL_DEADLINE_S:g} s")
                    elif isinstance(exc, _NoAnswer):
                        why = str(exc)
                    elif isinstance(exc, httpx.HTTPError):
                        why = connection_error(exc, self.ref.url).message
                    else:
                        why = f"{type(exc).__name__}: {exc}"
                    snap = self._failed("unreachable", why, delay)
                except Exception as exc:  # a worker must outlive any one bad answer
                    log.exception("fleet poll of %s failed", self.ref.url)
                    failures += 1
                    delay = self._delay(failures)
                    snap = self._failed("unreachable", f"{type(exc).__name__}: {exc}", delay)
                finally:
                    watchdog.cancel()
                if self.stop.is_set():
                    break
                self.latest = snap
                self._publish(self, snap)
                self.stop.wait(delay)
        finally:
            if client is not None:
                client.close()

    def _failed(self, state: HostState, error: str, delay: float) -> HostSnapshot:
        now = time.time()
        prev = self.latest
        return dataclasses.replace(prev, state=state, error=error.splitlines()[0] if error
                                   else None, since=prev.since if prev.state == state else now,
                                   next_retry_s=delay, retry_at=now + delay)

    def _get(self, client: httpx.Client, path: str, deadline: float) -> _Answer:
        """GET `path`, its answer read in pieces: past MAX_RESPONSE_BYTES or the deadline the
        read stops and the host counts as not answering."""
        with client.stream("GET", path) as reply:
            if reply.status_code in (401, 403):
                raise _Refused(f"{host_of(self.ref.url)} refused the API key "
                               f"(HTTP {reply.status_code} on {path})")
            body = bytearray()
            for piece in reply.iter_bytes():
                body += piece
                if len(body) > MAX_RESPONSE_BYTES:
                    raise _NoAnswer(f"{host_of(self.ref.url)}: the answer to {path} is over "
                                    f"{MAX_RESPONSE_BYTES // 2**20} MiB")
                if time.monotonic() > deadline:
                    raise _NoAnswer(f"{host_of(self.ref.url)} gave no whole answer within "
                                    f"{POLL_DEADLINE_S:g} s")
            return _Answer(reply.status_code, bytes(body), reply.encoding or "utf-8")

    def _poll(self, client: httpx.Client, deadline: float) -> HostSnapshot:
        """One round of requests; raises on a transport error or a refused key."""
        notes: list[str] = []
        answered = False
        prev = self.latest
        telemetry, alerts = prev.telemetry, prev.alerts
        reply = self._get(client, "/v1/telemetry", deadline)
        if reply.status_code == 200:
            try:
                telemetry, alerts = snapshot_from_json(reply.json())
            except ValueError as exc:  # JSON errors and TelemetryJsonError
                telemetry, alerts = None, ()
                notes.append(f"telemetry: {str(exc).splitlines()[0][:120]}")
            else:
                answered = True
                telemetry, alerts = _capped(telemetry, alerts, notes)
                self._record_telemetry(telemetry)
        elif reply.status_code in (404, 503):
            telemetry, alerts = None, ()  # telemetry off there, or a server without it
            notes.append("no telemetry on this server")
        else:
            notes.append(f"telemetry: HTTP {reply.status_code}")
        now = time.time()
        if now - self._models_at >= MODELS_EVERY_S or not self._models:
            reply = self._get(client, "/v1/models", deadline)
            cards = _json_list(reply)
            if cards is not None:
                self._models = tuple(str(c["id"])[:200] for c in cards[:MAX_LIST]
                                     if isinstance(c, dict) and c.get("id"))
                self._models_at = now
                answered = True
            else:
                notes.append(f"models: HTTP {reply.status_code}")
        engine = prev.engine
        reply = self._get(client, "/metrics", deadline)
        metrics = _metrics(reply)
        if metrics is not None:
            engine = _engine_stats(metrics, self._metrics, self._models)
            self._metrics = metrics
            answered = True
            self._record_engine(engine, self._latency.add(metrics))
        else:
            notes.append(f"metrics: HTTP {reply.status_code}")
        if not answered:
            raise _NoAnswer(f"{host_of(self.ref.url)} answers, but not as an OpenAI-compatible "
                            f"server: {'; '.join(notes)}")
        return HostSnapshot(
            self.ref.url, self.ref.name, "up", error="; ".join(notes) or None,
            since=prev.since if prev.state == "up" else now, updated=now,
            telemetry=telemetry, engine=engine, alerts=alerts)

    def _record_telemetry(self, snap: TelemetrySnapshot) -> None:
        # stamped with this machine's clock (the server's may be off); a sample polled twice
        # (the server samples slower than we poll) is kept once
        if snap.timestamp != self._remote_stamp:
            self._remote_stamp = snap.timestamp
            self.history.append(time.time(), history_values(snap))

    def _record_engine(self, stats: EngineStats, latency: dict[str, float | None]) -> None:
        values = (stats.generation_tokens_per_s, stats.prompt_tokens_per_s, stats.running,
                  stats.waiting, 100.0 * stats.kv_usage)
        self.history.append(time.time(), {**dict(zip(ENGINE_KEYS, values, strict=False)),
                                          **latency})


class FleetMonitor:
    """Servers watched at once, each by its own polling thread. Thread-safe; never blocks."""

    def __init__(self, poll_s: float = POLL_S, rand: Callable[[], float] = random.random,
                 backoff_first_s: float = 1.0, backoff_max_s: float = MAX_BACKOFF_S):
        """`backoff_first_s` / `backoff_max_s`: the wait after a host's first failed poll,
        doubling per failure up to the cap (tests shrink them to run in a fraction of the time)."""
        if poll_s <= 0 or backoff_first_s <= 0 or backoff_max_s < backoff_first_s:
            raise ValueError("poll_s and the backoff must be positive, the cap not below the "
                             "first wait")
        self.poll_s = poll_s
        self._rand = rand
        self.backoff = (backoff_first_s, backoff_max_s)
        self._lock = threading.Lock()
        self._workers: dict[str, _Worker] = {}
        self._retired: list[_Worker] = []
        self._subs: list[Callable[[HostSnapshot], None]] = []
        self._closed = False

    def add(self, ref: ServerRef) -> ServerRef:
        """Watch `ref` (its URL normalized; ValueError for one that is not http(s)). Adding a
        URL already watched replaces it: a new key or name takes effect at once."""
        ref = dataclasses.replace(ref, url=normalize_base_url(ref.url),
                                  api_key=ref.api_key or None, name=ref.name or None)
        worker = _Worker(ref, self._publish, self.poll_s, self._rand, self.backoff)
        with self._lock:
            if self._closed:
                raise RuntimeError("the fleet monitor is closed")
            old = self._workers.get(ref.url)
            self._workers[ref.url] = worker
            if old is not None:
                self._retire(old)
        worker.thread.start()
        return ref

    def remove(self, url: str) -> bool:
        """Stop watching `url`; False when it was not watched."""
        key = normalize_base_url(url)
        with self._lock:
            worker = self._workers.pop(key, None)
            if worker is not None:
                self._retire(worker)
        return worker is not None

    def _retire(self, worker: _Worker) -> None:
        worker.stop.set()  # the thread ends after its request in flight: never waited for here
        self._retired = [w for w in self._retired if w.thread.is_alive()] + [worker]

    def refs(self) -> list[ServerRef]:
        with self._lock:
            return [w.ref for w in self._workers.values()]

    def snapshots(self) -> list[HostSnapshot]:
        with self._lock:
            return [w.latest for w in self._workers.values()]

    def snapshot(self, url: str) -> HostSnapshot | None:
        with self._lock:
            worker = self._workers.get(normalize_base_url(url))
        return worker.latest if worker is not None else None

    def history(self, url: str, key: str,
                seconds: float | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(t, values) of one series of a host: the poller's keys ("npu0-0:util_pct",
        "host:cpu_pct") and ENGINE_KEYS; empty for an unknown host or key."""
        with self._lock:
            worker = self._workers.get(normalize_base_url(url))
        if worker is None:
            return np.empty(0), np.empty(0)
        return worker.history.get(key, seconds)

    def subscribe(self, callback: Callable[[HostSnapshot], None]) -> Callable[[], None]:
        """`callback(snapshot)` on a worker thread after every poll; returns the unsubscribe."""
        with self._lock:
            self._subs.append(callback)

        def unsubscribe() -> None:
            with self._lock:
                if callback in self._subs:
                    self._subs.remove(callback)

        return unsubscribe

    def _publish(self, worker: _Worker, snap: HostSnapshot) -> None:
        with self._lock:
            if self._workers.get(worker.ref.url) is not worker:
                return  # removed or replaced meanwhile
            subs = list(self._subs)
        for cb in subs:
            try:
                cb(snap)
            except Exception:  # one bad subscriber must not stop the polling
                log.exception("fleet subscriber failed")

    def close(self) -> None:
        """Stop every worker (each exits after its request in flight); returns at once."""
        with self._lock:
            self._closed = True
            self._subs.clear()
            for worker in self._workers.values():
                self._retire(worker)
            self._workers.clear()

    def join(self, timeout: float = 10.0) -> bool:
        """Wait until stopped workers have exited (tests, shutdown); True when all did."""
        deadline = time.monotonic() + timeout
        with self._lock:
            workers = list(self._retired)
        for w in workers:
            w.thread.join(max(0.0, deadline - time.monotonic()))
        return not any(w.thread.is_alive() for w in workers)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
