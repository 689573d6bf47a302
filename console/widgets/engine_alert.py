"""The banner a dead engine shows above every page: why it stopped, and a Restart button."""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QPushButton

from ..theme import repolish


class EngineCrashBanner(QFrame):
    restart_requested = Signal()

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("Banner")
        self.setProperty("level", "critical")
        repolish(self)
        lay = QHBoxLayout(self)
        lay.setContentsMargins(10, 6, 6, 6)
        self.label = QLabel("")
        self.label.setWordWrap(True)
        lay.addWidget(self.label, 1)
        self.restart = QPushButton("Restart engine")
        self.restart.setProperty("primary", True)
        self.restart.clicked.connect(self._on_restart)
        lay.addWidget(self.restart)
        self.reason = ""
        self.hide()

    def show_crash(self, reason: str) -> None:
        """Show (or keep showing) the crash; a new reason re-arms the button."""
        reason = (reason or "unknown error").strip()
        if self.isVisible() and reason == self.reason:
            return
        self.reason = reason
        self.label.setText(f"⚠ The engine stopped: {reason}. New requests fail until it is "
                           "restarted; the loaded models are kept.")
        self.restart.setEnabled(True)
        self.restart.setText("Restart engine")
        self.show()

    def restart_failed(self, error: str) -> None:
        self.label.setText(f"⚠ The engine stopped: {self.reason}. Restarting failed: {error}")
        self.restart.setEnabled(True)
        self.restart.setText("Try again")

    def clear(self) -> None:
        self.reason = ""
        self.hide()

    def _on_restart(self) -> None:
        self.restart.setEnabled(False)
        self.restart.setText("Restarting…")
        self.restart_requested.emit()
