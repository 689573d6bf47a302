"""The Quantize wizard aimed at a connected server that allows admin: the models come from the
server's roots (ROOT/REL), Run starts POST /v1/admin/quantize whose progress events drive the
run step's progress view, Cancel cancels the server's job (DELETE jobs/{id}), and the result
view shows what the job returned: the output's ROOT/REL name and, with "measure on the server",
the float-vs-INT8 rows. Sensitivity and Save as run on this machine only. Every call is a
BackgroundJob over console/remote_jobs.py; the local wizard is unchanged."""

from __future__ import annotations

from PySide6.QtCore import QObject
from PySide6.QtWidgets import QCheckBox

from ..jobs import BackgroundJob
from ..remote_jobs import (
    NO_ADMIN,
    out_name,
    remote_load,
    remote_quantize,
    result_summary,
    run_from_result,
)
from ..widgets.server_target import PickerOwner, ServerTarget


class RemoteQuant(QObject, PickerOwner):
    """Owns the wizard's "Run on" picker; while a server is the target, fills the model list
    from its roots and runs the plan there as an admin quantize job."""

    def __init__(self, page):
        super().__init__(page)
        self.page = page
        self.ctx = page.ctx
        self.view = None  # the last AdminView read
        self.problem = ""  # why the server's models cannot be quantized now
        self.result: dict | None = None  # the last remote job's result
        self._load: BackgroundJob | None = None
        self.picker = ServerTarget(self.ctx, "Run on this machine", "Run on {}", page)
        self.picker.setToolTip("Where the quantization runs: this machine, or a connected "
                               "server started with --allow-admin")
        self.picker.target_changed.connect(self._target_changed)
        self.evaluate = QCheckBox("Measure float vs INT8 on the server (slower)")
        self.evaluate.setChecked(True)
        self.evaluate.hide()
        run_lay = page.run_step.run_progress.parentWidget().layout()
        run_lay.insertWidget(run_lay.indexOf(page.run_step.run_progress), self.evaluate)

    # ------------------------------------------------------------------ target
    def _target_changed(self) -> None:
        p = self.page
        remote = self.active()
        p.model_step.folder_btn.setVisible(not remote)
        p.calib_step.calib_browse.setEnabled(not remote)
        p.calib_step.calib_path.setPlaceholderText(
            "a text file on the server: ROOT/REL as its model list names paths" if remote
            else "path to a calibration file")
        p.run_step.fmt_box.setEnabled(not remote)
        self.evaluate.setVisible(remote)
        p.run_step.load_btn.setText("Load on the server" if remote else "Load into engine")
        p.run_step.auto_load.setText("Load the result on the server" if remote
                                     else "Load the result into the engine")
        self.show_focus()
        self.view, self.result = None, None
        if remote:
            self.problem = "Reading the server's models…"
            self._fill([])
            self.refresh()
        else:
            self.problem = ""
            p.model_step.model_box.clear()
            p.set_models(self.ctx.engine_host.models())
        p.update_calib_info()
        p._options_changed()

    def check(self) -> None:
        """ValueError (one line) when the server's models cannot be quantized now."""
        if self.active() and self.problem:
            raise ValueError(self.problem)

    # ------------------------------------------------------------------ the server's models
    def refresh(self) -> BackgroundJob | None:
        return self.read_admin_view(
            self._show_view, lambda msg: self._show_problem(f"⚠ Cannot read the server: {msg}"))

    def _show_view(self, view) -> None:
        self.view = view
        if not view.allowed:
            self._show_problem(NO_ADMIN)
            return
        models = [m for m in view.listing.models if m.ok and not m.quantization]
        self.problem = "" if models else (
            "The server lists no float model under its roots: add one there (--model-root).")
        self._fill(models)
        self.page._options_changed()

    def _show_problem(self, text: str) -> None:
        self.problem = text
        self._fill([])
        self.page._options_changed()

    def _fill(self, models) -> None:
        box = self.page.model_step.model_box
        current = box.currentData()
        box.blockSignals(True)
        box.clear()
        for m in models:
            box.addItem(f"{m.path}  ({m.summary})", (m.name, m.path))
        # by value: findData does not match the (name, path) tuples
        keys = [tuple(box.itemData(i)) for i in range(box.count())]
        box.setCurrentIndex(keys.index(tuple(current)) if current is not None
                            and tuple(current) in keys else 0)
        box.blockSignals(False)
        self.page.model_step._model_changed()
        if self.problem:
            self.page.model_step.model_info.setText(self.problem)

    # ------------------------------------------------------------------ run
    def start(self, plan, panel) -> BackgroundJob | None:
        """Quantize on the server into a fresh output folder; the page's job, so its progress
        view, Cancel and busy state are the local run's."""
        where = self.picker.where()
        if where is None:
            panel.finish("The server is no longer connected.")
            return None
        name = out_name(plan, self.view.listing if self.view else None)
        evaluate = self.evaluate.isChecked()
        p = self.page
        job = p._start_job(lambda r: remote_quantize(*where, plan, name, evaluate, r, r.cancel),
                           "quantize", panel)
        if job is None:
            return None
        p.run_step.clear_verdict()
        panel.finish(f"Starting on the server, writing {name}…")
        job.finished.connect(lambda result: self._on_result(plan, result))
        job.failed.connect(lambda msg: panel.finish(f"⚠ Quantization failed: {msg}"))
        job.cancelled.connect(lambda: panel.finish(
            "Cancelled. The server wrote nothing (no output folder)."))
        job.ended.connect(self.refresh)
        return job

    def _on_result(self, plan, result: dict) -> None:
        self.result = result
        p = self.page
        host = self.ctx.engines.label_for(self.target())
        run = run_from_result(plan, result, server=self.target())
        if run is not None:
            p.show_run(run)
            p.store.add(run)  # "Earlier runs" lists it, marked with the server
        else:
            p.run = None
        rs = p.run_step
        rs.save_btn.setEnabled(False)  # Save as… re-exports a checkpoint on this machine
        rs.load_btn.setEnabled(True)
        rs.save_status.setText(f"On {host}: {result.get('path', '?')} (load it there, or "
                               "from the Models page aimed at the server).")
        rs.run_progress.finish(f"Done on {host}: {result_summary(result)}")
        if rs.auto_load.isChecked():
            self.load_output(result.get("path", ""))

    def load_output(self, path: str) -> BackgroundJob | None:
        """Load the quantized output in the server's engine (status in the save line)."""
        where = self.picker.where()
        status = self.page.run_step.save_status
        if where is None or not path or (self._load is not None and self._load.running()):
            return None
        taken = {m.get("name") for m in (self.view.listing.loaded if self.view and
                                         self.view.listing else ())}
        base = path.rsplit("/", 1)[-1]
        name, i = base, 2
        while name in taken:
            name, i = f"{base}-{i}", i + 1
        job = BackgroundJob(lambda r: remote_load(*where, path, name, "auto", "auto", r,
                                                  r.cancel), "admin-load", parent=self)
        job.progress.connect(lambda _f, msg: status.setText(f"Loading {path} on the server: "
                                                            f"{msg}"))
        job.finished.connect(lambda _s: status.setText(
            f"Loaded as '{name}' on the server: pick '{name} @ "
            f"{self.ctx.engines.label_for(where[0])}' in Chat."))
        job.failed.connect(lambda msg: status.setText(f"⚠ Loading failed: {msg}"))
        job.cancelled.connect(lambda: status.setText("Loading cancelled."))
        job.ended.connect(lambda: self.ctx.remote.refresh(where[0]))
        status.setText(f"Loading {path} on the server…")
        self._load = job.start()
        return job
