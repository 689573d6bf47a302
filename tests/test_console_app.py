"""App shell: CLI without a display, settings across runs, shortcuts, About, clean shutdown."""

from __future__ import annotations

import threading
import time

import pytest

pytest.importorskip("PySide6")
pytest.importorskip("pytestqt")

pytestmark = pytest.mark.gui


def test_gui_without_display_explains_and_exits_2(monkeypatch, capsys):
    from npu_console.cli.main import main

    for var in ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM"):
        monkeypatch.delenv(var, raising=False)
    assert main(["gui"]) == 2
    err = capsys.readouterr().err
    assert "xvfb-run npu-console gui" in err and "QT_QPA_PLATFORM=offscreen" in err
    assert "npu-console serve" in err and "Traceback" not in err


def test_gui_rejects_missing_replay_file(capsys, tmp_path):
    from npu_console.cli.main import main

    assert main(["gui", "--replay", str(tmp_path / "none.txt")]) == 2
    assert "replay capture not found" in capsys.readouterr().err


def test_settings_theme_and_page_survive_a_restart(qtbot, tmp_path):
    from npu_console.console.testing import make_window

    win = make_window(tmp_path, start_engine=False)
    qtbot.addWidget(win)
    win.set_theme("light")
    win.show_page("chat")
    win.resize(1300, 760)
    win.close()
    again = make_window(tmp_path, start_engine=False)
    qtbot.addWidget(again)
    assert again.stack.currentWidget().page_id == "chat"
    assert again.ctx.settings.value("ui/theme") == "light"
    from npu_console.console.theme import current_theme

    assert current_theme().name == "light"
    # offscreen clamps the width to its virtual screen; the height round-trips exactly
    assert again.size().height() == 760
    again.set_theme("dark")
    again.close()


def test_keyboard_shortcuts_switch_pages(qtbot, tmp_path):
    from npu_console.console.testing import make_window
    from PySide6.QtCore import Qt

    win = make_window(tmp_path, start_engine=False)
    qtbot.addWidget(win)
    qtbot.waitExposed(win)
    win.activateWindow()
    qtbot.waitUntil(win.isActiveWindow, timeout=5_000)  # shortcuts need an active window
    for n, page_id in ((2, "models"), (3, "chat"), (1, "dashboard")):
        qtbot.keyClick(win.sidebar, getattr(Qt, f"Key_{n}"), Qt.ControlModifier)
        assert win.stack.currentWidget().page_id == page_id
    win.close()


def test_about_box_lists_versions(qtbot, tmp_path):
    from npu_console.console.testing import make_window
    from PySide6.QtCore import qVersion

    win = make_window(tmp_path, start_engine=False)
    qtbot.addWidget(win)
    box = win.show_about()
    assert box.isVisible()
    for needle in ("NPU Console", qVersion(), "torch", "torch_npu", "Device"):
        assert needle in box.text()
    box.close()
    win.close()


@pytest.mark.slow
def test_closing_while_streaming_shuts_down_promptly(qtbot, tmp_path, stories_dir):
    from npu_console.console.testing import make_window, model_names

    before = {t.ident for t in threading.enumerate()}  # other tests' threads are not ours to judge
    win = make_window(tmp_path)
    host = win.ctx.engine_host
    host.start()
    host.load(stories_dir, name="s")
    qtbot.waitUntil(lambda: model_names(win) == ["s"], timeout=90_000)
    chat = win.page("chat")
    win.show_page("chat")
    chat.sampling.max_tokens.setValue(400)
    ids = chat.send("Once upon a time")
    assert ids
    qtbot.waitUntil(lambda: bool(chat.conv.panes[0].messages[-1].content), timeout=30_000)
    engine = win.ctx.bridge.engine
    t0 = time.monotonic()
    win.close()
    elapsed = time.monotonic() - t0
    # the promise is 3 s (bench_gui_responsiveness measures it); a shared 2-core machine gets a
    # sanity bound that still tells a prompt stop from waiting out the 400-token reply
    assert elapsed < 10.0, f"closing took {elapsed:.2f} s"
    assert not engine._thread.is_alive()
    live = [t.name for t in threading.enumerate()
            if t.name.startswith(("stream-", "bridge-", "npu-console-engine", "telemetry-"))
            and t.is_alive() and t.ident not in before]
    assert not live, f"threads left running: {live}"
    assert engine.stats().state == "stopped"
    # the reply in progress was saved with what had streamed
    saved = chat.store.load(chat.conv.id)
    assert saved.panes[0].messages[-1].role == "assistant"
