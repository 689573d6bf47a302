"""Quantize: a stepped wizard from a float model to a measured, saved, loaded INT8 variant.

Steps: model, method + layer preset, calibration data, optional per-layer sensitivity, then
run / compare / save / load. The steps are views (quantize_steps.py, quantize_results.py);
this page reads them into a QuantPlan (console/quant_runs.py) and runs the one quantization
workflow (engine.quant.workflow) as BackgroundJobs of the console's job runner: progress,
time left, Cancel. Measured runs are kept in a JSON history so a combination is measured once.
"""

from __future__ import annotations

from pathlib import Path

from npu_console.console.jobs import BackgroundJob, Reporter
from npu_console.console.pages.base import Page
from npu_console.console.pages.quantize_remote import RemoteQuant
from npu_console.console.pages.quantize_results import RunStep
from npu_console.console.pages.quantize_steps import (
    CalibStep,
    MethodStep,
    ModelStep,
    SensitivityStep,
)
from npu_console.console.quant_runs import (
    QuantPlan,
    QuantRun,
    QuantRunStore,
    calib_summary,
    export_run,
    head_recommendation,
    run_plan,
    run_sensitivity,
)
from npu_console.console.widgets.bars import radio_style
from npu_console.console.widgets.basic import muted, page_title
from npu_console.console.widgets.job_progress import JobProgress
from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QStackedWidget,
    QVBoxLayout,
)

STEPS = ("Model", "Method", "Calibration", "Sensitivity", "Run & compare")


def _events(r: Reporter):
    """The workflow's StageEvents into the job's progress signal."""
    return lambda e: r(e.fraction, e.message)


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
        self.loaded_variant: str | None = None
        self._load_job_id: int | None = None
        self._calib_job: BackgroundJob | None = None
        self._calib_gen = 0
        self._fresh_key: str | None = None  # the run measured in this session just now
        self._head_shares: dict[str, float | None] = {}  # model path -> head share
        # evaluation size: small enough for a laptop CPU, tests shrink it further
        self.eval_tokens, self.eval_prompts, self.new_tokens = 1024, 4, 24

        root = QVBoxLayout(self)
        root.setContentsMargins(16, 12, 16, 12)
        root.setSpacing(10)
        head = QHBoxLayout()
        head.addWidget(page_title("Quantize"))
        head.addSpacing(16)
        self.step_labels: list[QLabel] = []
        for i, name in enumerate(STEPS):
            lab = QLabel(f"{i + 1}  {name}")
            lab.setCursor(Qt.PointingHandCursor)
            lab.mousePressEvent = lambda _e, i=i: self.go(i)
            self.step_labels.append(lab)
            head.addWidget(lab)
            if i < len(STEPS) - 1:
                head.addWidget(muted("›"))
        head.addStretch(1)
        root.addLayout(head)

        self.model_step = ModelStep()
        self.method_step = MethodStep()
        self.calib_step = CalibStep()
        self.sens_step = SensitivityStep()
        self.run_step = RunStep()
        self.stack = QStackedWidget()
        for step in (self.model_step, self.method_step, self.calib_step, self.sens_step,
                     self.run_step):
            self.stack.addWidget(step)
        root.addWidget(self.stack, 1)
        # the controls scripts and the README screenshots set directly
        self.budget = self.sens_step.budget
        self.auto_load = self.run_step.auto_load
        # a connected server with admin as where the run goes (quantize_remote.py)
        self.remote = RemoteQuant(self)
        head.addWidget(self.remote.picker)

        nav = QHBoxLayout()
        self.plan_label = muted("")
        self.plan_label.setWordWrap(True)
        nav.addWidget(self.plan_label, 1)
        self.back_btn = QPushButton("‹ Back")
        self.next_btn = QPushButton("Next ›")
        self.next_btn.setProperty("primary", True)
        self.back_btn.clicked.connect(lambda: self.go(self.stack.currentIndex() - 1))
        self.next_btn.clicked.connect(lambda: self.go(self.stack.currentIndex() + 1))
        nav.addWidget(self.back_btn)
        nav.addWidget(self.next_btn)
        root.addLayout(nav)
        self.setStyleSheet(radio_style())

        for step in (self.model_step, self.method_step, self.calib_step, self.sens_step):
            step.changed.connect(self._options_changed)
        self.calib_step.file_edited.connect(self.update_calib_info)
        self.sens_step.sens_btn.clicked.connect(self.start_sensitivity)
        self.sens_step.use_rec_btn.clicked.connect(self.use_recommendation)
        self.run_step.run_btn.clicked.connect(self.start_run)
        self.run_step.save_btn.clicked.connect(self.choose_save_dir)
        self.run_step.load_btn.clicked.connect(lambda: self.load_variant(self.run))
        self.run_step.history_picked.connect(self.show_run)
        ctx.engine_host.models_changed.connect(self.set_models)
        ctx.engine_host.load_finished.connect(self._on_variant_loaded)
        self.set_models(ctx.engine_host.models())
        self.refresh_history()
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
        known = self.store.find(plan.key()) if local else None
        known_label = self.run_step.known_label
        if known is not None and known.key == self._fresh_key:
            known_label.setText("")
        elif known is not None and not self.busy():
            known_label.setText(f"Already measured on {known.created[:16].replace('T', ' ')}"
                                " UTC: the result is shown below. Run again to re-measure.")
            if self.run is None or self.run.key != known.key:
                self.show_run(known)
        else:
            known_label.setText("")

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
        step.calib_note.setText(
            "Activation ranges, per-layer SmoothQuant and error-compensating rounding are "
            "chosen on this text." if needs else "Error-compensating rounding uses this text.")
        try:
            path = step.file()
        except ValueError:
            step.calib_info.setText("Choose a file.")
            return
        if path is not None and self.remote.active():
            step.calib_info.setText("Read on the server when the run starts (a path under its "
                                    "roots).")
            return
        if path is None:
            step.calib_info.setText("16 samples of 128 tokens (256 for w8a8-static), sampled "
                                    "from the model after BOS "
                                    "and a few neutral chat prompts: text in the model's own "
                                    "language and format, never the evaluation text.")
            return
        self._calib_gen += 1
        gen, samples, seq = self._calib_gen, step.samples.value(), step.seq_len.value()
        step.calib_info.setText("Reading the calibration text…")
        job = BackgroundJob(lambda _r: calib_summary(path), "calib-summary", parent=self)

        def done(summary) -> None:
            if gen == self._calib_gen:
                docs, words = summary
                step.calib_info.setText(f"{docs} documents, about {words:,} words. Up to "
                                        f"{samples} samples of {seq} tokens are cut from it "
                                        "evenly.")

        def failed(message: str) -> None:
            if gen == self._calib_gen:
                step.calib_info.setText(f"⚠ {message}")

        job.finished.connect(done)
        job.failed.connect(failed)
        self._calib_job = job.start()

    # ------------------------------------------------------------------ jobs

    def busy(self) -> bool:
        return self.job is not None and self.job.running()

    def _start_job(self, fn, kind: str, panel: JobProgress) -> BackgroundJob | None:
        if self.busy():
            panel.finish("Another quantization job is running; cancel it or wait.")
            return None
        self.job = BackgroundJob(fn, kind, parent=self)
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
        job = self._start_job(lambda r: run_sensitivity(plan, _events(r), r.cancel),
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
        job = self._start_job(lambda r: run_plan(plan, _events(r), r.cancel), "quantize",
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
        self.store.add(run)
        self.refresh_history()
        self.show_run(run)
        self.run_step.run_progress.finish(
            f"Done in {run.seconds:.0f} s: {run.quantized_layers} layers int8, "
            f"{run.skipped_layers} float. Saved to {run.out_dir}")
        if self.auto_load.isChecked():
            self.load_variant(run)

    # ------------------------------------------------------------------ results

    def show_run(self, run: QuantRun) -> None:
        self.run_step.show_run(run, self.budget.value())

    def refresh_history(self) -> None:
        self.run_step.show_history(self.store.load())

    def variant_name(self, run: QuantRun) -> str:
        base = f"{run.plan['model_name']}-{run.plan['method']}"
        names = {m.name for m in self.ctx.engine_host.models()}
        name, i = base, 2
        while name in names:
            name, i = f"{base}-{i}", i + 1
        return name

    def load_variant(self, run: QuantRun | None) -> str | None:
        if run is None:
            return None
        if run.key.startswith("remote:"):  # an output on the server: loaded there
            self.remote.load_output(run.out_dir)
            return None
        status = self.run_step.save_status
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

    def _on_variant_loaded(self, job_id: int, info, error: str) -> None:
        if job_id != self._load_job_id:
            return
        self._load_job_id = None
        status = self.run_step.save_status
        if error:
            status.setText(f"⚠ Loading failed: {error}")
        else:
            self.loaded_variant = info.name if info is not None else None
            status.setText(f"Loaded as '{self.loaded_variant}' next to the float model: "
                           "compare them in Chat (A/B).")

    def choose_save_dir(self) -> None:
        path = QFileDialog.getExistingDirectory(self, "Save the quantized model into (a new "
                                                "folder is created inside)")
        if path and self.run is not None:
            fmt = self.run_step.fmt_box.currentData()
            self.save_as(fmt, str(Path(path) / f"{Path(self.run.out_dir).name}-{fmt}"))

    def save_as(self, fmt: str, dest: str) -> BackgroundJob | None:
        run, status = self.run, self.run_step.save_status
        if run is None:
            return None
        if fmt == "compressed-tensors" and run.plan["method"] == "w8a16":
            status.setText("⚠ compressed-tensors is for W8A8 only (vLLM has no W8A16 mapping): "
                           "choose native or msModelSlim.")
            return None
        if fmt != "native" and (run.int8_head or run.plan.get("int8_head") is True):
            status.setText("⚠ This run has an int8 lm_head and embeddings, which vLLM and "
                           "vllm-ascend read in float: save it as native, or run again with "
                           "lm_head and embeddings in int8 set to off.")
            return None
        job = self._start_job(lambda r: export_run(run, fmt, dest, _events(r)), "export",
                              self.run_step.run_progress)
        if job is None:
            return None
        job.finished.connect(lambda p: status.setText(f"Saved {fmt} to {p}"))
        job.failed.connect(lambda msg: status.setText(f"⚠ Saving failed: {msg}"))
        return job

    def activated(self) -> None:
        self.remote.show_focus()

    def shutdown(self) -> None:
        for job in (self.job, self._calib_job):
            if job is not None and job.running():
                job.cancel()
