"""Demo mode: F11 opens a full-screen presentation view fed by real (replayed) telemetry;
Esc closes it. No model is needed, so this stays fast."""

from __future__ import annotations

import pytest

pytest.importorskip("PySide6")
pytest.importorskip("pytestqt")

from npu_console.console.testing import make_window
from PySide6.QtCore import Qt

pytestmark = [pytest.mark.slow, pytest.mark.gui]  # building the window takes seconds here


@pytest.fixture(scope="module")
def window(qapp, tmp_path_factory, npu_smi_fixtures):
    capture = npu_smi_fixtures / "910b3_info_1.txt"
    if not capture.is_file():
        pytest.skip("910B capture missing")
    home = tmp_path_factory.mktemp("demo-home")
    win = make_window(home, model="", replay=[str(capture)], start_engine=False)
    yield win
    win.close()


def test_f11_opens_demo_and_esc_closes_it(window, qtbot):
    qtbot.waitUntil(lambda: window.ctx.telemetry.poller is not None, timeout=10_000)
    window.activateWindow()
    qtbot.keyClick(window, Qt.Key_F11)
    demo = window.demo
    assert demo is not None
    qtbot.waitUntil(demo.isVisible, timeout=5_000)
    assert demo.isFullScreen()
    # replayed 910B capture: NPU load and HBM from telemetry, in big type
    qtbot.waitUntil(lambda: demo.util.value.text() not in ("—", ""), timeout=10_000)
    assert demo.util.label.text() == "NPU LOAD"
    assert demo.memory.label.text() == "HBM"
    assert "of" in demo.memory.unit.text() and "GB" in demo.memory.unit.text()
    assert "910B" in demo.device_label.text()
    assert "40pt" in demo.tok_s.value.styleSheet()
    # nothing loaded: asking shows a plain sentence, not a traceback
    demo.send("hello")
    assert "No model loaded" in demo.panes[0][1].toPlainText()
    qtbot.keyClick(demo, Qt.Key_Escape)
    qtbot.waitUntil(lambda: window.demo is None, timeout=5_000)
    assert not demo.isVisible()


def test_menu_action_reopens_demo_and_closing_the_console_closes_it(window, qtbot):
    demo = window.open_demo()
    assert demo.isFullScreen()
    demo.close()
    qtbot.waitUntil(lambda: window.demo is None, timeout=5_000)
    again = window.open_demo()
    assert again.isVisible()
    window.close()  # closing the console closes the demo too
    qtbot.waitUntil(lambda: window.demo is None, timeout=5_000)
