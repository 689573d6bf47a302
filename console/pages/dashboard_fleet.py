"""The dashboard's fleet part: the strip of host cards (this machine, then every server of
ctx.fleet), which host's chips the page shows, and that host's engine plots.

Nothing here starts a thread or waits on a network: the fleet monitor's workers poll, and
console/fleet_control.py brings their snapshots to the GUI thread as `host_changed`. A host's
plots are read from the monitor's history of it, like this machine's are from the poller's.
"""

from __future__ import annotations

from ...engine.remote.fleet import host_of
from ..widgets.engine_panel import EnginePanel, latency_text
from ..widgets.host_card import LOCAL, HostStrip

# the remote engine panel's series and the monitor's history keys they are drawn from
_ENGINE_SERIES = (("engine:generation_tps", "tps", "output"), ("engine:prompt_tps", "tps", "prompt"),
                  ("engine:running", "queue", "running"), ("engine:waiting", "queue", "waiting"),
                  ("engine:kv_pct", "kv", "kv"),
                  # from the server's latency histograms, over the last 30 s (engine/remote/prom.py)
                  ("engine:ttft_p50_ms", "ttft", "p50"), ("engine:ttft_p99_ms", "ttft", "p99"),
                  ("engine:itl_p50_ms", "itl", "p50"), ("engine:itl_p99_ms", "itl", "p99"))


class FleetView:
    """Owned by the DashboardPage (`page.fleet`); `view` is LOCAL ("") or the URL on show."""

    def __init__(self, page):
        self.page = page
        self.ctx = page.ctx
        self.fleet = getattr(page.ctx, "fleet", None)
        self.view = LOCAL
        self.local_stats = None
        self.remote_panel: EnginePanel | None = None  # made on the first drill-in
        self.strip = HostStrip()
        self.strip.hide()
        self.strip.select(LOCAL)
        self.strip.chosen.connect(self.view_host)
        page.ctx.bridge.stats.connect(self._on_local_stats)
        if self.fleet is not None:
            self.fleet.host_changed.connect(self.on_host)
            self.fleet.host_removed.connect(self.on_removed)
            for snap in list(self.fleet.hosts.values()):
                self.on_host(snap)

    # ------------------------------------------------------------------ hosts
    def on_host(self, snap) -> None:
        """A server's newest state (engine.remote.fleet.HostSnapshot), on the GUI thread."""
        self.strip.card(snap.url).show_host(snap)
        if self.strip.isHidden():
            self.strip.show()
            self.local_changed()
        if snap.url == self.view:
            self._show_host(snap)

    def on_removed(self, url: str) -> None:
        self.strip.remove(url)
        if url == self.view:
            self.view_host(LOCAL)
        if len(self.strip.cards) <= 1:  # this machine's card alone says nothing
            self.strip.hide()

    def view_host(self, key: str) -> None:
        """Show the chips, history and engine of `key` (a server URL, or LOCAL)."""
        if key and (self.fleet is None or self.fleet.snapshot(key) is None):
            key = LOCAL
        self.strip.select(key)
        if key == self.view:
            return
        self.view = key
        page = self.page
        page.clear_chips()
        page.host_note.hide()
        page.back_btn.setVisible(bool(key))
        for banner in page.banners.values():  # this machine's alerts; a server's are its note
            banner.setVisible(not key)
        if key:
            panel = self._panel()
            for label in panel.values.values():
                label.setText("–")
            page.engines.setCurrentWidget(panel)
            self._show_host(self.fleet.snapshot(key))
        else:
            page.engines.setCurrentWidget(page.engine_panel)
            page.empty.setText("Waiting for the first telemetry sample…")
            if page.local_snapshot is not None:
                page.show_chips(page.local_snapshot)
            else:
                page.empty.show()
            self.show_source()
        self._focus()
        page.redraw()

    def _show_host(self, snap) -> None:
        page = self.page
        tel = snap.telemetry
        if tel is None:
            page.clear_chips()
            page.empty.setText(f"{snap.label}: " + ("this server gives no telemetry"
                                                     if snap.state == "up"
                                                     else "no answer yet"))
            page.empty.show()
        elif tel is not page.last_snapshot:
            page.show_chips(tel)
        self._note(snap)
        stats = snap.engine
        if stats is not None and self.remote_panel is not None:
            v = self.remote_panel.values
            v["state"].setText(stats.state if snap.state == "up" else snap.state)
            v["tps"].setText(f"{stats.generation_tokens_per_s:.1f}")
            v["running"].setText(str(stats.running))
            v["waiting"].setText(str(stats.waiting))
            v["kv"].setText(f"{100.0 * stats.kv_usage:.0f} %")
        self.show_source()

    def _note(self, snap) -> None:
        """Over a host's cards: its active alerts; for a lost host, that they are its last known
        numbers and when it is tried next."""
        note = self.page.host_note
        if snap.state == "up" or snap.state == "connecting":
            alerts = snap.alerts
            note.setText(f"{snap.label}: " + "; ".join(a.message for a in alerts[:3])
                         + (f" (+{len(alerts) - 3} more)" if len(alerts) > 3 else ""))
            note.setVisible(bool(alerts))
            return
        what = "unreachable" if snap.state == "unreachable" else "refusing the API key"
        retry = snap.retry_in()
        text = f"{snap.label} is {what}" + (f", retrying in {retry:.0f} s" if retry is not None
                                            else "")
        if snap.updated is not None and snap.telemetry is not None:
            from time import localtime, strftime

            text += f". The chips below are as of {strftime('%H:%M:%S', localtime(snap.updated))}"
        note.setText(f"{text}. ({snap.error})" if snap.error else text + ".")
        note.show()

    def _panel(self) -> EnginePanel:
        if self.remote_panel is None:
            self.remote_panel = EnginePanel()
            self.remote_panel.set_window(self.page.history.window_s)
            self.page.engines.addWidget(self.remote_panel)
        return self.remote_panel

    # ------------------------------------------------------------------ this machine
    def _on_local_stats(self, stats) -> None:
        self.local_stats = stats  # drawn with the next redraw, not at the bridge's 4 Hz

    def local_changed(self) -> None:
        if self.strip.isHidden():
            return
        page = self.page
        poller = self.ctx.telemetry.poller
        alerts = len(poller.active_alerts()) if poller is not None else 0
        self.strip.card(LOCAL).show_local(page.local_snapshot, self.local_stats, alerts,
                                          page.local_source)

    # ------------------------------------------------------------------ where numbers come from
    def show_source(self) -> None:
        page = self.page
        snap = self.fleet.snapshot(self.view) if self.view and self.fleet is not None else None
        if snap is None:
            page.source.setText(f"chips: this machine · {page.local_source}")
            return
        host = host_of(snap.url)
        who = f"{snap.name}, {host}" if snap.name else host
        text = f"chips: {who} ({snap.source or 'no telemetry'})"
        page.source.setText(text if snap.state == "up" else f"{text} · {snap.state}")

    def _focus(self) -> None:
        """Tell the status bar whose engine is on show (ctx.remote, where the console has it)."""
        remote = getattr(self.ctx, "remote", None)
        if remote is not None and self.page.isVisible():
            remote.set_focus(self.view or None)

    def history_source(self):
        """(key, seconds) -> (t, values) of the host on show; None before any telemetry."""
        if self.view and self.fleet is not None:
            url = self.view
            return lambda key, seconds: self.fleet.history(url, key, seconds)
        poller = self.ctx.telemetry.poller
        return poller.history if poller is not None else None

    def activated(self) -> None:
        if self.view:
            self._focus()

    def redraw(self) -> None:
        if self.strip.isHidden():
            return
        self.strip.tick()
        self.local_changed()
        if not self.view or self.remote_panel is None:
            return
        snap = self.fleet.snapshot(self.view)
        if snap is not None:
            self._note(snap)
        panel = self.remote_panel
        window = self.page.history.window_s
        panel.set_window(window)
        latest = {}
        for key, plot, series in _ENGINE_SERIES:
            t, v = self.fleet.history(self.view, key, window)
            getattr(panel, plot).rings[series].replace(t, v)
            latest[key] = float(v[-1]) if len(v) and v[-1] == v[-1] else None  # NaN: none
        for name in ("ttft", "itl"):
            panel.values[name].setText(latency_text(latest[f"engine:{name}_p50_ms"],
                                                    latest[f"engine:{name}_p99_ms"]))
