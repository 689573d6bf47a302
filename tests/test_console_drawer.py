"""The dashboard's per-chip detail drawer on a replayed capture folder of real npu-smi captures."""

from __future__ import annotations

import shutil

import pytest

pytest.importorskip("PySide6")
pytest.importorskip("pytestqt")

pytestmark = pytest.mark.gui

FAMILY_910A = ("910a_info_1", "910a_usages_2", "910a_board_1", "910a_board-c_1", "910a_ecc_1",
               "910a_health-c_1")


@pytest.fixture(scope="module")
def window(qapp, tmp_path_factory):
    from support.gui import console_window

    home = tmp_path_factory.mktemp("drawer-home")
    with console_window(qapp, home, "dashboard", start_engine=False, replay=[]) as win:
        yield win


@pytest.fixture
def folder(tmp_path, npu_smi_fixtures):
    folder = tmp_path / "captures"
    folder.mkdir()
    for name in FAMILY_910A:
        shutil.copy(npu_smi_fixtures / f"{name}.txt", folder)
    return folder


def test_click_a_card_opens_its_details(window, qtbot, folder):
    from PySide6.QtCore import Qt

    page = window.page("dashboard")
    page.start_replay([str(folder)])
    qtbot.waitUntil(lambda: len(page.cards) == 8, timeout=10_000)
    drawer = page.drawer
    assert not drawer.isVisible()
    qtbot.mouseClick(page.cards["npu0-0"], Qt.LeftButton)
    assert drawer.isVisible() and drawer.key == "npu0-0"
    assert page.cards["npu0-0"].property("selected") and not page.cards["npu1-0"].property("selected")
    assert drawer.title.text() == "910B · npu0-0"
    assert drawer.subtitle.text() == "from saved captures (replay)"
    assert drawer.health.text() == "OK" and drawer.health_text.text().startswith("healthy")
    assert drawer.codes.text() == "no error codes"
    assert drawer.usage["ctrlcpu_pct"].value.text() == "0 %"
    assert drawer.usage["hbm_bandwidth_pct"].value.text() == "0 %"
    assert drawer.usage["aicube_pct"].isHidden()  # not printed by this family's npu-smi
    assert drawer.ecc_cells[("HBM", "Double", "Bit Error Count")].text() == "0"
    assert drawer.ecc_cells[("DDR", "Single", "Bit Isolated Pages Count")].text() == "0"
    assert drawer.ecc_note.isHidden()
    assert drawer.board["firmware_version"].text() == "7.1.0.7.220"
    assert drawer.board["serial_number"].text() == "N/A"  # 910a_board_1 does not print one
    assert drawer.board["bus_id"].text() == "0000:C1:00.0"
    assert "910a_ecc_1.txt" in drawer.footer.text() and drawer.errors.isHidden()

    # another chip: the table only (the captures are all of NPU 0)
    qtbot.mouseClick(page.cards["npu3-0"], Qt.LeftButton)
    assert drawer.key == "npu3-0" and drawer.title.text() == "910B · npu3-0"
    assert "have not answered" in drawer.subtitle.text()
    assert drawer.health.text() == "OK" and "table only" in drawer.health_text.text()
    assert drawer.board["firmware_version"].text() == "N/A" and not drawer.ecc_note.isHidden()
    # the next replayed snapshot keeps it filled, a second click on the card closes it
    cycles = window.ctx.telemetry.poller.cycles
    qtbot.waitUntil(lambda: window.ctx.telemetry.poller.cycles > cycles + 1, timeout=10_000)
    assert drawer.key == "npu3-0" and drawer.isVisible()
    qtbot.mouseClick(page.cards["npu3-0"], Qt.LeftButton)
    assert not drawer.isVisible() and not page.cards["npu3-0"].property("selected")


def test_escape_closes_and_a_new_source_closes(window, qtbot, folder, npu_smi_fixtures):
    from PySide6.QtCore import Qt

    page = window.page("dashboard")
    page.start_replay([str(folder)])
    qtbot.waitUntil(lambda: "npu0-0" in page.cards, timeout=10_000)
    page.open_drawer("npu0-0")
    assert page.drawer.isVisible()
    qtbot.keyClick(page.drawer, Qt.Key_Escape)
    assert not page.drawer.isVisible()
    page.open_drawer("npu0-0")
    page.start_replay([str(npu_smi_fixtures / "a3_info_6.txt")])
    assert not page.drawer.isVisible()
    qtbot.waitUntil(lambda: "npu1-1" in page.cards, timeout=10_000)
    page.open_drawer("npu1-1")
    assert page.drawer.isVisible() and page.drawer.key == "npu1-1"


def test_host_card_is_not_clickable(window, qtbot):
    page = window.page("dashboard")
    window.ctx.telemetry.start_live()
    snap = window.ctx.telemetry.poller.latest
    if snap is not None and snap.accelerators:
        pytest.skip("this machine has an accelerator")
    qtbot.waitUntil(lambda: "cpu" in page.cards, timeout=10_000)
    assert not page.cards["cpu"].clickable
