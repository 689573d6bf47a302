"""Server: the OpenAI-compatible HTTP API over the console's own in-process engine.

A view of console.server_service.ServerService (ctx.server), which owns the server, its key and
the queue limit and starts / stops it on a worker thread; its answers and the request-log
entries arrive on other threads and cross to the GUI thread through queued signals.
"""

from __future__ import annotations

from PySide6.QtCore import QTimer, Signal
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QHBoxLayout, QLabel, QVBoxLayout

from ...engine.api.ports import port_problem
from ..engines import LOCAL
from ..server_service import ServerState
from ..theme import current_theme
from ..widgets.remote_server import RemoteServerView
from . import server_layout
from .base import Page
from .server_snippets import snippets

LOOPBACK, LAN = "127.0.0.1", "0.0.0.0"


class ServerPage(Page):
    page_id = "server"
    title = "Server"
    icon = "⇄"

    log_entry = Signal(object)  # RequestLogEntry, on the GUI thread

    def __init__(self, ctx, parent=None):
        super().__init__(ctx, parent)
        self.service = ctx.server
        self.shown = ServerState()  # the service's state this page last rendered
        self._busy = False
        self.error_text = ""
        s = ctx.settings

        root = QVBoxLayout(self)
        root.setContentsMargins(16, 12, 16, 12)
        root.setSpacing(10)
        root.addLayout(server_layout.header(self))
        self.message = QLabel("")
        self.message.setWordWrap(True)
        self.message.setObjectName("ServerMessage")
        self.message.hide()
        root.addWidget(self.message)

        top = QHBoxLayout()
        top.setSpacing(10)
        conf = server_layout.settings_card(self, s)
        top.addWidget(conf, 1)
        snip = server_layout.snippets_card(self)
        top.addWidget(snip, 1)
        root.addLayout(top)

        logc = server_layout.log_card(self)
        root.addWidget(logc, 1)
        self.remote_view = RemoteServerView()
        self.remote_view.hide()
        root.addWidget(self.remote_view, 1)
        self._local_parts = [self.lamp, self.state_label, self.url_label, self.switch, conf, snip,
                             logc]
        self._port_timer = QTimer(self)
        self._port_timer.setSingleShot(True)
        self._port_timer.setInterval(300)
        self._port_timer.timeout.connect(self.check_port)
        server_layout.connect(self)
        self._settings_changed()
        self._set_state("off", "Stopped")

    # ------------------------------------------------------------------ settings

    def host(self) -> str:
        return LAN if self.lan.isChecked() else LOOPBACK

    def _settings_changed(self) -> None:
        lan = self.lan.isChecked()
        self.lan_warning.setVisible(lan)
        self.api_key.setPlaceholderText("required on the network" if lan
                                        else "none (loopback only)")
        if not self.running():
            self.switch.setEnabled(not (lan and not self.api_key.text().strip()) and not self._busy)
            self.switch.setToolTip("Generate or enter an API key to listen on the network"
                                   if lan and not self.api_key.text().strip() else "")
            self._port_timer.start()
        self.update_snippets()

    def check_port(self) -> bool:
        """True when the port is free (a real bind attempt); shows the answer next to it."""
        if self.running():
            self.port_status.setText("")
            return True
        problem = port_problem(self.host(), self.port.value())
        self.port_status.setText(f"⚠ {problem}" if problem else "free")
        return problem is None

    @property
    def url(self) -> str | None:
        return self.service.url

    def generate_key(self) -> str:
        key = self.service.generate_key()
        self.api_key.setText(key)
        return key

    def copy(self, text: str) -> None:
        QGuiApplication.clipboard().setText(text)

    def _save_settings(self) -> None:
        s = self.ctx.settings
        s.setValue("server/lan", self.lan.isChecked())
        s.setValue("server/port", self.port.value())
        self.service.set_key(self.api_key.text(), save=True)
        s.setValue("server/cors", self.cors.text().strip())
        s.setValue("server/max_queue", self.max_queue.value())
        self.advanced.save()

    # ------------------------------------------------------------------ snippets

    def base_url(self) -> str:
        if self.url:
            return self.url
        return f"http://127.0.0.1:{self.port.value()}"

    def model_name(self) -> str:
        models = self.ctx.engine_host.models()
        return models[0].name if models else "MODEL"

    def snippet_text(self, reveal: bool = False) -> str:
        """The current tab's snippet; the key masked unless `reveal` or Show is ticked."""
        curl, python = snippets(self.base_url(), self.model_name(), self.api_key.text().strip(),
                                self.lan.isChecked(), reveal or self.show_key.isChecked())
        return curl if self.snippets.currentWidget() is self.curl_text else python

    def update_snippets(self) -> None:
        curl, python = snippets(self.base_url(), self.model_name(), self.api_key.text().strip(),
                                self.lan.isChecked(), self.show_key.isChecked())
        self.curl_text.setPlainText(curl)
        self.python_text.setPlainText(python)

    # ------------------------------------------------------------------ start / stop

    def running(self) -> bool:
        """Running as this page shows it: never while it shows a start or a stop under way."""
        return self.shown.phase not in ("starting", "stopping") and self.service.running()

    def busy(self) -> bool:
        return self._busy or self.shown.phase in ("starting", "stopping")

    def toggle(self) -> None:
        if self.running():
            self.stop()
        else:
            self.start()

    def start(self) -> bool:
        """Ask the service to start; False (with a message) when it cannot."""
        if self.busy() or self.running():
            return False
        problem = self.service.start_problem(self.host())
        if problem:
            self._show_error(problem)
            return False
        self._save_settings()
        self.apply_queue_limit()
        problem = self.service.start(self.host(), self.port.value(), self.cors.text(),
                                     self.advanced.options())
        if problem:
            self._show_error(problem)
            return False
        self._set_busy(True, "Starting…")
        return True

    def stop(self) -> bool:
        if self.busy() or not self.running():
            return False
        if not self.service.stop():
            return False
        self._set_busy(True, "Stopping…")
        return True

    def apply_queue_limit(self) -> None:
        """The queue limit goes to the engine through the service (also while the server
        runs); the setting is kept for the next start."""
        self.service.set_queue_limit(self.max_queue.value())
        self.ctx.settings.setValue("server/max_queue", self.max_queue.value())

    def _set_busy(self, busy: bool, text: str = "") -> None:
        self._busy = busy
        for w in (self.lan, self.port, self.api_key, self.gen_key, self.cors):
            w.setEnabled(not busy and not self.running())
        self.advanced.set_editable(not busy and not self.running())
        self.switch.setEnabled(not busy)
        if busy:
            self._set_state("busy", text)

    def show_state(self, state: ServerState) -> None:
        """Render the service's state (its "state" event, posted to the GUI thread)."""
        self.shown = state
        if state.phase in ("starting", "stopping"):
            self._set_busy(True, "Starting…" if state.phase == "starting" else "Stopping…")
            return
        self._set_busy(False)
        if state.phase == "failed":
            self._show_error(state.error if state.op == "start"
                             else f"Stopping failed: {state.error}")
            self._set_state("error", "Not running")
        elif state.phase == "running":
            self.message.hide()
            self.error_text = ""
            self._set_state("on", f"Running · {state.url}")
        else:
            self._set_state("off", "Stopped")
        server_layout.show_switch(self, self.running(), state.url or "")
        self._set_busy(False)
        self._settings_changed()
        self.port_status.setText("")

    def _show_error(self, text: str) -> None:
        self.error_text = text
        self.message.setText(f"⚠ {text}")
        self.message.setStyleSheet(f"color: {current_theme().color('bad')}; font-weight: 600;")
        self.message.show()
        self.switch.setChecked(self.running())

    def _set_state(self, state: str, text: str) -> None:
        self.lamp.set_state(state, text)
        self.state_label.setText(text.split(" · ")[0])
        lamp_text = {"on": f"server on · {self.url}" if self.url else "server on",
                     "off": "server off", "busy": text.lower(), "error": "server error"}[state]
        self.ctx.server_state_changed.emit(state, lamp_text)

    def _on_engine_ready(self, _engine) -> None:
        self.apply_queue_limit()
        if self.autostart.isChecked() and not self.running():
            self.start()

    # ------------------------------------------------------------------ connected servers

    def _servers_changed(self) -> None:
        server_layout.fill_servers(self.server_pick, self.ctx.remote.connections())
        self._show_pick()

    def select_server(self, url: str | None) -> None:
        """Show this console's server (None) or a connected one's state."""
        i = self.server_pick.findData(url or LOCAL)
        if i < 0:
            raise ValueError(f"{url} is not connected")
        self.server_pick.setCurrentIndex(i)

    def _show_pick(self) -> None:
        conn = self.ctx.engines.get(self.server_pick.currentData() or "")
        for w in self._local_parts:
            w.setVisible(conn is None)
        self.remote_view.setVisible(conn is not None)
        if conn is not None:
            self.remote_view.show_connection(conn)
        if self.isVisible():
            self.ctx.remote.set_focus(conn.url if conn is not None else None)

    def activated(self) -> None:
        self._show_pick()

    # ------------------------------------------------------------------ request log

    def _add_log_row(self, e) -> None:
        server_layout.add_log_row(self, e)

    def clear_log(self) -> None:
        self.log_table.setRowCount(0)
        self.log_count.setText("")
        self.log_empty.show()
        self.service.clear_log()

    def log_rows(self) -> list[list[str]]:
        t = self.log_table
        return [[t.item(r, c).text() if t.item(r, c) else "" for c in range(t.columnCount())]
                for r in range(t.rowCount())]

    def shutdown(self) -> None:
        self.service.shutdown()
