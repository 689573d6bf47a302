"""Progress bar + stage line + time left + Cancel, bound to one BackgroundJob at a time."""

from __future__ import annotations

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QHBoxLayout, QLabel, QProgressBar, QPushButton, QVBoxLayout, QWidget

from ..jobs import BackgroundJob, fmt_eta


class JobProgress(QWidget):
    def __init__(self, idle_text: str = "", parent=None):
        super().__init__(parent)
        self.job: BackgroundJob | None = None
        self.idle_text = idle_text
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.setSpacing(4)
        row = QHBoxLayout()
        self.bar = QProgressBar()
        self.bar.setRange(0, 1000)
        self.bar.setTextVisible(False)
        self.bar.setFixedHeight(10)
        self.cancel_btn = QPushButton("Cancel")
        self.cancel_btn.setProperty("danger", True)
        self.cancel_btn.setEnabled(False)
        self.cancel_btn.clicked.connect(self.cancel)
        row.addWidget(self.bar, 1)
        row.addWidget(self.cancel_btn)
        lay.addLayout(row)
        self.stage = QLabel(idle_text)
        self.stage.setProperty("muted", True)
        self.stage.setWordWrap(True)
        lay.addWidget(self.stage)
        self._message = ""
        self._timer = QTimer(self)
        self._timer.setInterval(500)
        self._timer.timeout.connect(self._refresh)

    def bind(self, job: BackgroundJob) -> None:
        self.job = job
        self.bar.setValue(0)
        self._message = "starting…"
        self.cancel_btn.setEnabled(True)
        job.progress.connect(self._on_progress)
        job.ended.connect(self._on_ended)
        self._timer.start()
        self._refresh()

    def cancel(self) -> None:
        if self.job is not None and self.job.running():
            self.job.cancel()
            self.cancel_btn.setEnabled(False)
            self._message = "cancelling…"
            self._refresh()

    def finish(self, text: str) -> None:
        """Show how the job ended (the owner knows whether it succeeded)."""
        self.stage.setText(text)

    def _on_progress(self, fraction: float, message: str) -> None:
        self.bar.setValue(int(fraction * 1000))
        if self.job is not None and not self.job.cancel_event.is_set():
            self._message = message
        self._refresh()

    def _refresh(self) -> None:
        # once the worker is done the line belongs to the owner's finish() text, even while the
        # queued ended signal has not arrived yet (a timer tick may come first)
        if self.job is None or not self.job.running() or self.job.done:
            return
        eta = "" if self.job.cancel_event.is_set() else f" · {fmt_eta(self.job.eta_s())}"
        self.stage.setText(f"{self._message}{eta}")

    def _on_ended(self) -> None:
        self._timer.stop()
        self.cancel_btn.setEnabled(False)
        if self.job is not None and not self.job.cancel_event.is_set():
            self.bar.setValue(1000)
