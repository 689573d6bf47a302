"""The Server page's widgets, built in named parts (the page renders and forwards)."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QFont
from PySide6.QtWidgets import (
    QAbstractItemView,
    QCheckBox,
    QComboBox,
    QFormLayout,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QPushButton,
    QSpinBox,
    QTableWidget,
    QTableWidgetItem,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from ..engines import LOCAL
from ..gui_thread import post
from ..server_service import LOG_ROWS, log_cells
from ..theme import current_theme
from ..widgets.basic import Lamp, card, card_title, muted, page_title, titled_card
from ..widgets.server_advanced import ServerAdvanced


def header(page) -> QHBoxLayout:
    """The title, the server picker, the state lamp, the URL and Start / Stop."""
    head = QHBoxLayout()
    head.addWidget(page_title("Server"))
    head.addSpacing(12)
    # this console's own server, or a connected one shown read-only
    page.server_pick = QComboBox()
    page.server_pick.addItem("This console", LOCAL)
    page.server_pick.setMinimumWidth(160)
    head.addWidget(page.server_pick)
    head.addSpacing(12)
    page.lamp = Lamp("off")
    head.addWidget(page.lamp)
    page.state_label = QLabel("Stopped")
    head.addWidget(page.state_label)
    head.addStretch(1)
    page.url_label = QLabel("")
    page.url_label.setTextInteractionFlags(Qt.TextSelectableByMouse)
    page.url_label.setStyleSheet(f"color: {current_theme().color('accent')}; "
                                 "font-weight: 600;")
    head.addWidget(page.url_label)
    page.switch = QPushButton("Start server")
    page.switch.setProperty("primary", True)
    page.switch.setCheckable(True)
    page.switch.setMinimumWidth(130)
    page.switch.clicked.connect(page.toggle)
    head.addWidget(page.switch)
    return head


def settings_card(page, s) -> QWidget:
    """Host, port, API key, CORS, queue limit, autostart and the advanced options."""
    conf, cv = titled_card("Settings")
    form = QFormLayout()
    page.lan = QCheckBox("Listen on the local network (0.0.0.0)")
    page.lan.setChecked(s.value("server/lan", False, type=bool))
    page.lan_warning = QLabel("⚠ Anyone on your network can reach the engine: an API key "
                              "is required.")
    page.lan_warning.setWordWrap(True)
    page.lan_warning.setStyleSheet(f"color: {current_theme().color('warn')};")
    form.addRow("Host", page.lan)
    form.addRow("", page.lan_warning)
    prow = QHBoxLayout()
    page.port = QSpinBox()
    page.port.setRange(1, 65535)
    page.port.setValue(int(s.value("server/port", 8000)))
    page.port_status = muted("")
    prow.addWidget(page.port)
    prow.addWidget(page.port_status, 1)
    form.addRow("Port", prow)
    krow = QHBoxLayout()
    page.api_key = QLineEdit(page.service.api_key)  # the keyring or a 0600 file, never the INI
    page.api_key.setEchoMode(QLineEdit.Password)
    page.api_key.setPlaceholderText("none (loopback only)")
    page.show_key = QCheckBox("Show")
    page.show_key.toggled.connect(lambda on: page.api_key.setEchoMode(
        QLineEdit.Normal if on else QLineEdit.Password))
    page.show_key.toggled.connect(lambda _on: page.update_snippets())  # masked unless shown
    page.gen_key = QPushButton("Generate")
    page.gen_key.clicked.connect(page.generate_key)
    page.copy_key = QPushButton("Copy")
    page.copy_key.clicked.connect(lambda: page.copy(page.api_key.text()))
    for w in (page.api_key, page.show_key, page.gen_key, page.copy_key):
        krow.addWidget(w, 1 if w is page.api_key else 0)
    form.addRow("API key", krow)
    page.cors = QLineEdit(str(s.value("server/cors", "") or ""))
    page.cors.setPlaceholderText("e.g. http://localhost:3000 (comma-separated, * for any)")
    form.addRow("CORS origins", page.cors)
    page.max_queue = QSpinBox()
    page.max_queue.setRange(1, 100000)
    page.max_queue.setValue(int(s.value("server/max_queue", 256)))
    page.max_queue.setToolTip("Waiting requests beyond this get HTTP 429 (the engine's queue "
                              "limit, shared with Chat; applies at once, also while the "
                              "server runs)")
    page.max_queue.valueChanged.connect(page.apply_queue_limit)
    form.addRow("Max queue", page.max_queue)
    page.autostart = QCheckBox("Start the server when the console starts")
    page.autostart.setChecked(s.value("server/autostart", False, type=bool))
    page.autostart.toggled.connect(lambda on: s.setValue("server/autostart", on))
    form.addRow("", page.autostart)
    cv.addLayout(form)
    page.advanced = ServerAdvanced(s)  # serve's hardening options, folded away
    cv.addWidget(page.advanced)
    cv.addStretch(1)
    return conf


def snippets_card(page) -> QWidget:
    """curl and Python snippets for the running server."""
    snip, sv = titled_card("Use it")
    page.snippets = QTabWidget()
    mono = QFont("monospace")
    mono.setStyleHint(QFont.Monospace)
    page.curl_text = QPlainTextEdit()
    page.python_text = QPlainTextEdit()
    for edit, name in ((page.curl_text, "curl"), (page.python_text, "Python (openai)")):
        edit.setReadOnly(True)
        edit.setFont(mono)
        edit.setLineWrapMode(QPlainTextEdit.NoWrap)
        page.snippets.addTab(edit, name)
    sv.addWidget(page.snippets, 1)
    page.copy_snippet = QPushButton("Copy snippet")
    page.copy_snippet.setToolTip("Copies the snippet with the real API key")
    page.copy_snippet.clicked.connect(lambda: page.copy(page.snippet_text(reveal=True)))
    row = QHBoxLayout()
    row.addStretch(1)
    row.addWidget(page.copy_snippet)
    sv.addLayout(row)
    return snip


def log_card(page) -> QWidget:
    """The request log."""
    logc = card()
    lv = QVBoxLayout(logc)
    lv.setContentsMargins(16, 12, 16, 12)
    lrow = QHBoxLayout()
    lrow.addWidget(card_title("Request log"))
    lrow.addStretch(1)
    page.log_count = muted("")
    lrow.addWidget(page.log_count)
    clear = QPushButton("Clear")
    clear.clicked.connect(page.clear_log)
    lrow.addWidget(clear)
    lv.addLayout(lrow)
    page.log_table = QTableWidget(0, 7)
    page.log_table.setHorizontalHeaderLabels(["Time", "Route", "Status", "Model", "Tokens",
                                              "TTFT", "Duration"])
    hh = page.log_table.horizontalHeader()
    hh.setSectionResizeMode(QHeaderView.Stretch)
    hh.setSectionResizeMode(1, QHeaderView.ResizeToContents)
    hh.setMinimumSectionSize(90)
    page.log_table.verticalHeader().setVisible(False)
    page.log_table.setEditTriggers(QAbstractItemView.NoEditTriggers)
    page.log_table.setSelectionBehavior(QAbstractItemView.SelectRows)
    lv.addWidget(page.log_table, 1)
    page.log_empty = muted("Requests to the API appear here as they finish.")
    lv.addWidget(page.log_empty)
    return logc


def connect(page) -> None:
    """The settings' edits, the service's log entries and answers, and the engine's news."""
    ctx = page.ctx
    page.server_pick.currentIndexChanged.connect(lambda _i: page._show_pick())
    ctx.remote.changed.connect(page._servers_changed)
    page.lan.toggled.connect(page._settings_changed)
    page.api_key.textChanged.connect(page.service.set_key)
    page.api_key.textChanged.connect(page._settings_changed)
    page.port.valueChanged.connect(page._settings_changed)
    page.log_entry.connect(page._add_log_row)
    # the service announces on its threads; the page renders on the GUI thread
    page.service.events.subscribe("log_entry", lambda entry: post(page.log_entry.emit, entry))
    page.service.events.subscribe("state", lambda state: post(page.show_state, state))
    ctx.engine_host.models_changed.connect(lambda _m: page.update_snippets())
    ctx.engine_host.engine_ready.connect(page._on_engine_ready)


# ---------------------------------------------------------------------- rendering


def show_switch(page, on: bool, url: str) -> None:
    """Start / Stop as the server is, and its URL beside it."""
    page.switch.setChecked(on)
    page.switch.setText("Stop server" if on else "Start server")
    page.switch.setProperty("primary", not on)
    page.switch.setProperty("danger", on)
    page.switch.style().unpolish(page.switch)
    page.switch.style().polish(page.switch)
    page.url_label.setText(url if on else "")
    page.url_label.setToolTip(f"{url}/docs: the interactive API reference" if on else "")


def fill_servers(box: QComboBox, conns) -> None:
    """The server picker: this console, then each connected server (item data: its URL); the
    pick stays when its server still is, else this console. Unchanged servers: untouched."""
    if [c.url for c in conns] == [box.itemData(i) for i in range(1, box.count())]:
        return
    current = box.currentData()
    box.blockSignals(True)
    while box.count() > 1:
        box.removeItem(1)
    for c in conns:
        box.addItem(c.label, c.url)
    box.setCurrentIndex(max(0, box.findData(current)))
    box.blockSignals(False)


def add_log_row(page, entry) -> None:
    """A finished request on top of the log (the oldest falls off past LOG_ROWS)."""
    t = page.log_table
    if t.rowCount() >= LOG_ROWS:
        t.removeRow(t.rowCount() - 1)
    t.insertRow(0)
    for c, text in enumerate(log_cells(entry)):
        item = QTableWidgetItem(text)
        if c == 2 and entry.status >= 400:
            item.setToolTip(entry.error or "")
            item.setForeground(Qt.red)
        t.setItem(0, c, item)
    page.log_empty.hide()
    page.log_count.setText(f"{t.rowCount()} requests")
