"""The first four steps of the Quantize wizard as views: model, method + layers, calibration
data, sensitivity. Each owns its controls and says `changed` when the user edits one; the page
(console/pages/quantize.py) reads them into a QuantPlan and runs the jobs."""

from __future__ import annotations

from pathlib import Path

from npu_console.console.quant_runs import METHOD_LABELS, PRESET_LABELS
from npu_console.console.widgets.bars import BarChart
from npu_console.console.widgets.basic import card, muted, spin
from npu_console.console.widgets.job_progress import JobProgress
from npu_console.engine.quant.head import HEAD_MODES, head_mode, recommended
from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QButtonGroup,
    QCheckBox,
    QComboBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QRadioButton,
    QVBoxLayout,
    QWidget,
)

METHOD_NOTES = {"w8a16": "int8 weights, 16-bit activations: the safest; memory-bound decode "
                         "gets faster",
                "w8a8-dynamic": "int8 weights and per-token int8 activations, no calibration",
                "w8a8-static": "per-tensor int8 activation scales from calibration data"}


def card_title(text: str) -> QLabel:
    t = QLabel(text)
    t.setObjectName("CardTitle")
    return t


def _padded(widget: QWidget) -> QVBoxLayout:
    lay = QVBoxLayout(widget)
    lay.setContentsMargins(16, 12, 16, 12)
    return lay


class ModelStep(QWidget):
    """1 · a loaded float model or a folder on disk."""

    changed = Signal()

    def __init__(self, parent=None):
        super().__init__(parent)
        self.folder: str | None = None
        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        w = card()
        outer.addWidget(w)
        lay = _padded(w)
        lay.addWidget(card_title("1 · Which float model?"))
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
        self.model_info = muted("")
        self.model_info.setWordWrap(True)
        form.addRow("", self.model_info)
        lay.addLayout(form)
        lay.addStretch(1)
        self._models: list = []
        self._model_changed()

    def set_models(self, models) -> None:
        """Float models of the engine, then the chosen folder; keeps the current choice."""
        self._models = list(models)
        current = self.model_box.currentData()
        self.model_box.blockSignals(True)
        self.model_box.clear()
        for m in self._models:
            if not m.quantization:
                self.model_box.addItem(f"{m.name}  ({m.architecture}, {m.dtype})", (m.name, m.path))
        if self.folder:
            self.model_box.addItem(f"Folder: {self.folder}", (Path(self.folder).name, self.folder))
        idx = self.model_box.findData(current) if current is not None else -1
        self.model_box.setCurrentIndex(max(idx, 0))
        self.model_box.blockSignals(False)
        self._model_changed()

    def set_folder(self, path: str) -> None:
        self.folder = str(path)
        self.set_models(self._models)
        self.model_box.setCurrentIndex(self.model_box.count() - 1)

    def choose_folder(self) -> None:
        path = QFileDialog.getExistingDirectory(self, "Float model folder")
        if path:
            self.set_folder(path)

    def choice(self) -> tuple[str, str] | None:
        """(name, path) of the chosen model."""
        return self.model_box.currentData()

    def _model_changed(self) -> None:
        data = self.model_box.currentData()
        self.model_info.setText(data[1] if data is not None else
                                "No model loaded yet: load one on the Models page or pick a "
                                "folder.")
        self.changed.emit()


class MethodStep(QWidget):
    """2 · method, SmoothQuant, which layers, int8 head."""

    changed = Signal()

    def __init__(self, parent=None):
        super().__init__(parent)
        lay = QHBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.setSpacing(10)
        mcard = card()
        m = _padded(mcard)
        m.addWidget(card_title("2 · Method"))
        self.method_group = QButtonGroup(self)
        self.method_buttons: dict[str, QRadioButton] = {}
        for key, label in METHOD_LABELS.items():
            b = QRadioButton(label)
            self.method_group.addButton(b)
            self.method_buttons[key] = b
            m.addWidget(b)
            note = muted(METHOD_NOTES[key])
            note.setWordWrap(True)
            note.setContentsMargins(22, 0, 0, 4)
            m.addWidget(note)
        self.method_buttons["w8a8-dynamic"].setChecked(True)
        sq = QHBoxLayout()
        self.sq_check = QCheckBox("SmoothQuant, α")
        self.sq_alpha = spin(0.0, 1.0, 0.5, step=0.05)
        sq.addWidget(self.sq_check)
        sq.addWidget(self.sq_alpha)
        sq.addStretch(1)
        m.addLayout(sq)
        m.addStretch(1)
        lay.addWidget(mcard, 1)

        pcard = card()
        p = _padded(pcard)
        p.addWidget(card_title("Layers"))
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
        p.addWidget(QLabel("lm_head and embeddings in int8"))
        self.head_box = QComboBox()
        # the auto entry's text is long: the card's width decides, not the text
        self.head_box.setSizeAdjustPolicy(QComboBox.AdjustToMinimumContentsLengthWithIcon)
        self.head_box.setMinimumContentsLength(24)
        for mode in HEAD_MODES:
            self.head_box.addItem(mode, mode)
        self.head_box.setToolTip(
            "Stores the vocabulary matrix in int8 too (weight-only). On Qwen2.5-0.5B (a "
            "136M-entry vocabulary matrix in a 494M model) that is 0.50x bf16's memory instead "
            "of 0.64x, and CPU decode ~1.5x faster (docs/benchmarks.md). Kept in the console's "
            "own format: vLLM and vllm-ascend read lm_head and embeddings in float.")
        p.addWidget(self.head_box)
        head_note = muted("auto: int8 when the head is at least 15 % of the weights (small "
                          "models with large vocabularies: a fifth to a half less memory, "
                          "faster decode), float for w8a8-static; the result table shows "
                          "what the int8 head alone costs. Saved in the console's own format "
                          "only.")
        head_note.setWordWrap(True)
        p.addWidget(head_note)
        self._head_share: float | None = None
        self.set_head_share(None)
        p.addStretch(1)
        lay.addWidget(pcard, 1)
        for b in list(self.method_buttons.values()) + list(self.preset_buttons.values()):
            b.toggled.connect(self._on_edit)
        self.sq_check.toggled.connect(self._on_edit)
        self.sq_alpha.valueChanged.connect(self._on_edit)
        self.skip_edit.textChanged.connect(self._on_edit)
        self.head_box.currentIndexChanged.connect(self._on_edit)
        self._sync()

    def method(self) -> str:
        return next(k for k, b in self.method_buttons.items() if b.isChecked())

    def preset(self) -> str:
        return next(k for k, b in self.preset_buttons.items() if b.isChecked())

    def skip(self) -> tuple[str, ...]:
        return tuple(s.strip() for s in self.skip_edit.text().split(",") if s.strip())

    def smoothquant(self) -> float | None:
        ok = self.sq_check.isChecked() and self.method() != "w8a16"
        return self.sq_alpha.value() if ok else None

    def set_method(self, method: str, preset: str = "all", skip: str = "",
                   smoothquant: float | None = None, int8_head: str | bool = "auto") -> None:
        self.method_buttons[method].setChecked(True)
        self.preset_buttons[preset].setChecked(True)
        self.skip_edit.setText(skip)
        self.head_box.setCurrentIndex(self.head_box.findData(head_mode(int8_head)))
        self.sq_check.setChecked(smoothquant is not None)
        if smoothquant is not None:
            self.sq_alpha.setValue(smoothquant)

    def head_mode(self) -> str:
        return self.head_box.currentData()

    def set_head_share(self, share: float | None) -> None:
        """Label the auto entry with what the rule says for the chosen model and method."""
        self._head_share = share
        if share is None:
            text = "auto (int8 when the head is at least 15 % of the weights)"
        else:
            yes = recommended(share, self.method())
            text = (f"auto: {'yes' if yes else 'no'} for this model (head = "
                    f"{100 * share:.0f} % of the weights)")
        i = self.head_box.findData("auto")
        self.head_box.setItemText(i, text)
        self.head_box.setItemData(i, text, Qt.ToolTipRole)

    def add_skip(self, names: list[str]) -> None:
        """Switch to a custom skip list holding `names` (and what a custom list had already)."""
        extra = list(self.skip()) if self.preset() == "custom" else []
        self.preset_buttons["custom"].setChecked(True)
        self.skip_edit.setText(", ".join(dict.fromkeys(extra + list(names))))

    def _on_edit(self) -> None:
        self._sync()
        self.set_head_share(self._head_share)  # the rule depends on the method too
        self.changed.emit()

    def _sync(self) -> None:
        """SmoothQuant only for W8A8; the skip list only for the custom preset."""
        w8a8 = self.method().startswith("w8a8")
        self.sq_check.setEnabled(w8a8)
        if not w8a8 and self.sq_check.isChecked():
            self.sq_check.blockSignals(True)
            self.sq_check.setChecked(False)
            self.sq_check.blockSignals(False)
        self.sq_alpha.setEnabled(w8a8 and self.sq_check.isChecked())
        self.skip_edit.setEnabled(self.preset() == "custom")


class CalibStep(QWidget):
    """3 · calibration text: the model's own, or a file (its summary is read off the GUI
    thread by the page's job)."""

    changed = Signal()
    file_edited = Signal()  # the file or the sample sizes changed: the summary is stale

    def __init__(self, parent=None):
        super().__init__(parent)
        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        w = card()
        outer.addWidget(w)
        lay = _padded(w)
        lay.addWidget(card_title("3 · Calibration data"))
        self.calib_note = muted("Activation ranges, per-layer SmoothQuant and error-compensating "
                                "rounding are chosen on this text.")
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
        self.calib_browse.clicked.connect(self.choose_file)
        frow.addWidget(self.calib_path, 1)
        frow.addWidget(self.calib_browse)
        lay.addLayout(frow)
        # how much of a file is cut into samples; the model's own text has a fixed size
        self.file_sizes = QFormLayout()
        self.samples = spin(1, 4096, 64)
        self.seq_len = spin(8, 8192, 256)
        self.file_sizes.addRow("Samples", self.samples)
        self.file_sizes.addRow("Tokens per sample", self.seq_len)
        lay.addLayout(self.file_sizes)
        self._show_file_sizes(False)
        self.calib_info = QLabel("")
        self.calib_info.setWordWrap(True)
        lay.addWidget(self.calib_info)
        lay.addStretch(1)
        for sig in (self.calib_builtin.toggled, self.calib_path.editingFinished,
                    self.samples.valueChanged, self.seq_len.valueChanged):
            sig.connect(self.file_edited)
            sig.connect(self.changed)
        self.calib_path.textChanged.connect(
            lambda t: t and self.calib_file_radio.setChecked(True))
        self.calib_file_radio.toggled.connect(self._show_file_sizes)

    def _show_file_sizes(self, on: bool) -> None:
        for row in range(self.file_sizes.rowCount()):
            self.file_sizes.setRowVisible(row, on)

    def file(self) -> str | None:
        """The chosen file; None for the model's own text. ValueError when a file is chosen
        but no path given."""
        if not self.calib_file_radio.isChecked():
            return None
        path = self.calib_path.text().strip()
        if not path:
            raise ValueError("Calibration: choose a file or use the built-in text.")
        return path

    def set_calibration(self, path: str | None, samples: int, seq_len: int) -> None:
        if path:
            self.calib_path.setText(path)
            self.calib_file_radio.setChecked(True)
        else:
            self.calib_builtin.setChecked(True)
        self.samples.setValue(samples)
        self.seq_len.setValue(seq_len)

    def choose_file(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Calibration text", "",
                                              "Text (*.txt *.jsonl);;All files (*)")
        if path:
            self.calib_path.setText(path)
            self.calib_file_radio.setChecked(True)
            self.file_edited.emit()


class SensitivityStep(QWidget):
    """4 · the quality budget, the per-layer analysis and its recommended skip list."""

    changed = Signal()

    def __init__(self, parent=None):
        super().__init__(parent)
        lay = QHBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.setSpacing(10)
        left = card()
        lv = _padded(left)
        lv.addWidget(card_title("4 · Sensitivity (optional)"))
        text = muted("Quantizes one layer at a time and measures how far the output "
                     "distribution moves (KL). Then skips the most sensitive layers until the "
                     "perplexity stays within the quality budget.")
        text.setWordWrap(True)
        lv.addWidget(text)
        form = QFormLayout()
        self.budget = spin(0.0, 100.0, 2.0, " % perplexity", decimals=1)
        self.budget.valueChanged.connect(self.changed)
        form.addRow("Quality budget", self.budget)
        self.fit_check = QCheckBox("Keep sensitive layers float to meet the budget")
        self.fit_check.setToolTip(
            "While quantizing, measure perplexity and put the layers with the largest output "
            "error back to float until the loss is within the budget (at least 85% of linear "
            "weights stay int8), as `npu-console quantize --budget`")
        self.fit_check.toggled.connect(self.changed)
        form.addRow("", self.fit_check)
        lv.addLayout(form)
        self.sens_btn = QPushButton("Analyse sensitivity")
        lv.addWidget(self.sens_btn)
        self.sens_progress = JobProgress("Skip this step if you already know what to keep float.")
        lv.addWidget(self.sens_progress)
        self.rec_label = QLabel("")
        self.rec_label.setWordWrap(True)
        self.rec_label.setTextInteractionFlags(Qt.TextSelectableByMouse)
        lv.addWidget(self.rec_label)
        self.use_rec_btn = QPushButton("Use this skip list")
        self.use_rec_btn.setEnabled(False)
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

    def show_result(self, res) -> None:
        """An engine.quant.analysis.SensitivityResult: the chart, the recommendation."""
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
