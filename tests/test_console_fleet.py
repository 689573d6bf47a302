"""The dashboard's fleet view on two real `npu-console serve` processes (loopback, API keys,
replayed 8 x 910B3 and 2 x 310P3 captures from ../shared/fixtures/npu-smi) watched through
ctx.fleet: both hosts get a card with their chips and engine, a click on one shows its chips in
the grid (and says so in the header), a killed server's card greys out with its retry
countdown while the window keeps painting, and a removed server's card goes."""

from __future__ import annotations

import time

import pytest

pytest.importorskip("PySide6")
pytest.importorskip("pytestqt")

from support.fleet_servers import ServeProcess

pytestmark = [pytest.mark.gui, pytest.mark.slow]

KEY_A, KEY_B = "gui-fleet-a", "gui-fleet-b"
LOCAL_CAPTURE = "310p3-duo_info_1.txt"  # this machine: 8 x 310P3 (a 300I Duo box)


@pytest.fixture(scope="module")
def servers(npu_smi_fixtures):
    a = ServeProcess("--api-key", KEY_A, "--telemetry-input",
                     str(npu_smi_fixtures / "910b3_info_1.txt"), "--telemetry-interval", "1").start()
    b = ServeProcess("--api-key", KEY_B, "--telemetry-input",
                     str(npu_smi_fixtures / "310p3_info_8.txt"), "--telemetry-interval", "1").start()
    try:
        a.wait_ready()
        b.wait_ready()
        yield a, b
    finally:
        a.stop()
        b.stop()


@pytest.fixture
def window(qapp, tmp_path, monkeypatch, npu_smi_fixtures):
    from npu_console.console.testing import make_window

    monkeypatch.setenv("NPU_CONSOLE_HOME", str(tmp_path))
    win = make_window(tmp_path, start_engine=False,
                      replay=[str(npu_smi_fixtures / LOCAL_CAPTURE)])
    win.resize(1360, 860)
    win.show()
    win.show_page("dashboard")
    yield win
    win.close()


def _click(qtbot, widget) -> None:
    from PySide6.QtCore import Qt

    qtbot.mouseClick(widget, Qt.LeftButton)


def test_fleet_view_shows_both_hosts_drills_in_and_survives_a_lost_server(window, qtbot,
                                                                          servers):
    from npu_console.engine.remote.fleet import ServerRef
    from PySide6.QtCore import QTimer

    a, b = servers
    page = window.page("dashboard")
    fleet = window.ctx.fleet
    assert page.fleet.strip.isHidden()  # nothing attached: the dashboard as before
    qtbot.waitUntil(lambda: len(page.cards) == 8, timeout=10_000)  # this machine's chips
    fleet.add_server(ServerRef(a.url, KEY_A, "rack-a"))
    fleet.add_server(ServerRef(b.url, KEY_B))
    strip = page.fleet.strip
    qtbot.waitUntil(lambda: all(fleet.snapshot(u) is not None and fleet.snapshot(u).state == "up"
                                and fleet.snapshot(u).engine is not None for u in (a.url, b.url)),
                    timeout=30_000)
    qtbot.waitUntil(lambda: "910B3" in strip.cards[a.url].chips.text(), timeout=5_000)
    assert strip.isVisible()
    assert list(strip.cards) == ["", a.url, b.url]  # this machine first
    card_a, card_b = strip.cards[a.url], strip.cards[b.url]
    assert card_a.title.text() == "rack-a"
    assert card_b.title.text() == b.url.removeprefix("http://")
    assert card_a.health.text() == "8 × OK"
    qtbot.waitUntil(lambda: card_b.health.text() == "2 × OK", timeout=5_000)
    assert "replay" in card_a.subtitle.text()
    assert "HBM" in card_a.chips.text() and " W" in card_a.chips.text()
    assert "tok/s" in card_a.engine.text() and "queued" in card_a.engine.text()
    assert card_a.lamp.state == card_b.lamp.state == "on"
    assert strip.cards[""].health.text() == "8 × OK"  # this machine's 310P3 duo
    assert page.source.text().startswith("chips: this machine")

    # drill into B: its two 310P3 chips in the grid, its engine on the right
    _click(qtbot, card_b)
    qtbot.waitUntil(lambda: len(page.cards) == 2, timeout=5_000)
    assert [c.title.text() for c in page.cards.values()] == ["310P3", "310P3"]
    assert page.source.text() == f"chips: {b.url.removeprefix('http://')} (replay)"
    assert page.back_btn.isVisible() and card_b.property("selected")
    assert page.engines.currentWidget() is page.fleet.remote_panel
    qtbot.waitUntil(lambda: page.fleet.remote_panel.values["state"].text() == "ready",
                    timeout=5_000)
    page.redraw()
    assert len(page.history.rings) == 2
    assert any(len(r) for r in page.history.rings.values())  # the host's own history
    # a chip's drawer opens on a remote chip too
    key = next(iter(page.cards))
    page.open_drawer(key)
    assert page.drawer.isVisible() and page.drawer.key == key
    # the local chips keep arriving, but the grid stays on B
    time.sleep(1.5)
    qtbot.wait(200)
    assert len(page.cards) == 2
    # A by its card, then back to this machine
    _click(qtbot, card_a)
    qtbot.waitUntil(lambda: len(page.cards) == 8 and
                    all(c.title.text() == "910B3" for c in page.cards.values()), timeout=5_000)
    assert page.source.text() == f"chips: rack-a, {a.url.removeprefix('http://')} (replay)"
    _click(qtbot, page.back_btn)
    qtbot.waitUntil(lambda: all(c.title.text() == "310P3" for c in page.cards.values())
                    and len(page.cards) == 8, timeout=5_000)
    assert page.source.text().startswith("chips: this machine · replay: " + LOCAL_CAPTURE)
    assert page.engines.currentWidget() is page.engine_panel and not page.back_btn.isVisible()

    # drill into B again, then kill it: its card greys within 5 s, the loop never stalls
    _click(qtbot, card_b)
    qtbot.waitUntil(lambda: len(page.cards) == 2, timeout=5_000)
    qtbot.wait(1000)  # the drill-in's new cards painted: what is measured is the loss alone
    gaps: list[float] = []
    stamps: list[float] = []
    last = [time.monotonic()]

    def beat() -> None:
        now = time.monotonic()
        gaps.append(now - last[0])
        stamps.append(now)
        last[0] = now

    timer = QTimer()
    timer.setInterval(10)
    timer.timeout.connect(beat)
    timer.start()
    try:
        qtbot.wait(300)
        b.proc.kill()  # SIGKILL, not waited for here: reaping it is not the window's work
        killed = time.monotonic()
        qtbot.waitUntil(lambda: card_b.state == "unreachable", timeout=10_000)
        took = time.monotonic() - killed
        qtbot.waitUntil(lambda: "retrying in" in card_b.note.text(), timeout=3_000)
        qtbot.wait(1500)  # a few retries and redraws while it is down
    finally:
        timer.stop()
        b.kill()  # reaped
    worst = max(gaps)
    top = sorted(zip(gaps, stamps, strict=True), reverse=True)[:3]
    print("\nlargest gaps (ms, s after the kill):",
          [(round(g * 1000), round(t - killed, 2)) for g, t in top])
    print(f"\ncard unreachable {took:.2f} s after the kill; largest event-loop gap "
          f"{worst * 1000:.0f} ms over {len(gaps)} beats")
    assert took < 5.0
    assert worst < 1.0  # the bar is 200 ms; this shared 2-core machine gets a generous bound
    assert card_b.note.isVisible() and card_b.fade.opacity() < 1.0
    assert card_b.lamp.state == "error"
    assert card_a.state == "up" and card_a.fade.opacity() == 1.0
    assert page.host_note.isVisible() and "unreachable" in page.host_note.text()
    assert len(page.cards) == 2  # its last chips stay on show, under the note
    assert page.source.text().endswith("· unreachable")

    # removed: its card goes and the grid is this machine's again
    assert fleet.remove_server(b.url)
    qtbot.waitUntil(lambda: b.url not in strip.cards, timeout=2_000)
    assert len(page.cards) == 8 and page.source.text().startswith("chips: this machine")
    qtbot.wait(1500)  # no late snapshot of the removed host brings it back
    assert b.url not in strip.cards and list(fleet.hosts) == [a.url]


def test_a_server_without_accelerators_shows_its_own_cpu_and_its_latency(window, qtbot):
    """A CPU-only server's card is that server's (its host, its process), not this machine's
    wording, and so is the status bar's device line; its engine panel shows TTFT / ITL read
    from the server's /metrics histograms."""
    import httpx

    key = "gui-fleet-cpu"
    c = ServeProcess("--api-key", key, "--telemetry-source", "host",
                     "--telemetry-interval", "1").start()
    try:
        c.wait_ready()
        fleet = window.ctx.fleet
        page = window.page("dashboard")
        # connected as File > Connect does: the fleet watches it and the status bar follows it
        window.ctx.remote.connect_server(c.url, key, remember=False)
        qtbot.waitUntil(lambda: (s := fleet.snapshot(c.url)) is not None and s.state == "up"
                        and s.telemetry is not None, timeout=30_000)
        qtbot.waitUntil(lambda: c.url in page.fleet.strip.cards, timeout=5_000)
        _click(qtbot, page.fleet.strip.cards[c.url])
        qtbot.waitUntil(lambda: list(page.cards) == ["cpu"], timeout=10_000)
        card = page.cards["cpu"]
        host = c.url.removeprefix("http://")
        assert card.title.text() == f"Host CPU · {host}"
        assert card.subtitle.text().endswith("no accelerator on the server")
        assert card.procs.text().startswith(f"the server: pid {c.proc.pid},")
        assert "this console" not in card.procs.text()
        assert page.metric_box.itemText(0) == "CPU util %"  # no AI Core to plot
        # the status bar names the server's device, not this machine's CPU
        assert window.device_label.text() == f"device: cpu @ {host}"
        # requests served there: their latency, from its histograms, on its engine panel
        panel = page.fleet.remote_panel
        assert panel.values["ttft"].text() == "–"
        with httpx.Client(base_url=c.url, headers={"Authorization": f"Bearer {key}"},
                          timeout=60) as client:
            for _ in range(4):
                r = client.post("/v1/completions", json={"model": "demo", "prompt": "Once",
                                                         "max_tokens": 16})
                assert r.status_code == 200, r.text

        def shown() -> bool:
            page.redraw()
            return panel.values["ttft"].text() != "–" and panel.values["itl"].text() != "–"

        qtbot.waitUntil(shown, timeout=30_000)
        for name in ("ttft", "itl"):
            p50, p99 = panel.values[name].text().removesuffix(" ms").split("/")
            assert 0 <= float(p50) <= float(p99)
        _click(qtbot, page.back_btn)  # this machine again: its own device line
        assert window.device_label.text() == "device: …"
    finally:
        c.stop()
