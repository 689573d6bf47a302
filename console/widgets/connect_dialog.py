"""File > Connect to server: the URL and API key of a headless `npu-console serve` (or any
OpenAI-compatible server), a Test that asks /health and /v1/models off the GUI thread, and
Connect, which tests too and attaches the console to the server when it answers."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QCheckBox,
    QCompleter,
    QDialog,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QVBoxLayout,
)

from ..jobs import BackgroundJob
from ..theme import current_theme
from .basic import muted


class ConnectDialog(QDialog):
    def __init__(self, ctx, parent=None):
        super().__init__(parent)
        self.ctx = ctx
        self.setWindowTitle("Connect to server")
        self.setMinimumWidth(520)
        self.job: BackgroundJob | None = None
        self.result = None  # the last ProbeResult
        self._connect_after = False
        lay = QVBoxLayout(self)
        intro = muted("Attach to a headless <code>npu-console serve</code> (or any "
                      "OpenAI-compatible server): its models join the Chat and Benchmark "
                      "pages, labelled with its host.")
        intro.setTextFormat(Qt.RichText)
        intro.setWordWrap(True)
        lay.addWidget(intro)
        form = QFormLayout()
        self.url_edit = QLineEdit()
        self.url_edit.setPlaceholderText("http://10.0.0.5:8000")
        saved = ctx.remote.servers.list()
        self.url_edit.setCompleter(QCompleter([s.url for s in saved], self))
        form.addRow("URL", self.url_edit)
        self.name_edit = QLineEdit()
        self.name_edit.setPlaceholderText("optional: shown instead of host:port")
        form.addRow("Name", self.name_edit)
        krow = QHBoxLayout()
        self.key_edit = QLineEdit()
        self.key_edit.setEchoMode(QLineEdit.Password)
        self.key_edit.setPlaceholderText("the key the server was started with (--api-key)")
        self.show_key = QCheckBox("Show")
        self.show_key.toggled.connect(lambda on: self.key_edit.setEchoMode(
            QLineEdit.Normal if on else QLineEdit.Password))
        krow.addWidget(self.key_edit, 1)
        krow.addWidget(self.show_key)
        form.addRow("API key", krow)
        self.remember = QCheckBox("Remember this server (File > Servers); the key goes to "
                                  "the keyring or a private file")
        self.remember.setChecked(True)
        form.addRow("", self.remember)
        lay.addLayout(form)
        self.result_label = QLabel("")
        self.result_label.setWordWrap(True)
        self.result_label.setTextInteractionFlags(Qt.TextSelectableByMouse)
        lay.addWidget(self.result_label)
        brow = QHBoxLayout()
        brow.addStretch(1)
        self.test_btn = QPushButton("Test")
        self.connect_btn = QPushButton("Connect")
        self.connect_btn.setProperty("primary", True)
        self.connect_btn.setDefault(True)
        self.cancel_btn = QPushButton("Cancel")
        for b in (self.test_btn, self.connect_btn, self.cancel_btn):
            brow.addWidget(b)
        lay.addLayout(brow)
        self.test_btn.clicked.connect(lambda: self.test())
        self.connect_btn.clicked.connect(lambda: self.test(connect=True))
        self.cancel_btn.clicked.connect(self.reject)
        self.url_edit.editingFinished.connect(self._fill_saved)
        if saved:  # the most recent one, ready to reconnect
            self.url_edit.setText(saved[0].url)
            self._fill_saved()

    def _fill_saved(self) -> None:
        """A remembered URL brings its name and key back."""
        url = self.url_edit.text().strip()
        try:
            saved = self.ctx.remote.servers.get(url)
        except ValueError:
            return
        if saved is not None:
            self.name_edit.setText(saved.name)
            self.key_edit.setText(self.ctx.remote.servers.key(url))

    def busy(self) -> bool:
        return self.job is not None and self.job.running()

    def test(self, connect: bool = False) -> BackgroundJob | None:
        """Ask the server (on a worker thread); with `connect`, attach when it answers."""
        if self.busy():
            return None
        from ...engine.remote.probe import probe_server

        url, key = self.url_edit.text().strip(), self.key_edit.text().strip()
        self._connect_after = connect
        self.result = None
        self._show("Asking the server…", "muted")
        for b in (self.test_btn, self.connect_btn):
            b.setEnabled(False)
        self.job = BackgroundJob(lambda _r: probe_server(url, key), "probe-server", parent=self)
        self.job.finished.connect(self._on_result)
        self.job.failed.connect(lambda msg: self._show(f"⚠ {msg}", "bad"))
        self.job.ended.connect(lambda: [b.setEnabled(True) for b in (self.test_btn,
                                                                    self.connect_btn)])
        return self.job.start()

    def _on_result(self, result) -> None:
        self.result = result
        if not result.ok:
            self._show(f"⚠ {result.summary()}", "bad")
            return
        self._show(f"✓ {result.url}: {result.summary()}", "ok")
        if self._connect_after:
            self.ctx.remote.connect_server(result.url, self.key_edit.text(),
                                           self.name_edit.text(), self.remember.isChecked())
            self.accept()

    def _show(self, text: str, tone: str) -> None:
        self.result_label.setStyleSheet(f"color: {current_theme().color(tone)};")
        self.result_label.setText(text)
