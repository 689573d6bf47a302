"""System prompt, sampling parameters and JSON presets."""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QComboBox,
    QDoubleSpinBox,
    QFormLayout,
    QHBoxLayout,
    QLineEdit,
    QMessageBox,
    QPlainTextEdit,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from .. import presets
from .basic import card_title, muted


def _dspin(lo, hi, step, decimals=2) -> QDoubleSpinBox:
    box = QDoubleSpinBox()
    box.setRange(lo, hi)
    box.setSingleStep(step)
    box.setDecimals(decimals)
    return box


class SamplingPanel(QWidget):
    changed = Signal()

    def __init__(self, parent=None):
        super().__init__(parent)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.addWidget(card_title("Settings"))
        prow = QHBoxLayout()
        self.preset_box = QComboBox()
        self.preset_box.setToolTip("Presets bundle the system prompt and sampling settings")
        prow.addWidget(self.preset_box, 1)
        lay.addLayout(prow)
        lay.addWidget(muted("System prompt"))
        self.system = QPlainTextEdit()
        self.system.setPlaceholderText("Optional instructions for the model")
        self._template_system: str | None = None  # the model's own default, shown when unset
        self.system.setFixedHeight(70)
        lay.addWidget(self.system)
        form = QFormLayout()
        form.setVerticalSpacing(4)
        self.temperature = _dspin(0.0, 2.0, 0.05)
        self.temperature.setToolTip("0 = greedy (deterministic)")
        self.top_p = _dspin(0.01, 1.0, 0.01)
        self.top_k = QSpinBox()
        self.top_k.setRange(0, 1000)
        self.top_k.setToolTip("0 = off")
        self.max_tokens = QSpinBox()
        self.max_tokens.setRange(1, 32768)
        self.rep = _dspin(0.5, 2.0, 0.05)
        self.presence = _dspin(-2.0, 2.0, 0.1)
        self.frequency = _dspin(-2.0, 2.0, 0.1)
        self.seed = QLineEdit()
        self.seed.setPlaceholderText("random")
        self.stop = QLineEdit()
        self.stop.setPlaceholderText("comma-separated, e.g. \\n\\n, User:")
        for label, w in (("Temperature", self.temperature), ("Top-p", self.top_p),
                         ("Top-k", self.top_k), ("Max tokens", self.max_tokens),
                         ("Repetition penalty", self.rep), ("Presence penalty", self.presence),
                         ("Frequency penalty", self.frequency), ("Seed", self.seed),
                         ("Stop strings", self.stop)):
            form.addRow(label, w)
        lay.addLayout(form)
        srow = QHBoxLayout()
        self.preset_name = QLineEdit()
        self.preset_name.setPlaceholderText("preset name")
        self.save_btn = QPushButton("Save preset")
        srow.addWidget(self.preset_name, 1)
        srow.addWidget(self.save_btn)
        lay.addLayout(srow)
        lay.addStretch(1)
        self.preset_box.activated.connect(lambda _i: self.apply_preset(self.preset_box.currentText()))
        self.save_btn.clicked.connect(self.save_current)
        self.reload_presets()
        self.apply_values(presets.DEFAULT)

    def reload_presets(self, select: str | None = None) -> None:
        self._presets = presets.list_presets()
        self.preset_box.clear()
        self.preset_box.addItems(list(self._presets))
        if select:
            self.preset_box.setCurrentText(select)

    def apply_preset(self, name: str) -> None:
        if name in self._presets:
            self.apply_values(self._presets[name])

    def apply_values(self, v: dict) -> None:
        v = {**presets.DEFAULT, **v}
        self.system.setPlainText(v["system_prompt"] or self._template_system or "")
        self.temperature.setValue(v["temperature"])
        self.top_p.setValue(v["top_p"])
        self.top_k.setValue(v["top_k"])
        self.max_tokens.setValue(v["max_tokens"])
        self.rep.setValue(v["repetition_penalty"])
        self.presence.setValue(v["presence_penalty"])
        self.frequency.setValue(v["frequency_penalty"])
        self.seed.setText("" if v["seed"] is None else str(v["seed"]))
        self.stop.setText(", ".join(s.replace("\n", "\\n") for s in v["stop"]))

    def set_template_system(self, text: str | None) -> None:
        """Show the system prompt the model's chat template uses by default (editable); a
        prompt the user wrote stays."""
        current = self.system.toPlainText().strip()
        if not current or current == (self._template_system or ""):
            self.system.setPlainText(text or "")
        self._template_system = text
        self.system.setToolTip("The model's chat template uses this system prompt by default; "
                               "edit it here" if text else "")

    def values(self) -> dict:
        """Raises ValueError with a plain sentence for a bad seed."""
        seed_text = self.seed.text().strip()
        try:
            seed = int(seed_text) if seed_text else None
        except ValueError:
            raise ValueError(f"seed must be a whole number, got '{seed_text}'") from None
        stops = [s.strip().replace("\\n", "\n") for s in self.stop.text().split(",")]
        return {"system_prompt": self.system.toPlainText().strip(),
                "temperature": self.temperature.value(), "top_p": self.top_p.value(),
                "top_k": self.top_k.value(), "max_tokens": self.max_tokens.value(),
                "repetition_penalty": self.rep.value(), "presence_penalty": self.presence.value(),
                "frequency_penalty": self.frequency.value(), "seed": seed,
                "stop": [s for s in stops if s]}

    def sampling_params(self):
        from ...engine.runtime.types import SamplingParams

        v = self.values()
        return SamplingParams(max_tokens=v["max_tokens"], temperature=v["temperature"],
                              top_p=v["top_p"], top_k=v["top_k"],
                              repetition_penalty=v["repetition_penalty"],
                              presence_penalty=v["presence_penalty"],
                              frequency_penalty=v["frequency_penalty"], seed=v["seed"],
                              stop=tuple(v["stop"]))

    def save_current(self) -> None:
        name = self.preset_name.text().strip()
        try:
            presets.save_preset(name, self.values())
        except ValueError as exc:
            box = QMessageBox(QMessageBox.Warning, "Preset", str(exc), QMessageBox.Ok, self)
            box.open()
            self._box = box
            return
        self.reload_presets(select=name)
        self.preset_name.clear()
