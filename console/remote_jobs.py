"""Admin work on a connected server (`serve --allow-admin`) for the Models page and the Quantize
wizard, free of Qt: read what the server offers, start a load or a quantization there and follow
its progress events to the end, cancel it, and turn a quantization's result into the wizard's
QuantRun. The functions block on the network; ServerAdmin, the model the two pages render, runs
them on its own worker threads (console.threads) and announces each change on `events`
(console.events.Emitter), from the thread its `post` delivers to: the GUI thread in the console
(console.gui_thread.post), the test's own thread in tests.

Paths are the server's admin paths (ROOT/REL), never local ones."""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from types import SimpleNamespace
from typing import Any

from ..engine.remote.admin import AdminListing, JobState, RemoteAdmin
from ..engine.runtime.types import Cancelled, EngineError
from .events import Emitter
from .quant_runs import QuantPlan, QuantRun, VariantMeasure, _now
from .threads import start_thread

log = logging.getLogger(__name__)

NO_ADMIN = "This server does not allow admin (start serve with --allow-admin)."


@dataclass(frozen=True)
class AdminView:
    """What a server offers: whether /v1/admin is on, and then its listing."""

    url: str
    allowed: bool
    listing: AdminListing | None = None


def read_admin(url: str, api_key: str | None) -> AdminView:
    """Whether the server allows admin and, if so, its model folders and served models."""
    with RemoteAdmin(url, api_key) as admin:
        if not admin.allowed():
            return AdminView(url, False)
        return AdminView(url, True, admin.models())


def follow(admin: RemoteAdmin, job: JobState, report: Callable[[float, str], None],
           cancel: threading.Event) -> JobState:
    """Follow the job's progress events to its final state, calling report(fraction, message)
    on each. A set `cancel` sends DELETE jobs/{id} at once: a watcher does it, since the event
    stream's read blocks until the server's next change (a load step can be long)."""
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            if cancel.wait(0.2):
                if not done.is_set():
                    try:
                        admin.cancel(job.id)
                    except Exception as exc:  # noqa: BLE001 - the stream reports the outcome
                        log.warning("cancelling admin job %s: %s", job.id, exc)
                return

    watcher = start_thread(watch, f"admin-cancel-{job.id}")
    try:
        return admin.wait(job.id, lambda s: report(s.fraction, s.message or s.stage))
    finally:
        done.set()
        # the final event can come before the DELETE's answer: the caller closes the client
        # next, so the cancel gets its answer first (the server answers within its 10 s wait)
        watcher.join(timeout=15.0)


def _outcome(final: JobState, what: str) -> JobState:
    if final.state == "cancelled":
        raise Cancelled()
    if final.state != "done":
        raise EngineError(f"{what} failed on the server: {final.error or final.message}")
    return final


def remote_load(url: str, api_key: str | None, path: str, name: str | None, device: str,
                dtype: str, report: Callable[[float, str], None],
                cancel: threading.Event) -> JobState:
    """Load `path` (ROOT/REL) in the server's engine; Cancelled when cancelled, EngineError
    (one line) when the server refused or the load failed."""
    with RemoteAdmin(url, api_key) as admin:
        job = admin.load(path, name or None, device=device, dtype=dtype)
        return _outcome(follow(admin, job, report, cancel), f"loading {path}")


def remote_unload(url: str, api_key: str | None, name: str) -> str:
    with RemoteAdmin(url, api_key) as admin:
        admin.unload(name)
    return name


def quantize_problem(admin: ServerAdmin) -> str:
    """Why the wizard cannot quantize on the server `admin` is aimed at ("" when it can, or for
    this machine)."""
    if not admin.url:
        return ""
    if admin.error:
        return f"⚠ Cannot read the server: {admin.error}"
    if admin.view is None:
        return "Reading the server's models…"
    if not admin.view.allowed:
        return NO_ADMIN
    if not any(m.ok and not m.quantization for m in admin.models()):
        return "The server lists no float model under its roots: add one there (--model-root)."
    return ""


def out_name(plan: QuantPlan, listing: AdminListing | None) -> str:
    """The output folder's name: the model and method, numbered past the outputs the server
    already lists (a run never replaces an earlier one)."""
    base = f"{plan.model_name}-{plan.method}".replace("/", "-")
    taken = set()
    if listing is not None:
        prefix = f"{listing.output_root}/"
        taken = {m.path.removeprefix(prefix) for m in listing.models if m.path.startswith(prefix)}
    name, i = base, 2
    while name in taken:
        name, i = f"{base}-{i}", i + 1
    return name


def quantize_body(plan: QuantPlan, evaluate: bool) -> dict[str, Any]:
    """The wizard's plan as POST /v1/admin/quantize fields (plan.model_dir is the admin path)."""
    return {"method": plan.method, "preset": plan.engine_preset, "skip": list(plan.skip),
            "smoothquant": plan.smoothquant, "samples": plan.samples, "seq_len": plan.seq_len,
            "int8_head": plan.head_mode,
            "budget_pct": plan.budget_pct if plan.fit_budget else None,
            "calib_path": plan.calib_file, "evaluate": evaluate}


def remote_quantize(url: str, api_key: str | None, plan: QuantPlan, name: str, evaluate: bool,
                    report: Callable[[float, str], None],
                    cancel: threading.Event) -> dict[str, Any]:
    """Run the plan on the server into OUTPUT_ROOT/`name`; returns the job's result (its
    `path` is the output's admin path). Cancelled when cancelled: the server then writes
    nothing."""
    with RemoteAdmin(url, api_key) as admin:
        job = admin.quantize(plan.model_dir, name, **quantize_body(plan, evaluate))
        final = _outcome(follow(admin, job, report, cancel), f"quantizing {plan.model_dir}")
    return dict(final.result or {})


def run_from_result(plan: QuantPlan, result: dict[str, Any], server: str = "") -> QuantRun:
    """The result as the wizard's QuantRun (out_dir is the server's ROOT/REL path); a job that
    measured nothing (evaluate was off) gives a run without float and INT8 measures."""
    rows = result.get("comparison") or []
    measured = len(rows) >= 2

    def measure(row: dict) -> VariantMeasure:
        defaults = {"ttft_ms": 0.0, "tok_s_b1": 0.0, "perplexity": 0.0}
        return VariantMeasure.from_row(SimpleNamespace(**{**row, **{
            k: v for k, v in defaults.items() if row.get(k) is None}}))

    cost = result.get("int8_head_cost")
    return QuantRun(key=f"remote:{server}:{result.get('path', '')}", plan=asdict(plan),
                    created=_now(), server=server,
                    out_dir=str(result.get("path", "")), fmt=str(result.get("format", "native")),
                    seconds=float(result.get("seconds") or 0.0),
                    quantized_layers=len(result.get("quantized") or ()),
                    skipped_layers=len(result.get("skipped") or ()),
                    calib_samples=int(result.get("calib_samples") or 0),
                    float=measure(rows[0]) if measured else None,
                    quant=measure(rows[1]) if measured else None,
                    eval_source="server" if measured else "not measured",
                    calibration=result.get("calibration") or "none (weights only)",
                    kept_float=dict(result.get("kept_float") or {}),
                    int8_weight_fraction=result.get("int8_weight_fraction"),
                    budget_note=(result.get("budget") or {}).get("why", ""),
                    int8_head=bool(result.get("int8_head")),
                    head_reason=result.get("int8_head_reason") or "",
                    head_cost=cost if isinstance(cost, dict) else None)


def result_summary(result: dict[str, Any]) -> str:
    """One line for a finished remote quantization."""
    parts = [f"wrote {result.get('path', '?')}"]
    if result.get("seconds") is not None:
        parts.append(f"in {float(result['seconds']):.0f} s")
    if result.get("quantized") is not None:
        parts.append(f"{len(result['quantized'])} layers int8, "
                     f"{len(result.get('skipped') or ())} float")
    if result.get("int8_weight_fraction") is not None:
        parts.append(f"{100 * float(result['int8_weight_fraction']):.1f}% of linear weights int8")
    if result.get("perplexity_change_pct") is not None:
        parts.append(f"perplexity {float(result['perplexity_change_pct']):+.2f}%")
    return ", ".join(parts)


# ---------------------------------------------------------------------- the model

@dataclass(frozen=True)
class AdminJob:
    """One snapshot of the job a ServerAdmin runs on its server: `kind` "load", "unload" or
    "quantize", on `what` (a ROOT/REL path, or a served name); `state` "running", then "done"
    (with `result`), "failed" (with `error`, one line) or "cancelled"."""

    seq: int
    kind: str
    url: str
    what: str
    state: str = "running"
    fraction: float = 0.0
    message: str = ""
    cancelling: bool = False
    result: Any = None
    error: str = ""

    @property
    def running(self) -> bool:
        return self.state == "running"


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _call_now(fn: Callable, *args) -> None:
    fn(*args)


_MIN_PROGRESS_S = 0.05  # the server may report thousands of steps; a view needs a few a second


class ServerAdmin:
    """What one page works on through a connected server's admin API: which server (`url`, ""
    for this machine), what it offers (`view`, the last AdminView read; `error`, why the last
    read failed), and the one job on it at a time (`job`, an AdminJob; `result`, the last
    quantization's). Events, each delivered through `post`:

    - "target" (url): aimed elsewhere; the view and error are cleared;
    - "view" (AdminView) / "read_failed" (message): a read of the server now aimed at answered
      (an answer for a server no longer aimed at, or overtaken by a later read, is dropped);
    - "job" (AdminJob): a job started, moved, asked to cancel, or ended. After a job ends the
      model reads the server again (its listing changed) and, after a load or an unload, calls
      `served_changed(url)` (the console refreshes the connection's model list).

    `connection(url)` gives the server's (URL, API key) at the time of each call, None once it
    is disconnected."""

    def __init__(self, connection: Callable[[str], tuple[str, str | None] | None],
                 post: Callable[..., None] = _call_now,
                 served_changed: Callable[[str], object] = lambda _url: None):
        self._connection = connection
        self._post = post
        self._served_changed = served_changed
        self.events = Emitter()
        self.url = ""
        self.view: AdminView | None = None
        self.error = ""
        self.reading = False
        self.job: AdminJob | None = None
        self.result: dict[str, Any] | None = None
        self._gen = 0  # bumped by every aim and read: an answer from an older one is stale
        self._cancel: threading.Event | None = None
        self._closed = False

    def close(self) -> None:
        """Its views are gone: what workers still post is dropped, nothing more is announced."""
        self._closed = True
        self._gen += 1
        self.events = Emitter()

    # ------------------------------------------------------------------ which server
    def aim(self, url: str | None) -> None:
        """Work on the server at `url` (None or "": this machine, nothing to read); a server's
        read starts at once."""
        url = url or ""
        if url == self.url:
            return
        self._gen += 1
        self.url, self.view, self.error, self.reading, self.result = url, None, "", False, None
        self.events.emit("target", url)
        if url:
            self.refresh()

    def allowed(self) -> bool:
        return self.view is not None and self.view.allowed

    def models(self) -> list:
        """The folders the server lists (AdminModel); [] before a read or without admin."""
        return list(self.view.listing.models) if self.view and self.view.listing else []

    # ------------------------------------------------------------------ reading
    def refresh(self) -> threading.Thread | None:
        """Read the server's AdminView on a worker; None for this machine or a server gone."""
        where = self._connection(self.url) if self.url else None
        if where is None:
            return None
        self._gen += 1
        gen = self._gen
        self.reading = True

        def work() -> None:
            try:
                view, error = read_admin(*where), ""
            except Exception as exc:  # noqa: BLE001 - one line for the page
                view, error = None, _one_line(exc)
            self._post(self._read_done, gen, view, error)

        return start_thread(work, "admin-read")

    def _read_done(self, gen: int, view: AdminView | None, error: str) -> None:
        if gen != self._gen:
            return  # aimed elsewhere meanwhile, or a later read is on its way
        self.reading = False
        if view is None:
            self.error = error
            self.events.emit("read_failed", error)
        else:
            self.view, self.error = view, ""
            self.events.emit("view", view)

    # ------------------------------------------------------------------ jobs
    def busy(self) -> bool:
        return self.job is not None and self.job.running

    def start_load(self, path: str, name: str | None, device: str = "auto",
                   dtype: str = "auto") -> AdminJob | None:
        """Load ROOT/REL `path` in the server's engine as `name`; None while a job runs, for
        this machine, or for a server gone or without admin."""
        return self._start("load", path, lambda url, key, report, cancel: remote_load(
            url, key, path, name, device, dtype, report, cancel))

    def start_unload(self, name: str) -> AdminJob | None:
        return self._start("unload", name,
                           lambda url, key, _report, _cancel: remote_unload(url, key, name))

    def start_quantize(self, plan: QuantPlan, evaluate: bool) -> AdminJob | None:
        """Quantize `plan` (its model_dir a ROOT/REL path) into a fresh output folder."""
        name = out_name(plan, self.view.listing if self.view else None)
        return self._start("quantize", name, lambda url, key, report, cancel: remote_quantize(
            url, key, plan, name, evaluate, report, cancel))

    def cancel(self) -> bool:
        """Ask the running job to stop (the server cancels it); False when none runs."""
        if not self.busy() or self._cancel is None:
            return False
        self._cancel.set()
        self._set_job(dataclasses.replace(self.job, cancelling=True))
        return True

    def _start(self, kind: str, what: str, fn: Callable) -> AdminJob | None:
        where = self._connection(self.url) if self.url else None
        if where is None or self.busy() or not self.allowed():
            return None
        seq = (self.job.seq + 1) if self.job is not None else 1
        cancel = threading.Event()
        self._cancel = cancel
        if kind == "quantize":
            self.result = None
        self._set_job(AdminJob(seq, kind, where[0], what, message="starting…"))
        last = [0.0]

        def report(fraction: float, message: str) -> None:
            now = time.monotonic()
            if now - last[0] >= _MIN_PROGRESS_S or fraction >= 1.0:
                last[0] = now
                self._post(self._progress, seq, fraction, message)

        def work() -> None:
            try:
                result = fn(*where, report, cancel)
            except Cancelled:
                self._post(self._ended, seq, "cancelled", None, "")
            except Exception as exc:  # noqa: BLE001 - one line for the page
                self._post(self._ended, seq, "failed", None, _one_line(exc))
            else:
                self._post(self._ended, seq, "done", result, "")

        start_thread(work, f"admin-{kind}")
        return self.job

    def _set_job(self, job: AdminJob) -> None:
        self.job = job
        self.events.emit("job", job)

    def _progress(self, seq: int, fraction: float, message: str) -> None:
        job = self.job
        if self._closed or job is None or job.seq != seq or not job.running:
            return
        self._set_job(dataclasses.replace(job, fraction=max(0.0, min(1.0, float(fraction))),
                                          message=job.message if job.cancelling else message))

    def _ended(self, seq: int, state: str, result: Any, error: str) -> None:
        job = self.job
        if self._closed or job is None or job.seq != seq:
            return
        if state == "done" and job.kind == "quantize":
            self.result = dict(result or {})
        self._cancel = None
        self._set_job(dataclasses.replace(job, state=state, result=result, error=error,
                                          fraction=1.0 if state == "done" else job.fraction))
        if job.kind in ("load", "unload"):
            self._served_changed(job.url)
        if job.url == self.url:
            self.refresh()  # what the server lists changed (or may have)
