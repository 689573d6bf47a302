"""Quantize: a stepped wizard from a float model to a measured, saved, loaded INT8 variant.

Steps: model, method + layer preset, calibration data, optional per-layer sensitivity, then
run / compare / save / load. Every heavy stage runs as a BackgroundJob (progress, time left,
Cancel); measured runs are kept in a JSON history so a combination is measured once.
"""

from __future__ import annotations

import threading
from pathlib import Path

from npu_console.console.pages.base import Page
from npu_console.console.pages.jobs import BackgroundJob
from npu_console.console.pages.quant_work import (
    METHOD_LABELS,
    PRESET_LABELS,
    QuantPlan,
    QuantRun,
    QuantRunStore,
    SensitivityResult,
    calib_summary,
    export_run,
    recipe_rows,
    run_plan,
    run_sensitivity,
    verdict,
)
from npu_console.console.widgets.bars import BarChart, radio_style
from npu_console.console.widgets.basic import Badge, card, fmt_bytes, muted, page_title
from npu_console.console.widgets.job_progress import JobProgress
from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QAbstractItemView,
    QButtonGroup,
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QFileDialog,
    QFormLayout,
    QGridLayout,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QPushButton,
    QRadioButton,
    QSpinBox,
    QStackedWidget,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

STEPS = ("Model", "Method", "Calibration", "Sensitivity", "Run & compare")
FORMAT_LABELS = {"native": "Native (this console)", "compressed-tensors": "compressed-tensors (vLLM)",
                 "msmodelslim": "msModelSlim (vllm-ascend)"}


def _cancel_types():
    from npu_console.engine.models.loader import LoadCancelled
    from npu_console.engine.quant.calib import Cancelled

    return (Cancelled, LoadCancelled)


def _title(text: str) -> QLabel:
    t = QLabel(text)
    t.setObjectName("CardTitle")
    return t


class QuantizePage(Page):
    page_id = "quantize"
    title = "Quantize"
    icon = "◧"

    _calib_ready = Signal(int, str)  # request number, summary line (from a worker thread)

    def __init__(self, ctx, parent=None):
        super().__init__(ctx, parent)
        self.store = QuantRunStore()
        self.job: BackgroundJob | None = None
        self.job_kind = ""
        self.run: QuantRun | None = None
        self.sensitivity: SensitivityResult | None = None
        self.folder: str | None = None
        self.loaded_variant: str | None = None
        self._load_job_id: int | None = None
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

        self.stack = QStackedWidget()
        self.stack.addWidget(self._build_model_step())
        self.stack.addWidget(self._build_method_step())
        self.stack.addWidget(self._build_calib_step())
        self.stack.addWidget(self._build_sensitivity_step())
        self.stack.addWidget(self._build_run_step())
        root.addWidget(self.stack, 1)

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
        self._fresh_key: str | None = None  # the run measured in this session just now
        self._calib_gen = 0
        self._calib_ready.connect(self._on_calib_ready)
        ctx.engine_host.models_changed.connect(self.set_models)
        ctx.engine_host.load_finished.connect(self._on_variant_loaded)
        self.set_models(ctx.engine_host.models())
        self.refresh_history()
        self.go(0)

    # ------------------------------------------------------------------ steps

    def _build_model_step(self) -> QWidget:
        w = card()
        lay = QVBoxLayout(w)
        lay.setContentsMargins(16, 12, 16, 12)
        lay.addWidget(_title("1 · Which float model?"))
        lay.addWidget(muted("Quantize a model that is loaded in the engine, or any Hugging Face "
                            "model folder on disk. The float model stays loaded; the INT8 result "
                            "is added next to it as a second variant."))
        form = QFormLayout()
        self.model_box = QComboBox()
        self.model_box.setMinimumWidth(360)
        self.model_box.currentIndexChanged.connect(self._model_changed)
        row = QHBoxLayout()
        row.addWidget(self.model_box, 1)
        self.folder_btn = QPushButton("Folder…")
        self.folder_btn.clicked.connect(self.choose_folder)
        row.addWidget(self.folder_btn)
        form.addRow("Model", row)
        self.model_info = muted("No model loaded yet: load one on the Models page or pick a "
                                "folder.")
        self.model_info.setWordWrap(True)
        form.addRow("", self.model_info)
        lay.addLayout(form)
        lay.addStretch(1)
        return w

    def _build_method_step(self) -> QWidget:
        w = QWidget()
        lay = QHBoxLayout(w)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.setSpacing(10)
        mcard = card()
        m = QVBoxLayout(mcard)
        m.setContentsMargins(16, 12, 16, 12)
        m.addWidget(_title("2 · Method"))
        self.method_group = QButtonGroup(self)
        self.method_buttons: dict[str, QRadioButton] = {}
        notes = {"w8a16": "int8 weights, 16-bit activations: the safest; memory-bound "
                          "decode gets faster",
                 "w8a8-dynamic": "int8 weights and per-token int8 activations, no calibration",
                 "w8a8-static": "per-tensor int8 activation scales from calibration data"}
        for key, label in METHOD_LABELS.items():
            b = QRadioButton(label)
            self.method_group.addButton(b)
            self.method_buttons[key] = b
            m.addWidget(b)
            note = muted(notes[key])
            note.setWordWrap(True)
            note.setContentsMargins(22, 0, 0, 4)
            m.addWidget(note)
        self.method_buttons["w8a8-dynamic"].setChecked(True)
        sq = QHBoxLayout()
        self.sq_check = QCheckBox("SmoothQuant, α")
        self.sq_alpha = QDoubleSpinBox()
        self.sq_alpha.setRange(0.0, 1.0)
        self.sq_alpha.setSingleStep(0.05)
        self.sq_alpha.setValue(0.5)
        sq.addWidget(self.sq_check)
        sq.addWidget(self.sq_alpha)
        sq.addStretch(1)
        m.addLayout(sq)
        m.addStretch(1)
        lay.addWidget(mcard, 1)

        pcard = card()
        p = QVBoxLayout(pcard)
        p.setContentsMargins(16, 12, 16, 12)
        p.addWidget(_title("Layers"))
        self.preset_group = QButtonGroup(self)
        self.preset_buttons: dict[str, QRadioButton] = {}
        for key, label in PRESET_LABELS.items():
            b = QRadioButton(label)
            self.preset_group.addButton(b)
            self.preset_buttons[key] = b
            p.addWidget(b)
        self.preset_buttons["all"].setChecked(True)
        self.skip_edit = QLineEdit()
        self.skip_edit.setPlaceholderText("*.down_proj, model.layers.0.*, re:layers\\.1\\.")
        p.addWidget(self.skip_edit)
        self.head_check = QCheckBox("Also lm_head and embeddings (int8 weight-only)")
        self.head_check.setToolTip(
            "Stores the vocabulary matrix in int8 too. On Qwen2.5-0.5B (a 136M-entry "
            "vocabulary matrix in a 494M model) that is 0.50x bf16's memory instead of 0.64x, "
            "and CPU decode ~1.5x faster (docs/benchmarks.md). Kept in the console's own "
            "format: vLLM and vllm-ascend read lm_head and embeddings in float.")
        p.addWidget(self.head_check)
        head_note = muted("Off: lm_head and embeddings stay float, as vLLM and vllm-ascend "
                          "expect. On: for small models with large vocabularies a fifth to "
                          "a half less memory and faster decode; saved in the console's own "
                          "format.")
        head_note.setWordWrap(True)
        head_note.setContentsMargins(22, 0, 0, 0)
        p.addWidget(head_note)
        p.addStretch(1)
        lay.addWidget(pcard, 1)
        for b in list(self.method_buttons.values()) + list(self.preset_buttons.values()):
            b.toggled.connect(self._options_changed)
        self.sq_check.toggled.connect(self._options_changed)
        self.sq_alpha.valueChanged.connect(self._options_changed)
        self.skip_edit.textChanged.connect(self._options_changed)
        self.head_check.toggled.connect(self._options_changed)
        return w

    def _build_calib_step(self) -> QWidget:
        w = card()
        lay = QVBoxLayout(w)
        lay.setContentsMargins(16, 12, 16, 12)
        lay.addWidget(_title("3 · Calibration data"))
        self.calib_note = muted("")
        self.calib_note.setWordWrap(True)
        lay.addWidget(self.calib_note)
        self.calib_builtin = QRadioButton("Text the model writes itself (sampled once, then cached)")
        self.calib_file_radio = QRadioButton("A file (.txt paragraphs or .jsonl {\"text\": …})")
        self.calib_builtin.setChecked(True)
        lay.addWidget(self.calib_builtin)
        frow = QHBoxLayout()
        frow.addWidget(self.calib_file_radio)
        self.calib_path = QLineEdit()
        self.calib_path.setPlaceholderText("path to a calibration file")
        self.calib_browse = QPushButton("Browse…")
        self.calib_browse.clicked.connect(self.choose_calib_file)
        frow.addWidget(self.calib_path, 1)
        frow.addWidget(self.calib_browse)
        lay.addLayout(frow)
        form = QFormLayout()
        self.samples = QSpinBox()
        self.samples.setRange(1, 4096)
        self.samples.setValue(64)
        self.seq_len = QSpinBox()
        self.seq_len.setRange(8, 8192)
        self.seq_len.setValue(256)
        form.addRow("Samples", self.samples)
        form.addRow("Tokens per sample", self.seq_len)
        lay.addLayout(form)
        self.calib_info = QLabel("")
        self.calib_info.setWordWrap(True)
        lay.addWidget(self.calib_info)
        lay.addStretch(1)
        for sig in (self.calib_builtin.toggled, self.calib_path.editingFinished,
                    self.samples.valueChanged, self.seq_len.valueChanged):
            sig.connect(self.update_calib_info)
        self.calib_path.textChanged.connect(
            lambda t: t and self.calib_file_radio.setChecked(True))
        return w

    def _build_sensitivity_step(self) -> QWidget:
        w = QWidget()
        lay = QHBoxLayout(w)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.setSpacing(10)
        left = card()
        lv = QVBoxLayout(left)
        lv.setContentsMargins(16, 12, 16, 12)
        lv.addWidget(_title("4 · Sensitivity (optional)"))
        text = muted("Quantizes one layer at a time and measures how far the output "
                     "distribution moves (KL). Then skips the most sensitive layers until the "
                     "perplexity stays within the quality budget.")
        text.setWordWrap(True)
        lv.addWidget(text)
        form = QFormLayout()
        self.budget = QDoubleSpinBox()
        self.budget.setRange(0.0, 100.0)
        self.budget.setDecimals(1)
        self.budget.setSuffix(" % perplexity")
        self.budget.setValue(2.0)
        self.budget.valueChanged.connect(self._options_changed)
        form.addRow("Quality budget", self.budget)
        self.fit_check = QCheckBox("Keep sensitive layers float to meet the budget")
        self.fit_check.setToolTip(
            "While quantizing, measure perplexity and put the layers with the largest output "
            "error back to float until the loss is within the budget (at least 85% of linear "
            "weights stay int8), as `npu-console quantize --budget`")
        self.fit_check.toggled.connect(self._options_changed)
        form.addRow("", self.fit_check)
        lv.addLayout(form)
        self.sens_btn = QPushButton("Analyse sensitivity")
        self.sens_btn.clicked.connect(self.start_sensitivity)
        lv.addWidget(self.sens_btn)
        self.sens_progress = JobProgress("Skip this step if you already know what to keep float.")
        lv.addWidget(self.sens_progress)
        self.rec_label = QLabel("")
        self.rec_label.setWordWrap(True)
        self.rec_label.setTextInteractionFlags(Qt.TextSelectableByMouse)
        lv.addWidget(self.rec_label)
        self.use_rec_btn = QPushButton("Use this skip list")
        self.use_rec_btn.setEnabled(False)
        self.use_rec_btn.clicked.connect(self.use_recommendation)
        lv.addWidget(self.use_rec_btn)
        lv.addStretch(1)
        lay.addWidget(left, 2)
        right = card()
        rv = QVBoxLayout(right)
        rv.setContentsMargins(8, 8, 8, 8)
        self.sens_chart = BarChart("Per-layer sensitivity, most sensitive first", "KL")
        rv.addWidget(self.sens_chart)
        self.sens_empty = muted("The chart appears after an analysis.")
        self.sens_empty.setAlignment(Qt.AlignCenter)
        rv.addWidget(self.sens_empty)
        lay.addWidget(right, 3)
        return w

    def _build_run_step(self) -> QWidget:
        w = QWidget()
        lay = QGridLayout(w)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.setSpacing(10)
        runc = card()
        rv = QVBoxLayout(runc)
        rv.setContentsMargins(16, 12, 16, 12)
        rv.addWidget(_title("5 · Run and compare"))
        self.plan_summary = QLabel("")
        self.plan_summary.setWordWrap(True)
        rv.addWidget(self.plan_summary)
        self.known_label = QLabel("")
        self.known_label.setWordWrap(True)
        self.known_label.setProperty("muted", True)
        rv.addWidget(self.known_label)
        brow = QHBoxLayout()
        self.run_btn = QPushButton("Quantize and measure")
        self.run_btn.setProperty("primary", True)
        self.run_btn.clicked.connect(self.start_run)
        self.auto_load = QCheckBox("Load the result into the engine")
        self.auto_load.setChecked(True)
        brow.addWidget(self.run_btn)
        brow.addWidget(self.auto_load)
        brow.addStretch(1)
        rv.addLayout(brow)
        self.run_progress = JobProgress("Nothing running.")
        rv.addWidget(self.run_progress)
        vrow = QHBoxLayout()
        self.verdict_badge = Badge("", "none")
        self.verdict = QLabel("")
        self.verdict.setWordWrap(True)
        vrow.addWidget(self.verdict_badge)
        vrow.addWidget(self.verdict, 1)
        rv.addLayout(vrow)
        self.table = QTableWidget(10, 3)
        self.table.setHorizontalHeaderLabels(["Float", "INT8", "Change"])
        self.table.setVerticalHeaderLabels(["Size on disk", "Memory (weights)", "TTFT",
                                            "Decode tok/s (batch 1)", "Perplexity",
                                            "Greedy agreement", "Top-1 agreement",
                                            "Linear weights in int8", "Layers kept float",
                                            "Calibration"])
        self.table.verticalHeaderItem(5).setToolTip(
            "Share of greedy tokens identical to the float model's, position by position, when "
            "each model continues on its own: one early flip of a near-tie changes the rest")
        self.table.verticalHeaderItem(6).setToolTip(
            "Share of positions where the INT8 model's most likely next token is the float "
            "model's, both reading the float model's continuation (teacher-forced)")
        self.table.horizontalHeader().setSectionResizeMode(QHeaderView.Stretch)
        self.table.setEditTriggers(QAbstractItemView.NoEditTriggers)
        self.table.setSelectionMode(QAbstractItemView.NoSelection)
        self.table.verticalHeader().setDefaultSectionSize(28)
        self.table.setFixedHeight(32 + 10 * 28 + 6)
        rv.addWidget(self.table)
        srow = QHBoxLayout()
        self.fmt_box = QComboBox()
        for key, label in FORMAT_LABELS.items():
            self.fmt_box.addItem(label, key)
        self.save_btn = QPushButton("Save as…")
        self.save_btn.clicked.connect(self.choose_save_dir)
        self.load_btn = QPushButton("Load into engine")
        self.load_btn.clicked.connect(lambda: self.load_variant(self.run))
        for b in (self.save_btn, self.load_btn):
            b.setEnabled(False)
        srow.addWidget(muted("Save"))
        srow.addWidget(self.fmt_box)
        srow.addWidget(self.save_btn)
        srow.addStretch(1)
        srow.addWidget(self.load_btn)
        rv.addLayout(srow)
        self.save_status = muted("")
        self.save_status.setWordWrap(True)
        self.save_status.setTextInteractionFlags(Qt.TextSelectableByMouse)
        rv.addWidget(self.save_status)
        rv.addStretch(1)
        lay.addWidget(runc, 0, 0)

        hist = card()
        hv = QVBoxLayout(hist)
        hv.setContentsMargins(16, 12, 16, 12)
        hv.addWidget(_title("Earlier runs"))
        self.history = QTableWidget(0, 4)
        self.history.setHorizontalHeaderLabels(["When", "Model · recipe", "Δ ppl", "Size"])
        hh = self.history.horizontalHeader()
        hh.setSectionResizeMode(QHeaderView.ResizeToContents)
        hh.setSectionResizeMode(1, QHeaderView.Stretch)
        self.history.verticalHeader().setVisible(False)
        self.history.setEditTriggers(QAbstractItemView.NoEditTriggers)
        self.history.setSelectionBehavior(QAbstractItemView.SelectRows)
        self.history.setSelectionMode(QAbstractItemView.SingleSelection)
        self.history.setWordWrap(True)
        self.history.cellClicked.connect(lambda r, _c: self.show_history_row(r))
        hv.addWidget(self.history, 1)
        self.history_empty = muted("No runs yet: results are kept here, so a combination is "
                                   "measured once.")
        self.history_empty.setWordWrap(True)
        hv.addWidget(self.history_empty)
        lay.addWidget(hist, 0, 1)
        lay.setColumnStretch(0, 3)
        lay.setColumnStretch(1, 2)
        return w

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

    # ------------------------------------------------------------------ model

    def set_models(self, models) -> None:
        current = self.model_box.currentData()
        self.model_box.blockSignals(True)
        self.model_box.clear()
        for m in models:
            if not m.quantization:
                self.model_box.addItem(f"{m.name}  ({m.architecture}, {m.dtype})", (m.name, m.path))
        if self.folder:
            self.model_box.addItem(f"Folder: {self.folder}", (Path(self.folder).name, self.folder))
        idx = self.model_box.findData(current) if current is not None else -1
        self.model_box.setCurrentIndex(max(idx, 0))
        self.model_box.blockSignals(False)
        self._model_changed()

    def set_model_folder(self, path: str) -> None:
        self.folder = str(path)
        self.set_models(self.ctx.engine_host.models())
        self.model_box.setCurrentIndex(self.model_box.count() - 1)

    def choose_folder(self) -> None:
        path = QFileDialog.getExistingDirectory(self, "Float model folder")
        if path:
            self.set_model_folder(path)

    def _model_changed(self) -> None:
        data = self.model_box.currentData()
        if data is None:
            self.model_info.setText("No model loaded yet: load one on the Models page or pick "
                                    "a folder.")
        else:
            self.model_info.setText(data[1])
        self._options_changed()

    # ------------------------------------------------------------------ options

    def method(self) -> str:
        return next(k for k, b in self.method_buttons.items() if b.isChecked())

    def preset(self) -> str:
        return next(k for k, b in self.preset_buttons.items() if b.isChecked())

    def set_method(self, method: str, preset: str = "all", skip: str = "",
                   smoothquant: float | None = None, int8_head: bool = False) -> None:
        self.method_buttons[method].setChecked(True)
        self.preset_buttons[preset].setChecked(True)
        self.skip_edit.setText(skip)
        self.head_check.setChecked(int8_head)
        self.sq_check.setChecked(smoothquant is not None)
        if smoothquant is not None:
            self.sq_alpha.setValue(smoothquant)

    def set_calibration(self, path: str | None, samples: int, seq_len: int) -> None:
        if path:
            self.calib_path.setText(path)
            self.calib_file_radio.setChecked(True)
        else:
            self.calib_builtin.setChecked(True)
        self.samples.setValue(samples)
        self.seq_len.setValue(seq_len)
        self.update_calib_info()

    def _options_changed(self) -> None:
        method = self.method()
        w8a8 = method.startswith("w8a8")
        self.sq_check.setEnabled(w8a8)
        if not w8a8 and self.sq_check.isChecked():
            self.sq_check.setChecked(False)
        self.sq_alpha.setEnabled(w8a8 and self.sq_check.isChecked())
        self.skip_edit.setEnabled(self.preset() == "custom")
        try:
            plan = self.plan()
        except ValueError as exc:
            self.plan_label.setText(str(exc))
            self.plan_summary.setText(str(exc))
            self.known_label.setText("")
            self.run_btn.setEnabled(False)
            self.sens_btn.setEnabled(False)
            return
        self.run_btn.setEnabled(not self.busy())
        self.sens_btn.setEnabled(not self.busy())
        self.plan_label.setText(f"{plan.model_name}: {plan.describe()}")
        self.plan_summary.setText(
            f"<b>{plan.model_name}</b> · {plan.describe()}<br>"
            + (f"calibration: {plan.samples} × {plan.seq_len} tokens from "
               f"{Path(plan.calib_file).name}" if plan.calib_file
               else "calibration: text the model writes itself")
            + f" · quality budget {plan.budget_pct:g}% perplexity")
        known = self.store.find(plan.key())
        if known is not None and known.key == self._fresh_key:
            self.known_label.setText("")
        elif known is not None and (self.job is None or not self.job.running()):
            self.known_label.setText(f"Already measured on {known.created[:16].replace('T', ' ')}"
                                     " UTC: the result is shown below. Run again to re-measure.")
            if self.run is None or self.run.key != known.key:
                self.show_run(known)
        else:
            self.known_label.setText("")

    def plan(self) -> QuantPlan:
        """The wizard's choices; ValueError (one line) when something is missing."""
        data = self.model_box.currentData()
        if data is None:
            raise ValueError("Pick a model first (step 1).")
        preset = self.preset()
        skip: tuple[str, ...] = ()
        if preset == "custom":
            skip = tuple(s.strip() for s in self.skip_edit.text().split(",") if s.strip())
            if not skip:
                raise ValueError("Custom preset: enter at least one layer pattern to keep float.")
        method = self.method()
        sq = self.sq_alpha.value() if self.sq_check.isChecked() and method != "w8a16" else None
        calib = self.calib_path.text().strip() if self.calib_file_radio.isChecked() else None
        if self.calib_file_radio.isChecked() and not calib:
            raise ValueError("Calibration: choose a file or use the built-in text.")
        return QuantPlan(model_dir=data[1], model_name=data[0], method=method, preset=preset,
                         skip=skip, smoothquant=sq, calib_file=calib or None,
                         int8_head=self.head_check.isChecked(),
                         fit_budget=self.fit_check.isChecked() and method != "w8a16",
                         samples=self.samples.value(), seq_len=self.seq_len.value(),
                         budget_pct=self.budget.value(), eval_tokens=self.eval_tokens,
                         eval_prompts=self.eval_prompts, new_tokens=self.new_tokens)

    # ------------------------------------------------------------------ calibration

    def choose_calib_file(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Calibration text", "",
                                              "Text (*.txt *.jsonl);;All files (*)")
        if path:
            self.calib_path.setText(path)
            self.calib_file_radio.setChecked(True)
            self.update_calib_info()

    def update_calib_info(self) -> None:
        try:
            plan = self.plan()
            needs = plan.needs_calibration
        except ValueError:
            needs = self.method() == "w8a8-static" or self.sq_check.isChecked()
        self.calib_note.setText(
            "Activation ranges, per-layer SmoothQuant and error-compensating rounding are "
            "chosen on this text." if needs else "Error-compensating rounding uses this text.")
        path = self.calib_path.text().strip() if self.calib_file_radio.isChecked() else None
        if self.calib_file_radio.isChecked() and not path:
            self.calib_info.setText("Choose a file.")
            return
        if not self.calib_file_radio.isChecked():
            self.calib_info.setText("16 samples of 128 tokens, sampled from the model after BOS "
                                    "and a few neutral chat prompts: text in the model's own "
                                    "language and format, never the evaluation text.")
            return
        # reading the text imports torch (engine.quant.calib): never on the GUI thread
        self._calib_gen += 1
        gen, samples, seq = self._calib_gen, self.samples.value(), self.seq_len.value()
        self.calib_info.setText("Reading the calibration text…")

        def work():
            try:
                docs, words = calib_summary(path)
            except Exception as exc:  # noqa: BLE001 - QuantError and friends: one line
                text = f"⚠ {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
            else:
                text = (f"{docs} documents, about {words:,} words. Up to {samples} samples of "
                        f"{seq} tokens are cut from it evenly.")
            self._calib_ready.emit(gen, text)

        threading.Thread(target=work, name="calib-summary", daemon=True).start()

    def _on_calib_ready(self, gen: int, text: str) -> None:
        if gen == self._calib_gen:
            self.calib_info.setText(text)

    # ------------------------------------------------------------------ jobs

    def busy(self) -> bool:
        return self.job is not None and self.job.running()

    def _start_job(self, fn, kind: str, panel: JobProgress) -> BackgroundJob | None:
        if self.busy():
            panel.finish("Another quantization job is running; cancel it or wait.")
            return None
        self.job = BackgroundJob(fn, kind, _cancel_types(), self)
        self.job_kind = kind
        panel.bind(self.job)
        for b in (self.run_btn, self.sens_btn):
            b.setEnabled(False)
        self.job.ended.connect(self._job_ended)
        self.job.start()
        return self.job

    def _job_ended(self) -> None:
        for b in (self.run_btn, self.sens_btn):
            b.setEnabled(True)
        self._options_changed()

    def start_sensitivity(self) -> BackgroundJob | None:
        try:
            plan = self.plan()
        except ValueError as exc:
            self.sens_progress.finish(str(exc))
            return None
        job = self._start_job(lambda r: run_sensitivity(plan, r, r.cancel), "sensitivity",
                              self.sens_progress)
        if job is None:
            return None
        job.finished.connect(self._on_sensitivity)
        job.failed.connect(lambda msg: self.sens_progress.finish(f"⚠ Analysis failed: {msg}"))
        job.cancelled.connect(lambda: self.sens_progress.finish("Analysis cancelled."))
        return job

    def _on_sensitivity(self, res: SensitivityResult) -> None:
        self.sensitivity = res
        top = res.ranking[:16]
        labels = [n.removeprefix("model.").removeprefix("layers.") for n, _ in top]
        skip = set(res.skip)
        self.sens_chart.set_bars(labels, [kl for _, kl in top],
                                 {i for i, (n, _) in enumerate(top) if n in skip})
        self.sens_empty.hide()
        more = f" (top 16 of {len(res.ranking)} shown)" if len(res.ranking) > 16 else ""
        self.sens_progress.finish(f"Analysed {len(res.ranking)} layers in {res.seconds:.0f} s"
                                  f"{more}.")
        if not res.skip and res.met:
            self.rec_label.setText(f"Quantizing every selected layer keeps perplexity within "
                                   f"the budget ({res.delta_pct:+.2f}% vs {res.budget_pct:g}%): "
                                   "no layer needs to stay float.")
        elif res.met:
            self.rec_label.setText(f"Keep {len(res.skip)} layer(s) float to stay within "
                                   f"{res.budget_pct:g}% ({res.delta_pct:+.2f}%):\n"
                                   + ", ".join(res.skip))
        else:
            self.rec_label.setText(f"⚠ Even with {len(res.skip)} layer(s) float the perplexity "
                                   f"rises {res.delta_pct:+.2f}% (> {res.budget_pct:g}%). "
                                   "Try W8A16 or SmoothQuant.\n" + ", ".join(res.skip))
        self.use_rec_btn.setEnabled(bool(res.skip))

    def use_recommendation(self) -> None:
        if self.sensitivity is None or not self.sensitivity.skip:
            return
        extra = [s.strip() for s in self.skip_edit.text().split(",")
                 if s.strip() and self.preset() == "custom"]
        self.preset_buttons["custom"].setChecked(True)
        self.skip_edit.setText(", ".join(dict.fromkeys(extra + self.sensitivity.skip)))

    def start_run(self) -> BackgroundJob | None:
        try:
            plan = self.plan()
        except ValueError as exc:
            self.run_progress.finish(str(exc))
            return None
        job = self._start_job(lambda r: run_plan(plan, r, r.cancel), "quantize",
                              self.run_progress)
        if job is None:
            return None
        self.verdict_badge.set("", "none")
        self.verdict.setText("")
        job.finished.connect(self._on_run)
        job.failed.connect(lambda msg: self.run_progress.finish(f"⚠ Quantization failed: {msg}"))
        job.cancelled.connect(lambda: self.run_progress.finish(
            "Cancelled. Nothing was written to disk."))
        return job

    def _on_run(self, run: QuantRun) -> None:
        self._fresh_key = run.key
        self.store.add(run)
        self.refresh_history()
        self.show_run(run)
        self.run_progress.finish(f"Done in {run.seconds:.0f} s: {run.quantized_layers} layers "
                                 f"int8, {run.skipped_layers} float. Saved to {run.out_dir}")
        if self.auto_load.isChecked():
            self.load_variant(run)

    # ------------------------------------------------------------------ results

    def show_run(self, run: QuantRun) -> None:
        self.run = run
        f, q = run.float, run.quant

        def ratio(a, b, fmt="{:+.0f}%"):
            return fmt.format(100.0 * (b / a - 1.0)) if a else "—"

        rows = [
            (fmt_bytes(f.disk_bytes), fmt_bytes(q.disk_bytes), ratio(f.disk_bytes, q.disk_bytes)),
            (fmt_bytes(f.memory_bytes), fmt_bytes(q.memory_bytes),
             ratio(f.memory_bytes, q.memory_bytes)),
            (f"{f.ttft_ms:.1f} ms", f"{q.ttft_ms:.1f} ms", ratio(f.ttft_ms, q.ttft_ms)),
            (f"{f.tok_s:.1f}", f"{q.tok_s:.1f}", ratio(f.tok_s, q.tok_s)),
            (f"{f.perplexity:.3f}", f"{q.perplexity:.3f}", f"{run.ppl_delta_pct:+.2f}%"),
            ("reference", f"{100 * (q.greedy_agreement or 0):.0f}% of tokens", ""),
            ("reference", "—" if q.top1_agreement is None  # runs saved before it existed
             else f"{100 * q.top1_agreement:.0f}% of tokens", ""),
        ] + recipe_rows(run)
        for r, cells in enumerate(rows):
            for c, text in enumerate(cells):
                item = QTableWidgetItem(text)
                item.setTextAlignment(Qt.AlignCenter)
                if r == 8 and c == 1 and run.kept_float:
                    item.setToolTip("\n".join(f"{n}: {why}" for n, why in run.kept_float.items()))
                self.table.setItem(r, c, item)
        ok, text = verdict(run, self.budget.value())
        self.verdict_badge.set("WITHIN BUDGET" if ok else "OVER BUDGET", "ok" if ok else "bad")
        self.verdict.setText(text)
        exists = Path(run.out_dir).is_dir()
        self.save_btn.setEnabled(exists)
        self.load_btn.setEnabled(exists)
        if not exists:
            self.save_status.setText(f"The checkpoint {run.out_dir} was deleted; run again to "
                                     "save or load it.")

    def refresh_history(self) -> None:
        runs = self.store.load()
        self._history_runs = runs
        self.history.setRowCount(len(runs))
        for r, run in enumerate(runs):
            plan = QuantPlan(**{**run.plan, "skip": tuple(run.plan.get("skip", ()))})
            cells = (run.created[5:16].replace("T", " "), f"{plan.model_name} · {plan.describe()}",
                     f"{run.ppl_delta_pct:+.2f}%",
                     f"{run.quant.disk_bytes / max(run.float.disk_bytes, 1):.0%}")
            for c, text in enumerate(cells):
                item = QTableWidgetItem(text)
                item.setToolTip(run.out_dir)
                self.history.setItem(r, c, item)
        self.history.resizeRowsToContents()
        self.history_empty.setVisible(not runs)

    def show_history_row(self, row: int) -> None:
        if 0 <= row < len(self._history_runs):
            self.show_run(self._history_runs[row])

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
        for m in self.ctx.engine_host.models():
            if Path(m.path) == Path(run.out_dir):
                self.save_status.setText(f"Already loaded as '{m.name}': pick it in Chat.")
                self.loaded_variant = m.name
                return m.name
        name = self.variant_name(run)
        job = self.ctx.engine_host.load(run.out_dir, name=name)
        self._load_job_id = job.job_id
        self.save_status.setText(f"Loading '{name}' into the engine…")
        return name

    def _on_variant_loaded(self, job_id: int, info, error: str) -> None:
        if job_id != self._load_job_id:
            return
        self._load_job_id = None
        if error:
            self.save_status.setText(f"⚠ Loading failed: {error}")
        else:
            self.loaded_variant = info.name if info is not None else None
            self.save_status.setText(f"Loaded as '{self.loaded_variant}' next to the float "
                                     "model: compare them in Chat (A/B).")

    def choose_save_dir(self) -> None:
        path = QFileDialog.getExistingDirectory(self, "Save the quantized model into (a new "
                                                "folder is created inside)")
        if path and self.run is not None:
            fmt = self.fmt_box.currentData()
            self.save_as(fmt, str(Path(path) / f"{Path(self.run.out_dir).name}-{fmt}"))

    def save_as(self, fmt: str, dest: str) -> BackgroundJob | None:
        run = self.run
        if run is None:
            return None
        if fmt == "compressed-tensors" and run.plan["method"] == "w8a16":
            self.save_status.setText("⚠ compressed-tensors is for W8A8 only (vLLM has no W8A16 "
                                     "mapping): choose native or msModelSlim.")
            return None
        if fmt != "native" and run.plan.get("int8_head"):
            self.save_status.setText("⚠ This run has an int8 lm_head and embeddings, which vLLM "
                                     "and vllm-ascend read in float: save it as native, or run "
                                     "again without that option.")
            return None
        job = self._start_job(lambda r: export_run(run, fmt, dest, r), "export",
                              self.run_progress)
        if job is None:
            return None
        job.finished.connect(lambda p: self.save_status.setText(f"Saved {fmt} to {p}"))
        job.failed.connect(lambda msg: self.save_status.setText(f"⚠ Saving failed: {msg}"))
        return job

    def shutdown(self) -> None:
        if self.busy():
            self.job.cancel()
