"""RemoteAdmin: a server's /v1/admin endpoints (`npu-console serve --allow-admin`) from Python,
with no Qt: list the models under its roots, load and unload them, quantize one, follow a job's
progress and cancel it. The GUI calls it on a worker thread; `npu-console remote` on the main
one.

Paths are the server's admin paths (ROOT/REL, as models() lists them), never local ones.
Failures are typed: RemoteConnectionError (unreachable), RemoteAuthError (401: the key), and
AdminError for everything the server refused, with its HTTP status and code (403
`admin_disabled` or `path_outside_roots`, 404, 409 `job_conflict`, 400).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Self

import httpx

from ..runtime.types import EngineError
from .errors import RemoteAuthError, connection_error
from .sse import (
    MAX_ERROR_BYTES,
    MAX_EVENT_BYTES,
    capped_lines,
    error_message,
    read_capped_sync,
)
from .urls import normalize_base_url

FINAL = ("done", "failed", "cancelled")
# one answer (a listing of every model folder under the roots is the largest: ~1 KB a folder);
# the server is not trusted, so a longer answer is refused rather than held in memory
MAX_ANSWER_BYTES = 8 << 20


class AdminError(EngineError):
    """The server refused an admin call; `status` and `code` say how."""

    def __init__(self, message: str, status: int, code: str | None = None,
                 param: str | None = None):
        super().__init__(message, param)
        self.status = status
        self.http_status = status
        self.code = code


@dataclass(frozen=True)
class JobState:
    """One snapshot of a job, as GET /v1/admin/jobs/{id} and its events carry it."""

    id: str
    kind: str  # "load" or "quantize"
    state: str  # "running", "done", "failed", "cancelled"
    stage: str = ""
    fraction: float = 0.0
    message: str = ""
    error: str | None = None
    result: dict[str, Any] | None = None
    params: dict[str, Any] = field(default_factory=dict)
    cancel_requested: bool = False
    created: float = 0.0
    finished: float | None = None

    @property
    def done(self) -> bool:
        return self.state in FINAL

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> JobState:
        return cls(id=str(d["id"]), kind=str(d.get("kind", "")), state=str(d["state"]),
                   stage=d.get("stage") or "", fraction=float(d.get("fraction") or 0.0),
                   message=d.get("message") or "", error=d.get("error"),
                   result=d.get("result"), params=d.get("params") or {},
                   cancel_requested=bool(d.get("cancel_requested")),
                   created=float(d.get("created") or 0.0), finished=d.get("finished"))


@dataclass(frozen=True)
class AdminModel:
    """A model folder or GGUF file under the server's roots."""

    path: str  # the admin path to send back (ROOT/REL)
    name: str  # the id it is loaded as by default
    format: str  # "hf" or "gguf"
    summary: str  # one line: architecture, parameters, layers, context, quantization
    ok: bool  # False: the folder check found a problem that stops it loading
    architecture: str | None = None
    parameters: int | None = None
    size_bytes: int = 0
    quantization: str | None = None
    problems: tuple[str, ...] = ()
    loaded_as: tuple[str, ...] = ()  # the served models loaded from it

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> AdminModel:
        return cls(path=d["path"], name=d.get("name") or d["path"], format=d.get("format", ""),
                   summary=d.get("summary") or "", ok=bool(d.get("ok")),
                   architecture=d.get("architecture"), parameters=d.get("parameters"),
                   size_bytes=int(d.get("size_bytes") or 0), quantization=d.get("quantization"),
                   problems=tuple(d.get("problems") or ()),
                   loaded_as=tuple(d.get("loaded_as") or ()))


@dataclass(frozen=True)
class AdminListing:
    roots: tuple[str, ...]
    output_root: str  # where quantize writes: its outputs are listed as OUTPUT_ROOT/out_name
    models: tuple[AdminModel, ...]
    loaded: tuple[dict[str, Any], ...]  # the served models: name, path, architecture, ...


def _listing(d: dict[str, Any]) -> AdminListing:
    return AdminListing(roots=tuple(str(r["name"]) for r in d.get("roots", ())),
                        output_root=str(d.get("output_root", "")),
                        models=tuple(AdminModel.from_json(m) for m in d.get("models", ())),
                        loaded=tuple(d.get("loaded", ())))


class RemoteAdmin:
    def __init__(self, base_url: str, api_key: str | None = None, timeout: float = 30.0,
                 transport: httpx.BaseTransport | None = None):
        self.base_url = normalize_base_url(base_url)
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.Client(base_url=self.base_url, headers=headers, timeout=timeout,
                                    transport=transport)

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------------ calls
    def allowed(self) -> bool:
        """Whether the server serves /v1/admin (False: it runs without --allow-admin); other
        failures (unreachable, a wrong key) raise."""
        try:
            self._call("GET", "/v1/admin/jobs")
        except AdminError as exc:
            if exc.code == "admin_disabled":
                return False
            raise
        return True

    def models(self) -> AdminListing:
        return self._parsed(_listing, self._call("GET", "/v1/admin/models"))

    def load(self, path: str, name: str | None = None, *, device: str = "auto",
             dtype: str = "auto", replace: bool = False, default: bool = False) -> JobState:
        body: dict[str, Any] = {"path": path, "device": device, "dtype": dtype,
                                "replace": replace, "default": default}
        if name:
            body["name"] = name
        return self._parsed(JobState.from_json, self._call("POST", "/v1/admin/load", body))

    def unload(self, name: str) -> None:
        self._call("POST", "/v1/admin/unload", {"name": name})

    def quantize(self, path: str, out_name: str, **options: Any) -> JobState:
        """Start a quantization; `options` are the QuantizeBody fields (method, recipe, format,
        samples, budget_pct, overwrite, ...)."""
        return self._parsed(JobState.from_json, self._call(
            "POST", "/v1/admin/quantize", {"path": path, "out_name": out_name, **options}))

    def jobs(self) -> list[JobState]:
        return self._parsed(lambda d: [JobState.from_json(j) for j in d["data"]],
                            self._call("GET", "/v1/admin/jobs"))

    def job(self, job_id: str) -> JobState:
        return self._parsed(JobState.from_json, self._call("GET", f"/v1/admin/jobs/{job_id}"))

    def cancel(self, job_id: str) -> JobState:
        """Ask the job to stop; the answer comes once it has (or after the server's 10 s)."""
        return self._parsed(JobState.from_json,
                            self._call("DELETE", f"/v1/admin/jobs/{job_id}"))

    def events(self, job_id: str, timeout: float | None = None) -> Iterator[JobState]:
        """The job's snapshots as they change, ending with its final one. `timeout`: the
        longest wait for the next one (None: as long as the job runs)."""
        url = f"/v1/admin/jobs/{job_id}/events"
        try:
            with self._client.stream("GET", url, timeout=httpx.Timeout(
                    self._client.timeout.connect, read=timeout)) as reply:
                if reply.status_code >= 400:
                    raise self._error(reply)
                data: list[str] = []
                size = 0
                for line in capped_lines(reply):
                    if line is None:
                        raise self._refused(f"a job event line over {MAX_EVENT_BYTES} bytes")
                    if line.startswith("data:"):
                        size += len(line)
                        if size > MAX_EVENT_BYTES:
                            raise self._refused(f"a job event over {MAX_EVENT_BYTES} bytes")
                        data.append(line[5:].removeprefix(" "))
                        continue
                    if line or not data:
                        continue
                    payload, data, size = "\n".join(data), [], 0
                    if payload.strip() == "[DONE]":
                        return
                    state = self._parsed(JobState.from_json, self._json(payload.encode()))
                    yield state
                    if state.done:
                        return
        except httpx.HTTPError as exc:
            raise connection_error(exc, self.base_url) from None

    def wait(self, job_id: str, on_progress: Callable[[JobState], None] | None = None,
             cancel: threading.Event | None = None) -> JobState:
        """Follow a job to its end, calling on_progress(state) on each change; a set `cancel`
        cancels it at the next change. Returns the final state (it may be failed or
        cancelled: look at .state, nothing is raised for those)."""
        last: JobState | None = None
        for state in self.events(job_id):
            last = state
            if on_progress is not None:
                on_progress(state)
            if cancel is not None and cancel.is_set() and not state.done:
                last = self.cancel(job_id)
                break
        if last is None or not last.done:
            last = self.job(job_id)
        return last

    # ------------------------------------------------------------------ plumbing
    def _call(self, method: str, path: str, body: dict | None = None) -> Any:
        try:
            # every state-changing call declares JSON, even a bodyless DELETE: the server
            # refuses writes that do not (cross_site.py)
            headers = {"Content-Type": "application/json"} if method != "GET" else None
            with self._client.stream(method, path, json=body, headers=headers) as reply:
                if reply.status_code >= 400:
                    raise self._error(reply)
                raw = read_capped_sync(reply, MAX_ANSWER_BYTES)
        except httpx.HTTPError as exc:
            raise connection_error(exc, self.base_url) from None
        if raw is None:
            raise self._refused(f"an answer over {MAX_ANSWER_BYTES >> 20} MiB")
        return self._json(raw)

    def _json(self, raw: bytes) -> Any:
        try:
            return json.loads(raw)
        except (ValueError, RecursionError):
            raise self._refused("an answer that is not JSON") from None

    def _parsed(self, make: Callable[[Any], Any], data: Any) -> Any:
        """`make(data)`, or an AdminError when the server's JSON has another shape."""
        try:
            return make(data)
        except (KeyError, TypeError, ValueError, AttributeError):
            raise self._refused("an answer of an unexpected shape") from None

    def _refused(self, what: str) -> AdminError:
        return AdminError(f"the server at {self.base_url} sent {what}", 502, "bad_answer")

    def _error(self, reply: httpx.Response) -> EngineError:
        raw = read_capped_sync(reply, MAX_ERROR_BYTES) or b""
        try:
            body = json.loads(raw)
        except (ValueError, RecursionError):
            body = raw.decode("utf-8", "replace")
        message, param, code = error_message(body, reply.status_code)
        if reply.status_code == 401:
            return RemoteAuthError(f"the server at {self.base_url} refused the API key: "
                                   f"{message}")
        return AdminError(message, reply.status_code, code, param)
