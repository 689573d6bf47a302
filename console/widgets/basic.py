"""Small themed building blocks: badge, banner, status lamp, labelled bar, card frame, spin box."""

from __future__ import annotations

from typing import ClassVar

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QColor, QPainter
from PySide6.QtWidgets import (
    QDoubleSpinBox,
    QFrame,
    QHBoxLayout,
    QLabel,
    QProgressBar,
    QPushButton,
    QSizePolicy,
    QSpinBox,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from ..theme import current_theme, repolish


class Badge(QLabel):
    """A short coloured tag: kind is ok / warn / bad / info / none (styled in base.qss)."""

    def __init__(self, text: str = "", kind: str = "none", parent=None):
        super().__init__(text, parent)
        self.setObjectName("Badge")
        self.setSizePolicy(QSizePolicy.Maximum, QSizePolicy.Fixed)
        self.set(text, kind)

    def set(self, text: str, kind: str = "none") -> None:
        self.setText(text)
        if self.property("kind") != kind:
            self.setProperty("kind", kind)
            repolish(self)
        self.setVisible(bool(text))


class Banner(QFrame):
    """One alert line with a dismiss button; level is info / warning / critical."""

    dismissed = Signal(str)

    def __init__(self, key: str, text: str, level: str = "warning", parent=None):
        super().__init__(parent)
        self.key = key
        self.setObjectName("Banner")
        self.setProperty("level", level)
        lay = QHBoxLayout(self)
        lay.setContentsMargins(8, 4, 4, 4)
        self.label = QLabel(text)
        self.label.setWordWrap(True)
        lay.addWidget(self.label, 1)
        close = QPushButton("Dismiss")
        close.setFlat(True)
        close.clicked.connect(lambda: self.dismissed.emit(self.key))
        lay.addWidget(close)

    def update_alert(self, text: str, level: str) -> None:
        self.label.setText(text)
        if self.property("level") != level:
            self.setProperty("level", level)
            repolish(self)


class Lamp(QWidget):
    """A round status light with tooltip; state is on / off / busy / error."""

    COLORS: ClassVar[dict[str, str]] = {"on": "ok", "off": "muted", "busy": "warn", "error": "bad"}

    def __init__(self, state: str = "off", parent=None):
        super().__init__(parent)
        self.setFixedSize(12, 12)
        self.state = state

    def set_state(self, state: str, tip: str = "") -> None:
        self.state = state
        self.setToolTip(tip)
        self.update()

    def paintEvent(self, _event) -> None:
        p = QPainter(self)
        p.setRenderHint(QPainter.Antialiasing)
        p.setPen(Qt.NoPen)
        p.setBrush(QColor(current_theme().color(self.COLORS.get(self.state, "muted"))))
        p.drawEllipse(1, 1, 10, 10)
        p.end()


class MetricBar(QWidget):
    """'Label ........ value' over a thin progress bar that turns amber / red near its limit."""

    def __init__(self, label: str, warn_at: float = 80.0, bad_at: float = 95.0, parent=None):
        super().__init__(parent)
        self.warn_at, self.bad_at = warn_at, bad_at
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.setSpacing(2)
        row = QHBoxLayout()
        self.name = QLabel(label)
        self.name.setProperty("muted", True)
        self.value = QLabel("N/A")
        self.value.setAlignment(Qt.AlignRight | Qt.AlignVCenter)
        row.addWidget(self.name)
        row.addStretch(1)
        row.addWidget(self.value)
        lay.addLayout(row)
        self.bar = QProgressBar()
        self.bar.setRange(0, 1000)
        self.bar.setTextVisible(False)
        self.bar.setFixedHeight(6)
        lay.addWidget(self.bar)

    def set(self, pct: float | None, text: str) -> None:
        self.value.setText(text)
        self.bar.setValue(0 if pct is None else int(max(0.0, min(100.0, pct)) * 10))
        level = "" if pct is None or pct < self.warn_at else ("warn" if pct < self.bad_at else "bad")
        if self.bar.property("level") != level:
            self.bar.setProperty("level", level)
            repolish(self.bar)


def card(parent=None) -> QFrame:
    frame = QFrame(parent)
    frame.setProperty("card", True)
    return frame


def fold_toggle(tooltip: str) -> QToolButton:
    """The text button that folds a section open and shut (its owner sets the ▸ / ▾ text)."""
    button = QToolButton()
    button.setCheckable(True)
    button.setAutoRaise(True)
    button.setToolButtonStyle(Qt.ToolButtonTextOnly)
    button.setCursor(Qt.PointingHandCursor)
    button.setToolTip(tooltip)
    return button


def card_title(text: str) -> QLabel:
    label = QLabel(text)
    label.setObjectName("CardTitle")
    return label


def titled_card(title: str, margins: tuple[int, int, int, int] = (16, 12, 16, 12)):
    """A card with its title on top: (the card, the layout for what goes below the title)."""
    frame = card()
    lay = QVBoxLayout(frame)
    lay.setContentsMargins(*margins)
    lay.addWidget(card_title(title))
    return frame, lay


def spin(lo: float, hi: float, value: float, suffix: str = "", tip: str = "",
         step: float | None = None, decimals: int | None = None) -> QSpinBox | QDoubleSpinBox:
    """A spin box from lo to hi showing value: a QDoubleSpinBox when lo, hi or value is a
    float, else a QSpinBox. The range is set before the value, which it would clamp."""
    double = any(isinstance(v, float) for v in (lo, hi, value))
    box = QDoubleSpinBox() if double else QSpinBox()
    if decimals is not None:
        box.setDecimals(decimals)
    box.setRange(lo, hi)
    if step is not None:
        box.setSingleStep(step)
    if suffix:
        box.setSuffix(suffix)
    if tip:
        box.setToolTip(tip)
    box.setValue(value)
    return box


def muted(text: str = "", parent=None) -> QLabel:
    label = QLabel(text, parent)
    label.setProperty("muted", True)
    return label


def page_title(text: str) -> QLabel:
    label = QLabel(text)
    label.setObjectName("PageTitle")
    return label


def fmt_mb(mb: float | None) -> str:
    if mb is None:
        return "N/A"
    return f"{mb / 1024:.1f} GB" if mb >= 1024 else f"{mb:.0f} MB"


def fmt_bytes(n: float | None) -> str:
    if n is None:
        return "N/A"
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1024 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TB"


def fmt_num(v: float | None, fmt: str = "{:.0f}", unit: str = "") -> str:
    return "N/A" if v is None else fmt.format(v) + unit


def discard(widget) -> None:
    """Take a widget out of its layout now and delete it later: deferred deletes only run when
    the event loop regains control, and a stale widget must not stay visible until then."""
    parent = widget.parentWidget()
    if parent is not None and parent.layout() is not None:
        parent.layout().removeWidget(widget)
    widget.hide()
    widget.deleteLater()
