"""Where the Benchmark page's serving runs go: this console's server, a connected server
(File > Connect to server) or any URL with its key. While it is on show, the status bar names
the server its numbers come from."""

from __future__ import annotations

from PySide6.QtWidgets import (
    QButtonGroup,
    QComboBox,
    QFormLayout,
    QHBoxLayout,
    QLineEdit,
    QRadioButton,
    QWidget,
)

from ..engines import LOCAL


class ServingTarget(QWidget):
    def __init__(self, ctx, parent=None):
        super().__init__(parent)
        self.ctx = ctx
        form = QFormLayout(self)
        form.setContentsMargins(0, 0, 0, 0)
        self.local = QRadioButton("This console's server")
        self.server = QRadioButton("Connected server")
        self.url = QRadioButton("URL")
        self.local.setChecked(True)
        group = QButtonGroup(self)
        row = QHBoxLayout()
        for b in (self.local, self.server, self.url):
            group.addButton(b)
            row.addWidget(b)
        row.addStretch(1)
        form.addRow(row)
        self.server_box = QComboBox()
        self.server_box.setPlaceholderText("none: File > Connect to server…")
        self.server_box.activated.connect(lambda _i: self.server.setChecked(True))
        form.addRow("Server", self.server_box)
        self.url_edit = QLineEdit()
        self.url_edit.setPlaceholderText("http://host:8000 (any OpenAI-compatible server)")
        self.url_edit.textChanged.connect(lambda t: t and self.url.setChecked(True))
        form.addRow("URL", self.url_edit)
        self.key_edit = QLineEdit()
        self.key_edit.setEchoMode(QLineEdit.Password)
        self.key_edit.setPlaceholderText("API key, if the server needs one")
        form.addRow("API key", self.key_edit)
        group.buttonToggled.connect(lambda _b, on: on and self._show_source())
        self.server_box.currentIndexChanged.connect(lambda _i: self._show_source())
        ctx.remote.changed.connect(self.refresh_servers)
        self.refresh_servers()

    def refresh_servers(self) -> None:
        conns = self.ctx.remote.connections()
        urls = [c.url for c in conns]
        if urls == [self.server_box.itemData(i) for i in range(self.server_box.count())]:
            return
        current = self.server_box.currentData()
        self.server_box.blockSignals(True)
        self.server_box.clear()
        for c in conns:
            self.server_box.addItem(f"{c.label} ({c.url})" if c.name else c.url, c.url)
        if current in urls:
            self.server_box.setCurrentIndex(urls.index(current))
        self.server_box.blockSignals(False)
        self.server.setEnabled(bool(conns))
        if self.server.isChecked() and not conns:
            self.local.setChecked(True)

    def select_server(self, url: str) -> None:
        i = self.server_box.findData(url)
        if i < 0:
            raise ValueError(f"{url} is not connected")
        self.server_box.setCurrentIndex(i)
        self.server.setChecked(True)

    def target_key(self) -> str:
        """LOCAL, or the connected server's URL (for the status bar)."""
        if self.server.isChecked() and self.server_box.currentData():
            return self.server_box.currentData()
        return LOCAL

    def resolve(self) -> tuple[str, str | None]:
        """(base URL, API key) of the run; ValueError says in one line what is missing."""
        if self.local.isChecked():
            service = self.ctx.server  # the service, not the Server page
            if not service.running() or not service.url:
                raise ValueError("This console's server is not running: start it on the Server "
                                 "page, or choose a URL.")
            return service.url, service.key()
        if self.server.isChecked():
            conn = self.ctx.engines.get(self.server_box.currentData() or "")
            if conn is None:
                raise ValueError("No server is connected: File > Connect to server…")
            return conn.url, conn.engine.api_key
        url = self.url_edit.text().strip()
        if not url.startswith(("http://", "https://")):
            raise ValueError("Enter the server's URL, starting with http:// or https://")
        return url, self.key_edit.text().strip() or None

    def _show_source(self) -> None:
        if self.isVisible():
            self.ctx.remote.set_focus(self.target_key())

    def showEvent(self, event) -> None:
        super().showEvent(event)
        self._show_source()

    def hideEvent(self, event) -> None:
        super().hideEvent(event)
        if self.ctx.remote.focus == self.target_key():
            self.ctx.remote.set_focus(None)
