"""Demo mode's widgets, built in named parts: big tiles, two plots, the A/B chat, the prompt.
The application stylesheet sets font sizes, so the sizes here are stylesheets too."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QComboBox,
    QFrame,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QTextEdit,
    QVBoxLayout,
)

from ..widgets.live_plot import LivePlot

BIG_PT = 40
LABEL_PT = 14
CHAT_STYLE = "font-size: 16pt;"


class Tile(QFrame):
    def __init__(self, label: str, unit: str = "", parent=None):
        super().__init__(parent)
        self.setProperty("card", True)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(18, 12, 18, 12)
        self.label = QLabel(label.upper())
        self.label.setStyleSheet(f"font-size: {LABEL_PT}pt; font-weight: 600;")
        self.label.setProperty("muted", True)
        self.value = QLabel("—")
        self.value.setStyleSheet(f"font-size: {BIG_PT}pt; font-weight: 700;")
        self.unit = QLabel(unit)
        self.unit.setStyleSheet(f"font-size: {LABEL_PT}pt;")
        self.unit.setProperty("muted", True)
        lay.addWidget(self.label)
        row = QHBoxLayout()
        row.addWidget(self.value)
        row.addWidget(self.unit, 0, Qt.AlignBottom)
        row.addStretch(1)
        lay.addLayout(row)

    def set(self, text: str, unit: str | None = None) -> None:
        self.value.setText(text)
        if unit is not None:
            self.unit.setText(unit)


def build(view) -> None:
    root = QVBoxLayout(view)
    root.setContentsMargins(28, 20, 28, 20)
    root.setSpacing(16)
    root.addLayout(header(view))
    root.addLayout(tiles(view))
    root.addLayout(plots(view), 2)
    root.addLayout(chat(view), 3)
    root.addLayout(prompt_row(view))


def header(view) -> QHBoxLayout:
    """The title, the devices the numbers come from, and how to leave."""
    head = QHBoxLayout()
    title = QLabel("NPU Console · live")
    title.setStyleSheet("font-size: 26pt; font-weight: 700;")
    head.addWidget(title)
    head.addStretch(1)
    view.device_label = QLabel("")
    view.device_label.setStyleSheet(f"font-size: {LABEL_PT}pt;")
    view.device_label.setProperty("muted", True)
    head.addWidget(view.device_label)
    hint = QPushButton("Esc · leave demo")
    hint.clicked.connect(view.close)
    head.addWidget(hint)
    return head


def tiles(view) -> QGridLayout:
    grid = QGridLayout()
    grid.setSpacing(14)
    view.tok_s = Tile("Tokens / s", "decode")
    view.ttft = Tile("TTFT", "ms p50")
    view.active = Tile("Requests", "running")
    view.util = Tile("NPU load", "%")
    view.memory = Tile("HBM", "GB")
    for i, t in enumerate((view.tok_s, view.ttft, view.active, view.util, view.memory)):
        grid.addWidget(t, 0, i)
    return grid


def plots(view) -> QHBoxLayout:
    row = QHBoxLayout()
    view.tok_plot = LivePlot("Decode speed", "tok/s")
    view.tok_plot.add_series("tok/s")
    view.ttft_plot = LivePlot("TTFT", "ms")
    view.ttft_plot.add_series("p50", 1)
    view.ttft_plot.add_series("p99", 3, dashed=True)
    for p in (view.tok_plot, view.ttft_plot):
        p.set_window(60)
        row.addWidget(p)
    return row


def chat(view) -> QHBoxLayout:
    """Side A and side B: a model box over the answer streaming in (view.panes)."""
    row = QHBoxLayout()
    view.panes = []
    for side in ("A", "B"):
        col = QVBoxLayout()
        box = QComboBox()
        box.setStyleSheet(CHAT_STYLE)
        text = QTextEdit()
        text.setReadOnly(True)
        text.setStyleSheet(CHAT_STYLE)
        text.setPlaceholderText(f"Model {side}'s answer streams here.")
        head = QHBoxLayout()
        lab = QLabel(side)
        lab.setStyleSheet(CHAT_STYLE + ' font-weight: 700;')
        head.addWidget(lab)
        head.addWidget(box, 1)
        col.addLayout(head)
        col.addWidget(text, 1)
        row.addLayout(col, 1)
        view.panes.append((box, text))
    return row


def prompt_row(view) -> QHBoxLayout:
    row = QHBoxLayout()
    view.prompt = QLineEdit()
    view.prompt.setStyleSheet(CHAT_STYLE)
    view.prompt.setPlaceholderText("Ask both models the same question and press Enter")
    view.prompt.returnPressed.connect(view.send)
    view.send_btn = QPushButton("Ask both")
    view.send_btn.setStyleSheet(CHAT_STYLE)
    view.send_btn.setProperty("primary", True)
    view.send_btn.clicked.connect(view.send)
    row.addWidget(view.prompt, 1)
    row.addWidget(view.send_btn)
    return row
