"""The Thinking block of a reasoning model's reply: a header with the reasoning's own token count
and time that folds the reasoning text away, above the answer.

It opens while the model thinks (the reasoning streams into it live) and folds once the answer
starts, unless the user opened or closed it by hand meanwhile.
"""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QFrame, QLabel, QVBoxLayout

from .basic import fold_toggle


class ThinkingBlock(QFrame):
    toggled = Signal(bool)  # expanded

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("Thinking")
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 4)
        lay.setSpacing(2)
        self.toggle = fold_toggle("Show or hide the model's reasoning")
        self.toggle.setObjectName("ThinkingToggle")
        lay.addWidget(self.toggle, 0, Qt.AlignLeft)
        self.text = QLabel()
        self.text.setObjectName("ThinkingText")
        self.text.setTextFormat(Qt.PlainText)
        self.text.setWordWrap(True)
        self.text.setTextInteractionFlags(Qt.TextSelectableByMouse)
        lay.addWidget(self.text)
        self.summary = "Thinking"
        self.by_user = False  # the user chose: automatic folding leaves it alone
        self.toggle.clicked.connect(self._clicked)
        self.toggle.toggled.connect(self._show)
        self._show(False)

    @property
    def expanded(self) -> bool:
        return self.toggle.isChecked()

    def set_expanded(self, on: bool) -> None:
        """Open or fold it (programmatically: a user's own choice is kept)."""
        if not self.by_user:
            self.toggle.setChecked(on)

    def set_content(self, reasoning: str, summary: str) -> None:
        self.summary = summary
        if self.text.text() != reasoning:
            self.text.setText(reasoning)
        self._label()

    def _clicked(self, checked: bool) -> None:
        self.by_user = True
        self.toggled.emit(checked)

    def _show(self, on: bool) -> None:
        self.text.setVisible(on)
        self._label()

    def _label(self) -> None:
        self.toggle.setText(("▾ " if self.expanded else "▸ ") + self.summary)
