"""The Server page's Advanced group: the API hardening options `serve` takes on its command line
(--allowed-hosts, --request-timeout, --header-timeout, --body-timeout, --limit-concurrency,
--expose-paths), folded away under a toggle, kept in the console's settings and handed to
ServerService.start as an AdvancedOptions. They apply when the server starts, so the page makes
them read-only while it runs."""

from __future__ import annotations

import dataclasses

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QCheckBox,
    QDoubleSpinBox,
    QFormLayout,
    QFrame,
    QLineEdit,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from ..server_service import AdvancedOptions
from .basic import fold_toggle, muted

KEYS = {  # AdvancedOptions field -> settings key
    "allowed_hosts": "server/allowed_hosts",
    "request_timeout_s": "server/request_timeout_s",
    "header_timeout_s": "server/header_timeout_s",
    "body_timeout_s": "server/body_timeout_s",
    "limit_concurrency": "server/limit_concurrency",
    "expose_paths": "server/expose_paths",
}


def _seconds(low: float, high: float, tip: str) -> QDoubleSpinBox:
    box = QDoubleSpinBox()
    box.setRange(low, high)
    box.setDecimals(1)
    box.setSuffix(" s")
    box.setToolTip(tip)
    return box


class ServerAdvanced(QWidget):
    def __init__(self, settings, parent=None):
        super().__init__(parent)
        self._settings = settings
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 4, 0, 0)
        lay.setSpacing(4)
        self.toggle = fold_toggle("Host check, timeouts and limits of the API server")
        lay.addWidget(self.toggle, 0, Qt.AlignLeft)

        self.body = QFrame()
        self.body.setObjectName("ServerAdvanced")
        form = QFormLayout(self.body)
        form.setContentsMargins(12, 0, 0, 0)
        self.allowed_hosts = QLineEdit()
        self.allowed_hosts.setPlaceholderText("loopback names on 127.0.0.1, any on the network")
        self.allowed_hosts.setToolTip(
            "Host headers the server answers, comma-separated (* for any): a web page whose "
            "name resolves to this machine cannot drive the API (--allowed-hosts)")
        form.addRow("Allowed hosts", self.allowed_hosts)
        self.request_timeout = _seconds(
            0, 86_400, "Cancel a request still running after this long: 504, or an error event "
                       "in a stream (--request-timeout)")
        self.request_timeout.setSpecialValueText("none")
        form.addRow("Request timeout", self.request_timeout)
        self.header_timeout = _seconds(
            0.5, 3600, "Close a connection whose request headers take longer (--header-timeout)")
        form.addRow("Header timeout", self.header_timeout)
        self.body_timeout = _seconds(
            0.5, 3600, "Answer 408 to a request body that stalls this long (--body-timeout)")
        form.addRow("Body timeout", self.body_timeout)
        self.limit_concurrency = QSpinBox()
        self.limit_concurrency.setRange(1, 1_000_000)
        self.limit_concurrency.setToolTip(
            "Open connections and requests beyond which new ones get 503 (--limit-concurrency)")
        form.addRow("Connection limit", self.limit_concurrency)
        self.expose_paths = QCheckBox("Show model folders' paths in /v1/models")
        self.expose_paths.setToolTip("Off: clients see model ids only (--expose-paths)")
        form.addRow("", self.expose_paths)
        self.note = muted("Applied when the server starts.")
        form.addRow("", self.note)
        lay.addWidget(self.body)
        self.toggle.toggled.connect(self._show)
        self.set_options(self.stored())
        self._show(False)

    def _show(self, on: bool) -> None:
        self.toggle.setText(("▾ " if on else "▸ ") + "Advanced")
        self.body.setVisible(on)

    def set_expanded(self, on: bool) -> None:
        self.toggle.setChecked(on)

    def set_editable(self, on: bool) -> None:
        """Editable while the server is stopped (the options apply at its start)."""
        self.body.setEnabled(on)
        self.note.setText("Applied when the server starts." if on else
                          "Applied when the server starts: stop it to change them.")

    # ------------------------------------------------------------------ values
    def options(self) -> AdvancedOptions:
        return AdvancedOptions(
            allowed_hosts=self.allowed_hosts.text().strip(),
            request_timeout_s=self.request_timeout.value(),
            header_timeout_s=self.header_timeout.value(),
            body_timeout_s=self.body_timeout.value(),
            limit_concurrency=self.limit_concurrency.value(),
            expose_paths=self.expose_paths.isChecked())

    def set_options(self, o: AdvancedOptions) -> None:
        self.allowed_hosts.setText(o.allowed_hosts)
        self.request_timeout.setValue(o.request_timeout_s)
        self.header_timeout.setValue(o.header_timeout_s)
        self.body_timeout.setValue(o.body_timeout_s)
        self.limit_concurrency.setValue(o.limit_concurrency)
        self.expose_paths.setChecked(o.expose_paths)

    def stored(self) -> AdvancedOptions:
        """The options kept in the settings (serve's defaults for those never set, or set to
        something unreadable: a hand-edited INI must not keep the page from opening)."""
        values = {}
        for f in dataclasses.fields(AdvancedOptions):
            raw = self._settings.value(KEYS[f.name], f.default)
            try:
                if raw is None or (raw == "" and f.type != "str"):
                    value = f.default
                elif f.type == "bool":
                    value = raw if isinstance(raw, bool) else \
                        str(raw).strip().lower() in ("true", "1")
                else:
                    value = {"str": str, "float": float, "int": int}[f.type](raw)
            except (TypeError, ValueError):
                value = f.default
            values[f.name] = value
        return AdvancedOptions(**values)

    def save(self) -> None:
        for name, value in dataclasses.asdict(self.options()).items():
            self._settings.setValue(KEYS[name], value)
