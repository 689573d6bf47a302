"""Quantize: a stepped wizard from a float model to a measured, saved, loaded INT8 variant.

Steps: model, method + layer preset, calibration data, optional per-layer sensitivity, then
run / compare / save / load. The steps are views (quantize_steps.py, quantize_results.py)
that quantize_layout.py puts in the page's frame; this page reads them into a QuantPlan
(console/quant_runs.py, which also words its messages) and runs the one quantization workflow
(engine.quant.workflow) as BackgroundJobs of the console's job runner: progress, time left,
Cancel. Load and Save as of the result are quantize_outputs.py. Measured runs are kept in a
JSON history so a combination is measured once.
"""

from __future__ import annotations

from ..jobs import BackgroundJob
from ..quant_runs import (
    CALIB_BUILTIN_TEXT,
    CALIB_REMOTE_TEXT,
    QuantPlan,
    QuantRun,
    QuantRunStore,
    calib_note,
    calib_summary,
    calib_summary_text,
    done_text,
    head_recommendation,
    known_text,
    run_plan,
    run_sensitivity,
)
from ..widgets.job_progress import JobProgress
from . import quantize_layout
from .base import Page
from .quantize_layout import STEPS
from .quantize_outputs import QuantOutputs, events


class QuantizePage(Page):
    page_id = "quantize"
    title = "Quantize"
    icon = "◧"

    def __init__(self, ctx, parent=None):
        super().__init__(ctx, parent)
        self.store = QuantRunStore()
        self.job: BackgroundJob | None = None
        self.job_kind = ""
        self.sensitivity = None  # engine.quant.analysis.SensitivityResult
        self._calib_job: BackgroundJob | None = None
        self._calib_gen = 0
        self._fresh_key: str | None = None  # the run measured in this session just now
        self._head_shares: dict[str, float | None] = {}  # model path -> head share
        # evaluation size: small enough for a laptop CPU, tests shrink it further
        self.eval_tokens, self.eval_prompts, self.new_tokens = 1024, 4, 24

        self.outputs = QuantOutputs(self)  # Load and Save as (quantize_outputs.py)
        quantize_layout.build(self)
        self.store.events.subscribe("runs", self.run_step.show_history)
        ctx.engine_host.models_changed.connect(self.set_models)
        self.set_models(ctx.engine_host.models())
        self.store.reload()
        self.go(0)

    @property
    def run(self) -> QuantRun | None:
        """The run the results step shows."""
        return self.run_step.run

    @run.setter
    def run(self, run: QuantRun | None) -> None:
        self.run_step.run = run

    # ------------------------------------------------------------------ navigation

    def go(self, index: int) -> None:
        index = max(0, min(len(STEPS) - 1, index))
        self.stack.setCurrentIndex(index)
        for i, lab in enumerate(self.step_labels):
            lab.setStyleSheet("font-weight: 600;" if i == index else "")
            lab.setProperty("muted", i != index)
            lab.style().unpolish(lab)
            lab.style().polish(lab)
        self.back_btn.setEnabled(index > 0)
        self.next_btn.setEnabled(index < len(STEPS) - 1)
        if index == 2:
            self.update_calib_info()
        self._options_changed()

    # ------------------------------------------------------------------ choices

    def set_models(self, models) -> None:
        if not self.remote.active():  # else the list is the server's
            self.model_step.set_models(models)

    def set_model_folder(self, path: str) -> None:
        self.model_step.set_folder(path)

    def method(self) -> str:
        return self.method_step.method()

    def preset(self) -> str:
        return self.method_step.preset()

    def set_method(self, method: str, preset: str = "all", skip: str = "",
                   smoothquant: float | None = None, int8_head: str | bool = "auto") -> None:
        self.method_step.set_method(method, preset, skip, smoothquant, int8_head)

    def set_calibration(self, path: str | None, samples: int, seq_len: int) -> None:
        self.calib_step.set_calibration(path, samples, seq_len)
        self.update_calib_info()

    def plan(self) -> QuantPlan:
        """The wizard's choices; ValueError (one line) when something is missing."""
        self.remote.check()
        data = self.model_step.choice()
        if data is None:
            raise ValueError("Pick a model first (step 1).")
        m, calib, sens = self.method_step, self.calib_step, self.sens_step
        preset, skip = m.preset(), ()
        if preset == "custom":
            skip = m.skip()
            if not skip:
                raise ValueError("Custom preset: enter at least one layer pattern to keep float.")
        method = m.method()
        return QuantPlan(model_dir=data[1], model_name=data[0], method=method, preset=preset,
                         skip=skip, smoothquant=m.smoothquant(), calib_file=calib.file(),
                         int8_head=m.head_mode(),
                         fit_budget=sens.fit_check.isChecked() and method != "w8a16",
                         samples=calib.samples.value(), seq_len=calib.seq_len.value(),
                         budget_pct=sens.budget.value(), eval_tokens=self.eval_tokens,
                         eval_prompts=self.eval_prompts, new_tokens=self.new_tokens)

    def _options_changed(self) -> None:
        data = self.model_step.choice()
        local = not self.remote.active()  # a server's paths are not this machine's
        self.method_step.set_head_share(self._head_share(data[1]) if data and local else None)
        try:
            plan = self.plan()
        except ValueError as exc:
            self.plan_label.setText(str(exc))
            self.run_step.show_plan(None, str(exc))
            self.run_step.known_label.setText("")
            self.run_step.run_btn.setEnabled(False)
            self.sens_step.sens_btn.setEnabled(False)
            return
        self.run_step.run_btn.setEnabled(not self.busy())
        self.sens_step.sens_btn.setEnabled(not self.busy() and local)
        self.plan_label.setText(f"{plan.model_name}: {plan.describe()}")
        self.run_step.show_plan(plan)
        # a stored result of this plan is offered, unless it is the one just measured
        known = self.store.find(plan.key()) if local else None
        offer = known is not None and known.key != self._fresh_key and not self.busy()
        self.run_step.known_label.setText(known_text(known) if offer else "")
        if offer and (self.run is None or self.run.key != known.key):
            self.show_run(known)

    def _head_share(self, model_dir: str) -> float | None:
        """The head's share of the chosen model's weights (headers only; remembered)."""
        if model_dir not in self._head_shares:
            self._head_shares[model_dir] = head_recommendation(model_dir)[1]
        return self._head_shares[model_dir]

    # ------------------------------------------------------------------ calibration

    def update_calib_info(self) -> None:
        """The calibration step's note and the file's summary (read by a job: reading the
        text imports torch, never on the GUI thread)."""
        step = self.calib_step
        try:
            self.plan()
            needs = True  # the auto recipe calibrates every method
        except ValueError:
            needs = self.method() == "w8a8-static" or self.method_step.sq_check.isChecked()
        step.calib_note.setText(calib_note(needs))
        try:
            path = step.file()
        except ValueError:
            step.calib_info.setText("Choose a file.")
            return
        if path is not None and self.remote.active():
            step.calib_info.setText(CALIB_REMOTE_TEXT)
            return
        if path is None:
            step.calib_info.setText(CALIB_BUILTIN_TEXT)
            return
        self._calib_gen += 1
        gen, samples, seq = self._calib_gen, step.samples.value(), step.seq_len.value()
        step.calib_info.setText("Reading the calibration text…")
        job = BackgroundJob(lambda _r: calib_summary(path), "calib-summary", parent=self)

        def done(summary) -> None:
            if gen == self._calib_gen:
                step.calib_info.setText(calib_summary_text(summary, samples, seq))

        def failed(message: str) -> None:
            if gen == self._calib_gen:
                step.calib_info.setText(f"⚠ {message}")

        job.finished.connect(done)
        job.failed.connect(failed)
        self._calib_job = job.start()

    # ------------------------------------------------------------------ jobs

    def busy(self) -> bool:
        return self.job is not None and self.job.running()

    def _start_job(self, fn, kind: str, panel: JobProgress,
                   job: BackgroundJob | None = None) -> BackgroundJob | None:
        """Run `fn` as the page's one job, or hold a model's `job` (FollowedJob) as it."""
        if self.busy():
            panel.finish("Another quantization job is running; cancel it or wait.")
            return None
        self.job = job or BackgroundJob(fn, kind, parent=self)
        self.job_kind = kind
        panel.bind(self.job)
        for b in (self.run_step.run_btn, self.sens_step.sens_btn):
            b.setEnabled(False)
        self.job.ended.connect(self._options_changed)
        self.job.start()
        return self.job

    def start_sensitivity(self) -> BackgroundJob | None:
        panel = self.sens_step.sens_progress
        try:
            plan = self.plan()
        except ValueError as exc:
            panel.finish(str(exc))
            return None
        job = self._start_job(lambda r: run_sensitivity(plan, events(r), r.cancel),
                              "sensitivity", panel)
        if job is None:
            return None
        job.finished.connect(self._on_sensitivity)
        job.failed.connect(lambda msg: panel.finish(f"⚠ Analysis failed: {msg}"))
        job.cancelled.connect(lambda: panel.finish("Analysis cancelled."))
        return job

    def _on_sensitivity(self, res) -> None:
        self.sensitivity = res
        self.sens_step.show_result(res)

    def use_recommendation(self) -> None:
        if self.sensitivity is not None and self.sensitivity.skip:
            self.method_step.add_skip(self.sensitivity.skip)

    def start_run(self) -> BackgroundJob | None:
        panel = self.run_step.run_progress
        try:
            plan = self.plan()
        except ValueError as exc:
            panel.finish(str(exc))
            return None
        if self.remote.active():
            return self.remote.start(plan, panel)
        job = self._start_job(lambda r: run_plan(plan, events(r), r.cancel), "quantize",
                              panel)
        if job is None:
            return None
        self.run_step.clear_verdict()
        job.finished.connect(self._on_run)
        job.failed.connect(lambda msg: panel.finish(f"⚠ Quantization failed: {msg}"))
        job.cancelled.connect(lambda: panel.finish("Cancelled. Nothing was written to disk."))
        return job

    def _on_run(self, run: QuantRun) -> None:
        self._fresh_key = run.key
        self.store.add(run)  # its "runs" redraws "Earlier runs"
        self.show_run(run)
        self.run_step.run_progress.finish(done_text(run))
        if self.auto_load.isChecked():
            self.load_variant(run)

    # ------------------------------------------------------------------ results

    def show_run(self, run: QuantRun) -> None:
        self.run_step.show_run(run, self.budget.value())

    # Load and Save as: quantize_outputs.py

    @property
    def loaded_variant(self) -> str | None:
        return self.outputs.loaded_variant

    def load_variant(self, run: QuantRun | None) -> str | None:
        return self.outputs.load(run)

    def save_as(self, fmt: str, dest: str) -> BackgroundJob | None:
        return self.outputs.save_as(fmt, dest)

    def activated(self) -> None:
        self.remote.show_focus()

    def shutdown(self) -> None:
        for job in (self.job, self._calib_job):
            if job is not None and job.running():
                job.cancel()
