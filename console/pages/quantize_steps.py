"""The first four steps of the Quantize wizard as views: model, method + layers, calibration
data, sensitivity. Each owns its controls and says `changed` when the user edits one; the page
(console/pages/quantize.py) reads them into a QuantPlan and runs the jobs."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QFileDialog, QHBoxLayout, QWidget

from ...engine.quant.head import head_mode, recommended
from ..widgets.basic import card_title, muted
from . import quantize_steps_layout as layout


class ModelStep(QWidget):
    """1 · a loaded float model or a folder on disk."""

    changed = Signal()

    def __init__(self, parent=None):
        super().__init__(parent)
        self.folder: str | None = None
        lay = layout.single_card(self)
        lay.addWidget(card_title("1 · Which float model?"))
        lay.addWidget(muted("Quantize a model that is loaded in the engine, or any Hugging Face "
                            "model folder on disk. The float model stays loaded; the INT8 result "
                            "is added next to it as a second variant."))
        lay.addLayout(layout.model_form(self))
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
        self.model_info.setText(data[1] if data is not None else self._why_none())
        self.changed.emit()

    def _why_none(self) -> str:
        # `make run` opens the chat model in INT8: it is loaded, but not a float model to start from
        int8 = [m.name for m in self._models if m.quantization]
        if int8:
            return (f"Loaded already in INT8: {', '.join(int8)}. Quantizing starts from float "
                    "weights: load one as Float on the Models page, or pick a folder.")
        return "No model loaded yet: load one on the Models page or pick a folder."


class MethodStep(QWidget):
    """2 · method, SmoothQuant, which layers, int8 head."""

    changed = Signal()

    def __init__(self, parent=None):
        super().__init__(parent)
        lay = QHBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.setSpacing(10)
        lay.addWidget(layout.method_card(self), 1)
        lay.addWidget(layout.layers_card(self), 1)
        self._head_share: float | None = None
        self.set_head_share(None)
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
            yes = recommended(share)
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
        layout.calib_card(self)
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
        lay.addWidget(layout.sensitivity_card(self), 2)
        lay.addWidget(layout.sensitivity_chart(self), 3)

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
