"""The Quantize wizard's result as a model to use: Load into the engine (as a variant next to
the float model, under a free name) and Save as another format (a job of the page's, so it
queues with the wizard's other jobs). The run on show and its status line are the run step's
(quantize_results.py); an output on a connected server is loaded there (quantize_remote.py)."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QObject
from PySide6.QtWidgets import QFileDialog

from ..jobs import BackgroundJob, Reporter
from ..quant_runs import QuantRun, export_problem, export_run, variant_name


def events(r: Reporter):
    """The workflow's StageEvents into the job's progress signal."""
    return lambda e: r(e.fraction, e.message)


class QuantOutputs(QObject):
    def __init__(self, page):
        super().__init__(page)
        self.page = page
        self.ctx = page.ctx
        self.loaded_variant: str | None = None
        self._load_job_id: int | None = None
        self.ctx.engine_host.load_finished.connect(self._on_loaded)

    def variant_name(self, run: QuantRun) -> str:
        return variant_name(run, {m.name for m in self.ctx.engine_host.models()})

    def load(self, run: QuantRun | None) -> str | None:
        """Load the run's checkpoint into the engine; the variant's name (None: not here)."""
        if run is None:
            return None
        if run.key.startswith("remote:"):  # an output on the server: loaded there
            self.page.remote.load_output(run.out_dir)
            return None
        status = self.page.run_step.save_status
        for m in self.ctx.engine_host.models():
            if Path(m.path) == Path(run.out_dir):
                status.setText(f"Already loaded as '{m.name}': pick it in Chat.")
                self.loaded_variant = m.name
                return m.name
        name = self.variant_name(run)
        job = self.ctx.engine_host.load(run.out_dir, name=name)
        self._load_job_id = job.job_id
        status.setText(f"Loading '{name}' into the engine…")
        return name

    def _on_loaded(self, job_id: int, info, error: str) -> None:
        if job_id != self._load_job_id:
            return
        self._load_job_id = None
        status = self.page.run_step.save_status
        if error:
            status.setText(f"⚠ Loading failed: {error}")
        else:
            self.loaded_variant = info.name if info is not None else None
            status.setText(f"Loaded as '{self.loaded_variant}' next to the float model: "
                           "compare them in Chat (A/B).")

    def choose_save_dir(self) -> None:
        path = QFileDialog.getExistingDirectory(self.page, "Save the quantized model into (a "
                                                "new folder is created inside)")
        run = self.page.run
        if path and run is not None:
            fmt = self.page.run_step.fmt_box.currentData()
            self.save_as(fmt, str(Path(path) / f"{Path(run.out_dir).name}-{fmt}"))

    def save_as(self, fmt: str, dest: str) -> BackgroundJob | None:
        run, status = self.page.run, self.page.run_step.save_status
        if run is None:
            return None
        if problem := export_problem(run, fmt):
            status.setText(problem)
            return None
        job = self.page._start_job(lambda r: export_run(run, fmt, dest, events(r)), "export",
                                   self.page.run_step.run_progress)
        if job is None:
            return None
        job.finished.connect(lambda p: status.setText(f"Saved {fmt} to {p}"))
        job.failed.connect(lambda msg: status.setText(f"⚠ Saving failed: {msg}"))
        return job
