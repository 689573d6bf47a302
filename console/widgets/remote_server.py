"""The Server page's read-only view of a connected server: where it is, whether the console
reaches it and sends a key, its queue and rates, and the models it serves. Drawn from what the
console last read from it (console.engines.Connection), never from the network directly."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QAbstractItemView,
    QFormLayout,
    QHeaderView,
    QLabel,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from ..theme import current_theme
from .basic import Lamp, muted, titled_card

HEADERS = ["Model", "Architecture", "Type", "Quantization", "Context", "Device"]


class RemoteServerView(QWidget):
    def __init__(self, parent=None):
        super().__init__(parent)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.setSpacing(10)
        info, iv = titled_card("Connected server (read-only)")
        form = QFormLayout()
        self.lamp = Lamp("off")
        self.state = QLabel("")
        self.fields: dict[str, QLabel] = {}
        form.addRow(self.lamp, self.state)
        for name in ("URL", "Name", "API key", "Queue", "Throughput", "Requests", "Last error"):
            label = QLabel("")
            label.setTextInteractionFlags(Qt.TextSelectableByMouse)
            label.setWordWrap(True)
            self.fields[name] = label
            form.addRow(name, label)
        iv.addLayout(form)
        note = muted("Start, stop and its settings belong to the server's own host "
                     "(npu-console serve); this console sends it chats and benchmarks.")
        note.setWordWrap(True)
        iv.addWidget(note)
        lay.addWidget(info)
        models, mv = titled_card("Models it serves")
        self.table = QTableWidget(0, len(HEADERS))
        self.table.setHorizontalHeaderLabels(HEADERS)
        self.table.horizontalHeader().setSectionResizeMode(QHeaderView.Stretch)
        self.table.verticalHeader().setVisible(False)
        self.table.setEditTriggers(QAbstractItemView.NoEditTriggers)
        mv.addWidget(self.table, 1)
        lay.addWidget(models, 1)

    def show_connection(self, conn) -> None:
        f = self.fields
        s = conn.stats
        if not conn.refreshed:
            self.lamp.set_state("busy", "connecting")
            self.state.setText("Connecting…")
        elif conn.error:
            self.lamp.set_state("error", conn.error)
            self.state.setText("Unreachable")
        else:
            self.lamp.set_state("on", "answering")
            self.state.setText(f"Reachable · {s.state if s is not None else 'ready'}")
        self.state.setStyleSheet(f"color: {current_theme().color('bad')};" if conn.error else "")
        f["URL"].setText(conn.url)
        f["Name"].setText(conn.name or "–")
        f["API key"].setText("sent (kept in the keyring or a private file)" if conn.keyed
                             else "none")
        if s is not None:
            f["Queue"].setText(f"running {s.running} · waiting {s.waiting}")
            f["Throughput"].setText(f"{s.generation_tokens_per_s:.1f} tok/s generated · "
                                    f"{s.prompt_tokens_per_s:.1f} tok/s prompt")
            f["Requests"].setText(f"{s.requests_finished} finished · {s.requests_failed} failed")
        f["Last error"].setText(conn.error or (s.last_error if s is not None and s.last_error
                                               else "–"))
        self.table.setRowCount(len(conn.models))
        for r, m in enumerate(conn.models):
            cells = (m.name, m.architecture, m.dtype, m.quantization or "–",
                     f"{m.max_context:,}" if m.max_context else "–",
                     m.device.removeprefix(f"remote {conn.url}").strip(" ()") or "–")
            for c, text in enumerate(cells):
                self.table.setItem(r, c, QTableWidgetItem(text))

    def rows(self) -> list[list[str]]:
        t = self.table
        return [[t.item(r, c).text() if t.item(r, c) else "" for c in range(t.columnCount())]
                for r in range(t.rowCount())]
