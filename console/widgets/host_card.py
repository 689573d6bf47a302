"""The dashboard's fleet strip: one card per host ("this machine" first, then each attached
server) with its state, its chips summed up and its engine; a click picks whose chips the
dashboard shows."""

from __future__ import annotations

import time

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QFrame,
    QGraphicsOpacityEffect,
    QHBoxLayout,
    QLabel,
    QScrollArea,
    QVBoxLayout,
    QWidget,
)

from ...engine.remote.fleet import chip_summary
from .basic import Badge, Lamp, card_title, fmt_mb, fmt_num, muted
from .device_card import SelectableCard, _mem_label, health_kind

LOCAL = ""  # the key of "this machine"
_LAMP = {"up": "on", "connecting": "busy", "unreachable": "error", "unauthorized": "error"}
CARD_WIDTH = 268


class HostCard(SelectableCard):
    """One host. `key` is the server's URL, or LOCAL for this machine."""

    def __init__(self, key: str, parent=None):
        super().__init__(key, clickable=True, parent=parent)
        self.state = "connecting"
        self.setObjectName("HostCard")
        self.setProperty("card", True)
        self.setFixedWidth(CARD_WIDTH)
        self.setCursor(Qt.PointingHandCursor)
        self.setToolTip("Click to show this host's chips")
        lay = QVBoxLayout(self)
        lay.setContentsMargins(10, 8, 10, 8)
        lay.setSpacing(2)
        head = QHBoxLayout()
        head.setSpacing(6)
        self.lamp = Lamp("off")
        self.title = card_title("this machine" if key == LOCAL else key)
        self.health = Badge("", "none")
        head.addWidget(self.lamp)
        head.addWidget(self.title, 1)
        head.addWidget(self.health)
        lay.addLayout(head)
        self.subtitle = muted("")
        lay.addWidget(self.subtitle)
        # the numbers fade when the host is lost (last known values, greyed); the note does not
        self.body = QWidget()
        self.body.setStyleSheet("background: transparent;")  # the card's own panel shows
        body = QVBoxLayout(self.body)
        body.setContentsMargins(0, 2, 0, 0)
        body.setSpacing(2)
        self.chips = QLabel("–")
        self.engine = QLabel("–")
        body.addWidget(self.chips)
        body.addWidget(self.engine)
        lay.addWidget(self.body)
        self.fade = QGraphicsOpacityEffect(self.body)
        self.fade.setOpacity(1.0)
        self.body.setGraphicsEffect(self.fade)
        self.note = muted("")
        self.note.setWordWrap(True)
        lay.addWidget(self.note)
        self.retry_at: float | None = None

    # ------------------------------------------------------------------ content
    def show_local(self, telemetry, stats, alerts: int, source: str) -> None:
        """This machine: the local poller's snapshot and the local engine's stats."""
        self.state = "up"
        self.retry_at = None
        self.lamp.set_state("on", "this console's own telemetry and engine")
        self.subtitle.setText(source)
        self._numbers(telemetry, stats, alerts)
        self.fade.setOpacity(1.0)
        self.note.setVisible(False)

    def show_host(self, snap) -> None:
        """A server: engine.remote.fleet.HostSnapshot."""
        self.state = snap.state
        self.title.setText(snap.label)
        self.title.setToolTip(snap.url)
        where = snap.url.split("://", 1)[-1]
        self.subtitle.setText(where + (f" · {snap.source}" if snap.source else ""))
        self.lamp.set_state(_LAMP.get(snap.state, "off"), f"{snap.state}: {snap.error or 'ok'}")
        self._numbers(snap.telemetry, snap.engine, len(snap.alerts))
        self.retry_at = snap.retry_at if snap.state in ("unreachable", "unauthorized") else None
        self.fade.setOpacity(1.0 if snap.state == "up" else 0.4)
        self.note.setToolTip(snap.error or "")
        self.tick()

    def tick(self, now: float | None = None) -> None:
        """Refresh the countdown of a lost host's next try (the dashboard calls it at 2 Hz)."""
        if self.state == "up":
            self.note.setVisible(False)
            return
        if self.state == "connecting":
            text = "connecting…"
        else:
            wait = "" if self.retry_at is None else \
                f", retrying in {max(0.0, self.retry_at - (now or time.time())):.0f} s"
            text = ("unreachable" if self.state == "unreachable" else "API key refused") + wait
        self.note.setText(text)
        self.note.setVisible(True)

    def _numbers(self, telemetry, stats, alerts: int) -> None:
        s = chip_summary(telemetry)
        if s is None:
            self.health.set("no chips" if telemetry is not None else "", "none")
            if telemetry is not None:
                self.chips.setText("no accelerator telemetry")
            else:
                # a server with /metrics but no telemetry endpoint (vLLM, MindIE): its engine
                # numbers are all there is to show
                self.chips.setText("engine only (no telemetry endpoint)" if stats is not None
                                   else "–")
        else:
            names = sorted({d.name for d in telemetry.accelerators})
            self.health.set(f"{s.chips} × {s.worst_health or 'N/A'}",
                            health_kind(s.worst_health))
            mem = (f"{fmt_mb(s.mem_used_mb)} / {fmt_mb(s.mem_total_mb)}"
                   if s.mem_total_mb else "N/A")
            label = _mem_label(telemetry.accelerators[0])  # HBM, or a 310's DDR "Memory"
            self.chips.setText(
                f"{', '.join(names)} · AI Core {fmt_num(s.util_pct, '{:.0f}', ' %')}\n"
                f"{label} {mem} · {fmt_num(s.power_w, '{:.0f}', ' W')}")
        alert_text = f" · {alerts} alert{'s' if alerts != 1 else ''}" if alerts else ""
        if stats is None:
            self.engine.setText("engine: –" + alert_text)
        else:
            self.engine.setText(
                f"{stats.generation_tokens_per_s:.1f} tok/s · {stats.running} running · "
                f"{stats.waiting} queued{alert_text}")
        self.engine.setToolTip(", ".join(stats.models) if stats is not None else "")


class HostStrip(QScrollArea):
    """The cards side by side, scrolling sideways past a few; `chosen(key)` on a click."""

    chosen = Signal(str)

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setWidgetResizable(True)
        self.setFrameShape(QFrame.NoFrame)
        self.setVerticalScrollBarPolicy(Qt.ScrollBarAlwaysOff)
        inner = QWidget()
        self.row = QHBoxLayout(inner)
        self.row.setContentsMargins(0, 0, 0, 0)
        self.row.setSpacing(8)
        self.row.addStretch(1)
        self.setWidget(inner)
        self.cards: dict[str, HostCard] = {}
        self.card(LOCAL)

    def card(self, key: str) -> HostCard:
        """The card of `key`, made (at the end of the row) on first use."""
        card = self.cards.get(key)
        if card is None:
            card = HostCard(key)
            card.clicked.connect(self.chosen)
            self.cards[key] = card
            self.row.insertWidget(self.row.count() - 1, card)
            # room for one card and the sideways scroll bar a long row shows
            self.setFixedHeight(card.sizeHint().height() + 16)
        return card

    def remove(self, key: str) -> None:
        card = self.cards.pop(key, None)
        if card is not None:
            self.row.removeWidget(card)
            card.hide()
            card.deleteLater()

    def select(self, key: str) -> None:
        for k, card in self.cards.items():
            card.set_selected(k == key)

    def tick(self) -> None:
        now = time.time()
        for card in self.cards.values():
            card.tick(now)
