"""Admin work on a connected server (`serve --allow-admin`) for the Models page and the Quantize
wizard, free of Qt: read what the server offers, start a load or a quantization there and follow
its progress events to the end, cancel it, and turn a quantization's result into the wizard's
QuantRun. Every function here blocks on the network: the pages run them as BackgroundJobs
(console/jobs.py), never on the GUI thread.

Paths are the server's admin paths (ROOT/REL), never local ones."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass
from types import SimpleNamespace
from typing import Any

from ..engine.remote.admin import AdminListing, JobState, RemoteAdmin
from ..engine.runtime.types import Cancelled, EngineError
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


def run_from_result(plan: QuantPlan, result: dict[str, Any], server: str = "") -> QuantRun | None:
    """The result as the wizard's QuantRun (out_dir is the server's ROOT/REL path); None when
    the job measured nothing (evaluate was off)."""
    rows = result.get("comparison") or []
    if len(rows) < 2:
        return None

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
                    float=measure(rows[0]), quant=measure(rows[1]), eval_source="server",
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
