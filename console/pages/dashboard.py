"""Dashboard: a card per chip (or GPU, or the host CPU), device history, alerts, engine plots.

With servers attached (ctx.fleet) a strip of host cards sits on top: this machine and each
server, a click shows that host's chips, history and engine (console/pages/dashboard_fleet.py).
"""

from __future__ import annotations

import math

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QFileDialog, QMessageBox

from ..engines import host_label
from ..widgets.basic import Banner, discard
from ..widgets.device_card import DeviceCard
from . import dashboard_layout as layout
from .base import Page

WINDOWS = (("1 min", 60), ("5 min", 300), ("15 min", 900), ("60 min", 3600))
METRICS = (("AI Core / util %", "util_pct", "host:cpu_pct"), ("Memory %", "mem_pct", "host:mem_pct"),
           ("Temperature °C", "temp_c", None), ("Power W", "power_w", None))
REDRAW_MS = 500  # 2 Hz: plots are the costliest paint on a software rasteriser
CARD_COLUMNS = 2


class DashboardPage(Page):
    page_id = "dashboard"
    title = "Dashboard"
    icon = "▦"

    def __init__(self, ctx, parent=None):
        super().__init__(ctx, parent)
        self.cards: dict[str, DeviceCard] = {}
        self.banners: dict[str, Banner] = {}
        self.dismissed: set[str] = set()
        self.last_snapshot = None  # the snapshot on show (this machine's or a server's)
        self.local_snapshot = None  # this machine's latest
        self.local_source = "not started"
        layout.build(self, WINDOWS, METRICS)

        self.timer = QTimer(self)
        self.timer.setInterval(REDRAW_MS)
        self.timer.timeout.connect(self.redraw)

        layout.connect(self)
        saved = int(ctx.settings.value("dashboard/window_s", 300))
        idx = max(0, next((i for i, (_l, s) in enumerate(WINDOWS) if s == saved), 1))
        self.window_box.setCurrentIndex(idx)
        self.on_window(idx)
        self.on_source(ctx.telemetry.description)

    # ------------------------------------------------------------------ telemetry

    def on_source(self, text: str) -> None:
        """This machine's telemetry source changed (live, a replay): back to its chips."""
        self.local_source = text
        self.live_btn.setEnabled(text.startswith("replay"))
        self.local_snapshot = None
        if self.fleet.view:
            self.fleet.view_host("")  # clears the cards and says where the numbers come from
        else:
            self.clear_chips()
            self.fleet.show_source()

    def clear_chips(self) -> None:
        for key in list(self.cards):
            discard(self.cards.pop(key))
        self.history.clear_series()
        self.last_snapshot = None
        if self.drawer.isVisible():
            self.drawer.close_drawer()

    def on_snapshot(self, snap) -> None:
        """A sample of this machine's poller: drawn when this machine is the host on show."""
        self.local_snapshot = snap
        self.fleet.local_changed()
        if not self.fleet.view:
            self.show_chips(snap)

    def show_chips(self, snap) -> None:
        """Draw `snap`'s chips (this machine's or a server's) in the cards."""
        self.last_snapshot = snap
        accel = snap.accelerators
        keys = [d.key for d in accel] if accel else (["cpu"] if snap.host else [])
        if list(self.cards) != keys:
            self._rebuild_cards(keys)
        # the history's first metric is what the cards show: chips' AI Core / util, or the CPU
        self.metric_box.setItemText(0, METRICS[0][0] if accel else "CPU util %")
        for dev in accel:
            self.cards[dev.key].show_device(dev)
            if dev.key == self.drawer.key:
                self.drawer.show_device(dev)
        if not accel and snap.host is not None:
            server = host_label(self.fleet.view) if self.fleet.view else ""
            self.cards["cpu"].show_host(snap.host, snap.processes, server)
        if snap.error is not None and not accel:
            self.empty.setText(f"No device data: {snap.error.message}")
            self.empty.setVisible(True)
        else:
            self.empty.setVisible(not keys)

    def _rebuild_cards(self, keys: list[str]) -> None:
        for card in self.cards.values():
            discard(card)
        self.cards.clear()
        cols = CARD_COLUMNS if len(keys) <= 8 else 3
        if self.drawer.key is not None and self.drawer.key not in keys:
            self.drawer.close_drawer()
        for i, key in enumerate(keys):
            card = DeviceCard(key)
            card.clicked.connect(self.open_drawer)
            card.set_selected(key == self.drawer.key)
            self.cards[key] = card
            self.cards_grid.addWidget(card, i // cols, i % cols)
        self.cards_grid.setRowStretch(math.ceil(len(keys) / cols), 1)
        self._rebuild_history()

    def open_drawer(self, key: str) -> None:
        """Show one chip's details beside the cards (a second click on its card closes them)."""
        snap = self.last_snapshot
        dev = snap.device(key) if snap is not None else None
        if dev is None or (self.drawer.isVisible() and self.drawer.key == key):
            self.drawer.close_drawer()
            return
        self.drawer.show_device(dev)
        for k, card in self.cards.items():
            card.set_selected(k == key)
        if not self.drawer.isVisible():
            self.drawer.show()
            left, _drawer, right = self.split.sizes()  # the cards keep their width
            width = 300
            self.split.setSizes([max(440, left - 30), width, max(300, right - width + 30)])
        self.drawer.setFocus()

    def _drawer_closed(self) -> None:
        for card in self.cards.values():
            card.set_selected(False)

    def _history_keys(self) -> list[tuple[str, str]]:
        """(series name, poller history key) for the chosen metric."""
        _label, metric, host_key = METRICS[self.metric_box.currentIndex()]
        if self.cards and "cpu" not in self.cards:
            return [(key, f"{key}:{metric}") for key in self.cards]
        return [("host", host_key)] if host_key else []

    def _rebuild_history(self) -> None:
        self.history.clear_series()
        keys = self._history_keys()
        for i, (name, _key) in enumerate(keys):
            self.history.add_series(name, i)
        self.history.set_legend_columns(1 if len(keys) <= 4 else 4)
        self.redraw()

    def on_alert(self, alert) -> None:
        key = f"{alert.rule}:{alert.subject}"
        if alert.state == "cleared":
            banner = self.banners.pop(key, None)
            if banner is not None:
                discard(banner)
            self.dismissed.discard(key)
            return
        if key in self.dismissed:
            return
        level = "critical" if alert.severity in ("critical", "error") else (
            "info" if alert.state == "event" or alert.severity == "info" else "warning")
        text = f"{alert.subject}: {alert.message}"
        if key in self.banners:
            self.banners[key].update_alert(text, level)
            return
        banner = Banner(key, text, level)
        banner.dismissed.connect(self._dismiss)
        self.banners[key] = banner
        self.banner_box.addWidget(banner)
        banner.setVisible(not self.fleet.view)  # this machine's alert: hidden over a server's chips

    def _dismiss(self, key: str) -> None:
        self.dismissed.add(key)
        banner = self.banners.pop(key, None)
        if banner is not None:
            discard(banner)

    # ------------------------------------------------------------------ controls

    def on_window(self, index: int) -> None:
        seconds = WINDOWS[index][1]
        self.history.window_s = seconds
        self.engine_panel.set_window(seconds)
        self.ctx.settings.setValue("dashboard/window_s", seconds)
        self.redraw()

    def choose_replay(self) -> None:
        dialog = QFileDialog(self, "Replay npu-smi captures")
        dialog.setFileMode(QFileDialog.ExistingFiles)
        dialog.setNameFilters(["npu-smi captures (*.txt *.log)", "All files (*)"])
        dialog.filesSelected.connect(self.start_replay)
        dialog.open()
        self._dialog = dialog  # keep a reference; tests find and drive it

    def choose_replay_folder(self) -> None:
        dialog = QFileDialog(self, "Replay a folder of npu-smi captures")
        dialog.setFileMode(QFileDialog.Directory)
        dialog.setOption(QFileDialog.ShowDirsOnly, True)
        dialog.fileSelected.connect(lambda path: self.start_replay([path]))
        dialog.open()
        self._dialog = dialog

    def start_replay(self, files) -> None:
        self.fleet.view_host("")  # a replay is this machine's telemetry
        try:
            self.ctx.telemetry.start_replay(files)
        except ValueError as exc:
            box = QMessageBox(QMessageBox.Warning, "Replay", str(exc), QMessageBox.Ok, self)
            box.open()

    def go_live(self) -> None:
        self.fleet.view_host("")
        self.ctx.telemetry.start_live()

    # ------------------------------------------------------------------ drawing

    def redraw(self) -> None:
        history = self.fleet.history_source()
        if history is not None:
            window = self.history.window_s
            for name, key in self._history_keys():
                ring = self.history.rings.get(name)
                if ring is not None:
                    ring.replace(*history(key, window))
        self.history.refresh()
        self.fleet.redraw()
        self.engines.currentWidget().refresh()

    def activated(self) -> None:
        self.timer.start()
        self.fleet.activated()
        self.redraw()

    def deactivated(self) -> None:
        self.timer.stop()

    def shutdown(self) -> None:
        self.timer.stop()
