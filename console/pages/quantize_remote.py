"""The Quantize wizard aimed at a connected server that allows admin: the models come from the
server's roots (ROOT/REL), Run starts POST /v1/admin/quantize whose progress events drive the
run step's progress view, Cancel cancels the server's job (DELETE jobs/{id}), and the result
view shows what the job returned: the output's ROOT/REL name and, with "measure on the server",
the float-vs-INT8 rows. Sensitivity and Save as run on this machine only. What the server
offers, the job on it and its result are the model's (console.remote_jobs.ServerAdmin, free of
Qt); this view forwards the wizard's choices to it and renders its events. The local wizard is
unchanged."""

from __future__ import annotations

from PySide6.QtCore import QObject
from PySide6.QtWidgets import QCheckBox

from ..jobs import BackgroundJob, FollowedJob
from ..remote_jobs import AdminJob, quantize_problem, result_summary, run_from_result
from ..widgets.server_target import PickerOwner, ServerTarget


class RemoteQuant(QObject, PickerOwner):
    """Owns the wizard's "Run on" picker; while a server is the target, fills the model list
    from the server's roots (`admin`'s view) and runs the plan there as an admin quantize job."""

    def __init__(self, page):
        super().__init__(page)
        self.page = page
        self.ctx = page.ctx
        self._followed: FollowedJob | None = None  # the server's quantization, as the page's job
        self.picker = ServerTarget(self.ctx, "Run on this machine", "Run on {}", page)
        self.picker.setToolTip("Where the quantization runs: this machine, or a connected "
                               "server started with --allow-admin")
        ev = self.own_admin(self.ctx).events
        ev.subscribe("target", lambda _url: self._target_changed())
        ev.subscribe("view", lambda _view: self._show_models())
        ev.subscribe("read_failed", lambda _msg: self._show_models())
        ev.subscribe("job", self._show_job)
        self.evaluate = QCheckBox("Measure float vs INT8 on the server (slower)")
        self.evaluate.setChecked(True)
        self.evaluate.hide()
        self.evaluate.toggled.connect(lambda _on: self._run_label())
        run_lay = page.run_step.run_progress.parentWidget().layout()
        run_lay.insertWidget(run_lay.indexOf(page.run_step.run_progress), self.evaluate)

    @property
    def problem(self) -> str:
        """Why the server's models cannot be quantized now ("" when they can)."""
        return quantize_problem(self.admin)

    @property
    def result(self) -> dict | None:
        """The last quantization's result on the server (the model's)."""
        return self.admin.result

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
        self._run_label()
        p.run_step.load_btn.setText("Load on the server" if remote else "Load into engine")
        p.run_step.auto_load.setText("Load the result on the server" if remote
                                     else "Load the result into the engine")
        self.show_focus()
        if remote:
            self._show_models()
        else:
            p.model_step.model_box.clear()
            p.set_models(self.ctx.engine_host.models())
        p.update_calib_info()
        p._options_changed()

    def _run_label(self) -> None:
        measure = not self.active() or self.evaluate.isChecked()
        self.page.run_step.run_btn.setText("Quantize and measure" if measure else "Quantize")

    def check(self) -> None:
        """ValueError (one line) when the server's models cannot be quantized now."""
        if self.active() and self.problem:
            raise ValueError(self.problem)

    # ------------------------------------------------------------------ the server's models
    def refresh(self) -> None:
        self.admin.refresh()

    def _show_models(self) -> None:
        """The server's float models in step 1 (none, with the reason, when there is one)."""
        problem = self.problem
        models = [] if problem else [m for m in self.admin.models()
                                     if m.ok and not m.quantization]
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
        if problem:
            self.page.model_step.model_info.setText(problem)
        self.page._options_changed()

    # ------------------------------------------------------------------ run
    def start(self, plan, panel) -> BackgroundJob | None:
        """Quantize on the server into a fresh output folder (the model's job); the page holds
        it as its job, so its progress view, Cancel and busy state are the local run's."""
        p = self.page
        followed = FollowedJob("quantize", self.admin.cancel, parent=self)
        if p._start_job(None, "quantize", panel, job=followed) is None:
            return None
        job = self.admin.start_quantize(plan, self.evaluate.isChecked())
        if job is None:
            followed.end("failed", error="the server is no longer connected")
            panel.finish("The server is no longer connected.")
            return None
        self._followed = followed
        p.run_step.clear_verdict()
        panel.finish(f"Starting on the server, writing {job.what}…")
        followed.finished.connect(lambda result: self._on_result(plan, result))
        followed.failed.connect(lambda msg: panel.finish(f"⚠ Quantization failed: {msg}"))
        followed.cancelled.connect(lambda: panel.finish(
            "Cancelled. The server wrote nothing (no output folder)."))
        return followed

    def _show_job(self, job: AdminJob) -> None:
        """The model's job moved: the run's progress view, or the save line for a load."""
        if job.kind == "quantize":
            followed = self._followed
            if followed is None:
                return
            if job.running:
                followed.step(job.fraction, job.message)
            else:
                self._followed = None
                followed.end(job.state, job.result, job.error)
        elif job.kind == "load":
            self._show_load(job)

    def _on_result(self, plan, result: dict) -> None:
        p = self.page
        host = self.ctx.engines.label_for(job_url := self.admin.job.url)
        run = run_from_result(plan, result, server=job_url)
        p.show_run(run)
        p.store.add(run)  # "Earlier runs" lists it, marked with the server, measured or not
        rs = p.run_step
        rs.save_btn.setEnabled(False)  # Save as… re-exports a checkpoint on this machine
        rs.load_btn.setEnabled(True)
        rs.save_status.setText(f"On {host}: {result.get('path', '?')} (load it there, or "
                               "from the Models page aimed at the server).")
        rs.run_progress.finish(f"Done on {host}: {result_summary(result)}")
        if rs.auto_load.isChecked():
            self.load_output(result.get("path", ""))

    def load_output(self, path: str) -> AdminJob | None:
        """Load the quantized output in the server's engine (status in the save line)."""
        view = self.admin.view
        taken = {m.get("name") for m in (view.listing.loaded if view and view.listing else ())}
        base = path.rsplit("/", 1)[-1]
        name, i = base, 2
        while name in taken:
            name, i = f"{base}-{i}", i + 1
        return self.admin.start_load(path, name) if path else None

    def _show_load(self, job: AdminJob) -> None:
        status = self.page.run_step.save_status
        if job.running:
            status.setText(f"Loading {job.what} on the server: {job.message}")
            return
        name = (job.result.result or {}).get("name", job.what) if job.result else job.what
        status.setText({
            "done": f"Loaded as '{name}' on the server: pick '{name} @ "
                    f"{self.ctx.engines.label_for(job.url)}' in Chat.",
            "cancelled": "Loading cancelled.",
        }.get(job.state, f"⚠ Loading failed: {job.error}"))
