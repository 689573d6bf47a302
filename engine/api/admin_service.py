"""What /v1/admin does: list the models under the roots, load and unload them in the served
engine, quantize one into the output root. Routes call in here (off the event loop); every
client path goes through AdminRoots first, and nothing sent back holds an absolute path.

Loads use the engine's own load path (LocalEngine.load: its progress and cancel, as the
console's EngineHost loads); quantizations run engine.quant's run_workflow, the workflow the
wizard and the CLI run, on a short-lived thread of their own (engine.runtime.threads: the
engine thread stays the only long-lived OpenMP team).
"""

from __future__ import annotations

import logging
import shutil
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path, PurePosixPath
from typing import Any

from ..runtime.types import Cancelled, EngineError, InvalidRequestError
from .admin_jobs import CANCELLED, DONE, FAILED, AdminJob, AdminJobs
from .admin_paths import AdminRoots
from .admin_schemas import LoadBody, QuantizeBody

log = logging.getLogger("npu_console.engine.api")

class AdminService:
    def __init__(self, engine: Any, model_roots: tuple[str, ...], output_root: str | None):
        if output_root is None:
            from ..paths import state_dir

            output_root = str(state_dir() / "quantized")
        if not callable(getattr(engine, "load", None)) or not callable(
                getattr(engine, "unload", None)):
            from .settings import UnsafeSettingsError

            raise UnsafeSettingsError("--allow-admin needs an engine that loads models here "
                                      f"({type(engine).__name__} does not)")
        self.engine = engine
        self.roots = AdminRoots(model_roots, output_root)
        self.jobs = AdminJobs()
        # admin calls (listing walks folders, unload waits for requests, cancel waits up to
        # 10 s) run on threads of their own: on the loop's default pool, which tokenizes chat
        # requests, six blocked admin calls would stall every completion
        self.executor = ThreadPoolExecutor(max_workers=4, thread_name_prefix="npu-console-admin")

    def scrub(self, text: str) -> str:
        """A message with every root's absolute path replaced by its label: errors from the
        loader and the quantizer name files, and clients see only admin paths."""
        for root in sorted(self.roots.roots, key=lambda r: len(str(r.path)), reverse=True):
            text = text.replace(str(root.path), root.label)
        return text

    # ------------------------------------------------------------------ listing
    def models(self) -> dict[str, Any]:
        from ..models import inspect_model_folder

        loaded: dict[str, list[str]] = {}
        served = []
        for info in self.engine.models():
            rel = self.roots.relative(info.path) if info.path else None
            if rel is not None:
                loaded.setdefault(rel, []).append(info.name)
            served.append({"name": info.name, "path": rel, "architecture": info.architecture,
                           "dtype": info.dtype, "quantization": info.quantization,
                           "device": info.device, "num_parameters": info.num_parameters,
                           "weight_bytes": info.weight_bytes, "kv_bytes": info.kv_bytes,
                           "kv_dtype": info.kv_dtype})
        models = []
        for client, resolved in self.roots.listing():
            report = inspect_model_folder(resolved)
            fatal = [self.scrub(str(p)) for p in report.problems if p.fatal]
            models.append({
                "path": client, "name": _default_name(client),
                "format": report.source_format, "architecture": report.architecture,
                "model_type": report.model_type, "parameters": report.num_parameters,
                "size_bytes": report.checkpoint_bytes, "dtype": report.checkpoint_dtype,
                "quantization": report.quantization, "max_context": report.max_context,
                "chat_template": report.has_chat_template, "summary": report.summary(),
                "ok": report.ok, "problems": fatal[:3],
                "loaded_as": loaded.get(client, [])})
        return {"roots": [{"name": r.label, "output": r.path == self.roots.output}
                          for r in self.roots.roots],
                "output_root": self.roots.output_label(), "models": models, "loaded": served}

    # ------------------------------------------------------------------ load / unload
    def start_load(self, body: LoadBody) -> AdminJob:
        """Start loading; a name already taken, a device not present or a bad path fails here
        (before any job exists), a model that cannot load fails the job."""
        from ..devices import default_dtype, get_device

        target = self.roots.resolve(body.path)
        name = body.name or _default_name(body.path)
        try:
            dev = get_device(body.device)
        except ValueError as exc:
            raise InvalidRequestError(str(exc), param="device") from None
        dtype = default_dtype(dev) if body.dtype == "auto" else body.dtype
        load = self.engine.load(target, name=name, device=dev.torch_device, dtype=dtype,
                                default=body.default, replace=body.replace)
        params = {"path": body.path, "name": name, "device": dev.torch_device, "dtype": dtype,
                  "replace": body.replace, "default": body.default}
        try:
            job = self.jobs.create("load", params)
        except BaseException:
            load.cancel()
            raise
        job.on_cancel = load.cancel
        load.add_progress_callback(lambda f, what: job.progress("load", f, what))
        threading.Thread(target=self._await_load, args=(job, load), daemon=True,
                         name=f"admin-{job.id}").start()
        return job

    def _await_load(self, job: AdminJob, load: Any) -> None:
        try:
            info = load.result()
        except Cancelled:
            job.finish(CANCELLED, message=f"loading {job.params['name']} was cancelled")
        except EngineError as exc:
            job.finish(FAILED, error=self.scrub(exc.message), message="failed")
        except Exception as exc:  # reported through the job
            log.exception("admin load %s failed", job.id)
            job.finish(FAILED, error=f"internal error: {type(exc).__name__}", message="failed")
        else:
            job.finish(DONE, message=f"serving {info.name}", result={
                "name": info.name, "architecture": info.architecture, "dtype": info.dtype,
                "device": info.device, "quantization": info.quantization,
                "max_context": info.max_context, "path": job.params["path"]})

    def unload(self, name: str, timeout_s: float = 60.0) -> dict[str, Any]:
        self.engine.unload(name).result(timeout_s)
        return {"name": name, "unloaded": True}

    # ------------------------------------------------------------------ quantize
    def start_quantize(self, body: QuantizeBody) -> AdminJob:
        from ..quant import QuantizeRequest
        from ..quant.report import EvalSpec

        source = self.roots.resolve(body.path)
        out = self.roots.output_dir(body.out_name)
        calib = str(self.roots.resolve(body.calib_path)) if body.calib_path else None
        evalf = str(self.roots.resolve(body.eval_path)) if body.eval_path else None
        if out.exists() and not body.overwrite:
            raise InvalidRequestError(
                f"{self.roots.output_label()}/{out.name} already exists: choose another "
                "out_name or send overwrite: true", param="out_name")
        req = QuantizeRequest(
            model_dir=str(source), out_dir=str(out), method=body.method, fmt=body.format,
            preset=body.preset, skip=tuple(body.skip), smoothquant=body.smoothquant,
            group_size=body.group_size, calib_file=calib, samples=body.samples,
            seq_len=body.seq_len, device=body.device, dtype=body.dtype,
            overwrite=body.overwrite, int8_head=body.int8_head, recipe=body.recipe,
            rotate=body.rotate, turn_down=body.turn_down, budget_pct=body.budget_pct,
            eval_file=evalf,
            evaluate=EvalSpec(data=evalf) if body.evaluate else None)
        params = body.model_dump()
        params["out_path"] = str(PurePosixPath(self.roots.output_label(), out.name))
        job = self.jobs.create("quantize", params, exclusive=True)
        threading.Thread(target=self._run_quantize, args=(job, req, out, out.exists()),
                         daemon=True, name=f"admin-{job.id}").start()
        return job

    def _run_quantize(self, job: AdminJob, req: Any, out: Path, existed: bool) -> None:
        from ..quant import QuantError, run_workflow

        def on_event(event: Any) -> None:  # engine.quant.workflow.StageEvent
            job.progress(event.stage, event.fraction, event.message)

        try:
            result = run_workflow(req, on_event, job.cancel_event)
            if job.cancel_event.is_set():  # asked after the last check: the output goes too
                raise Cancelled()
        except Cancelled:
            self._discard(out, existed)
            job.finish(CANCELLED, message="quantization cancelled; nothing was written")
        except (QuantError, EngineError) as exc:
            self._discard(out, existed)
            job.finish(FAILED, error=self.scrub(str(exc)), message="failed")
        except Exception as exc:  # reported through the job
            log.exception("admin quantize %s failed", job.id)
            self._discard(out, existed)
            job.finish(FAILED, error=self.scrub(f"internal error: {type(exc).__name__}: {exc}"),
                       message="failed")
        else:
            summary = result.to_dict()
            summary.pop("out_dir", None)
            summary["path"] = job.params["out_path"]
            if result.comparison is not None:  # the float-vs-INT8 rows the wizard shows
                summary["comparison"] = [asdict(row) for row in result.comparison.rows]
            job.finish(DONE, result=summary, message=f"wrote {summary['path']}")

    @staticmethod
    def _discard(out: Path, existed: bool) -> None:
        """Remove what a failed or cancelled run wrote; an old folder it was to replace stays
        (the export swaps folders atomically, so it is still the old one)."""
        if not existed:
            shutil.rmtree(out, ignore_errors=True)

    # ------------------------------------------------------------------ jobs
    def cancel(self, job: AdminJob, wait_s: float = 10.0) -> bool:
        """Cancel and wait up to `wait_s` for the job to end; True when it has."""
        job.cancel()
        return job.wait(wait_s)

    def close(self, wait_s: float = 10.0) -> None:
        self.jobs.close(wait_s)
        self.executor.shutdown(wait=False, cancel_futures=True)


def _default_name(client_path: str) -> str:
    """A model id from an admin path: the folder's name, a GGUF file's name without .gguf."""
    last = PurePosixPath(client_path.strip()).name
    return last.removesuffix(".gguf")
