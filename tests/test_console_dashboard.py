"""Dashboard: replayed npu-smi captures (real ones from ../shared) and the host fallback."""

from __future__ import annotations

import pytest

pytest.importorskip("PySide6")
pytest.importorskip("pytestqt")

pytestmark = pytest.mark.gui

CAPTURES = {
    "single chip 310P3": "310p3_info_6.txt",
    "8-card 910B3": "910b3_info_1.txt",
    "300I Duo (310P3 x2 chips)": "310p3-duo_info_1.txt",
    "Atlas A3": "a3_info_2.txt",
}


@pytest.fixture(scope="module")
def window(qapp, tmp_path_factory):
    """One window for the module (building plots costs seconds); each test picks its source."""
    from support.gui import console_window

    home = tmp_path_factory.mktemp("dash-home")
    with console_window(qapp, home, "dashboard", start_engine=False, replay=[]) as win:
        yield win


def _expected(path):
    from npu_console.engine.telemetry import make_provider

    snap = make_provider("replay", replay_files=[str(path)]).sample()
    return snap.accelerators


@pytest.mark.parametrize("label", list(CAPTURES))
def test_replayed_capture_renders_one_card_per_chip(window, qtbot, npu_smi_fixtures, label):
    path = npu_smi_fixtures / CAPTURES[label]
    expected = _expected(path)
    assert expected, f"parser found no chips in {path.name}"
    page = window.page("dashboard")
    page.start_replay([str(path)])
    qtbot.waitUntil(lambda: len(page.cards) == len(expected), timeout=10_000)
    assert "replay: " + path.name in page.source.text()
    assert list(page.cards) == [d.key for d in expected]
    assert page.metric_box.itemText(0) == "AI Core / util %"  # the chips' own, not the CPU's
    for dev in expected:
        card = page.cards[dev.key]
        assert card.title.text() == dev.name
        assert card.health.text() == (dev.health or "N/A")
        if dev.mem_total_mb:
            assert card.mem.value.text().endswith(" / " + _mb(dev.mem_total_mb))
        else:
            assert card.mem.value.text() == "N/A"
        if dev.util_pct is not None:
            assert card.util.value.text() == f"{dev.util_pct:.0f} %"
        if dev.temp_c is not None:
            assert card.temp.text() == f"{dev.temp_c:.0f} °C"
    # history: one series per chip, filled from the poller's history after a redraw
    qtbot.waitUntil(lambda: len(page.history.rings) == len(expected), timeout=5_000)
    page.redraw()
    assert all(len(r) >= 1 for r in page.history.rings.values() if r is not None)
    for i in range(page.metric_box.count()):  # every metric and window redraws
        page.metric_box.setCurrentIndex(i)
    for i in range(page.window_box.count()):
        page.window_box.setCurrentIndex(i)


def _mb(mb):
    from npu_console.console.widgets.basic import fmt_mb

    return fmt_mb(mb)


def test_host_fallback_without_accelerator(window, qtbot):
    page = window.page("dashboard")
    window.ctx.telemetry.start_live()  # no npu-smi, no NVML on this machine: host only
    snap = window.ctx.telemetry.poller.latest
    if snap is not None and snap.accelerators:
        pytest.skip("this machine has an accelerator")
    qtbot.waitUntil(lambda: "cpu" in page.cards, timeout=10_000)
    card = page.cards["cpu"]
    assert card.title.text() == "Host CPU"
    assert card.util.name.text() == "CPU" and card.mem.name.text() == "RAM"
    assert "GB" in card.mem.value.text() or "MB" in card.mem.value.text()
    assert "live" in page.source.text()


def test_unhealthy_chip_raises_a_banner_that_can_be_dismissed(window, qtbot, npu_smi_fixtures):
    page = window.page("dashboard")
    path = npu_smi_fixtures / "310b4_info_2.txt"  # Health: Alarm
    assert any((d.health or "").lower() != "ok" for d in _expected(path))
    page.start_replay([str(path)])
    qtbot.waitUntil(lambda: bool(page.banners), timeout=10_000)
    key, banner = next(iter(page.banners.items()))
    assert banner.label.text()
    banner.findChild(type(page.live_btn)).click()
    assert key not in page.banners


def test_replay_file_dialog_and_back_to_live(window, qtbot, npu_smi_fixtures):
    from PySide6.QtWidgets import QFileDialog

    page = window.page("dashboard")
    qtbot.mouseClick(page.replay_btn, __import__("PySide6.QtCore").QtCore.Qt.LeftButton)
    dialog = page.findChild(QFileDialog)
    assert dialog is not None and dialog.isVisible()
    path = npu_smi_fixtures / "910b3_info_1.txt"
    dialog.filesSelected.emit([str(path)])
    dialog.close()
    qtbot.waitUntil(lambda: len(page.cards) == 8, timeout=10_000)
    assert page.live_btn.isEnabled()
    page.live_btn.click()
    qtbot.waitUntil(lambda: "live" in page.source.text(), timeout=10_000)
    assert not page.live_btn.isEnabled()


def test_missing_capture_shows_a_dialog(window, qtbot, tmp_path):
    from PySide6.QtWidgets import QMessageBox

    page = window.page("dashboard")
    page.start_replay([str(tmp_path / "nope.txt")])
    box = page.findChild(QMessageBox)
    assert box is not None and "capture not found" in box.text()
    box.close()
