"""A message sent while the first model loads: the chat page shows the load's stage and percent,
holds the message and sends it when the model is ready; the dashboard's engine card shows the
same progress. Real window, real engine, stories260K through the real loading code."""

from __future__ import annotations

import pytest
from npu_console.console.loads import LoadTracker

pytest.importorskip("PySide6")
pytest.importorskip("pytestqt")

from PySide6.QtCore import Qt
from support.gui import console_window

WAIT_MS = 300_000  # this 2-core machine, shared, took 2 min to load stories260K
pytestmark = [pytest.mark.slow, pytest.mark.gui]


def test_the_tracker_announces_progress_and_the_end():
    tracker = LoadTracker()
    seen, ended = [], []
    tracker.subscribe("changed", lambda loads: seen.append([(x.name, x.percent) for x in loads]))
    tracker.subscribe("ended", ended.append)
    tracker.started(1, "smollm2")
    tracker.progress(1, 0.456, "converting GGUF tensors")
    assert tracker.current().text() == "Loading smollm2: converting GGUF tensors · 46 %"
    tracker.progress(1, 0.5, "")  # a report without a stage keeps the last one
    assert tracker.current().stage == "converting GGUF tensors"
    tracker.finished(1, "")
    tracker.progress(1, 0.9, "late")  # after the end: ignored
    assert seen == [[("smollm2", 0)], [("smollm2", 46)], [("smollm2", 50)], []]
    assert [(e.name, e.error) for e in ended] == [("smollm2", "")]
    assert not tracker.loading and tracker.current() is None


def test_a_message_sent_while_loading_is_held_then_answered(qapp, qtbot, tmp_path, stories_dir):
    with console_window(qapp, tmp_path, "chat") as win:
        page = win.page("chat")
        panel = win.page("dashboard").engine_panel
        host = win.ctx.engine_host
        # nothing loaded and nothing loading: the message stays in the box, with the reason
        page.input.setPlainText("Once upon a time")
        assert not page.send_btn.isEnabled()
        qtbot.keyClick(page.input, Qt.Key_Return, Qt.ControlModifier)
        assert page.conv.empty and page.input.toPlainText() == "Once upon a time"
        assert "No model loaded" in page.error_label.text()

        # a load that fails: the message is held, then the note says so
        host.start()
        (tmp_path / "broken").mkdir()
        host.load(tmp_path / "broken", name="broken")
        assert page.send_btn.isEnabled()
        qtbot.keyClick(page.input, Qt.Key_Return, Qt.ControlModifier)
        assert page.held and page.busy() and page.input.toPlainText() == ""
        assert [m.role for m in page.conv.panes[0].messages] == ["user"]
        assert page.load_row.isVisibleTo(page)
        assert "your message is sent when it is ready" in page.load_label.text()
        qtbot.waitUntil(lambda: "did not load" in page.error_label.text(), timeout=WAIT_MS)
        assert page.held and not page.load_row.isVisibleTo(page)

        # the real model loads: progress on the chat page and the engine card, then the reply
        shown = []

        def record(_loads):
            load = win.ctx.loads.current()
            if load is not None:
                shown.append((load.percent, page.load_label.text(), page.load_bar.value(),
                               panel.values["state"].text(), panel.stage.text()))

        win.ctx.loads.subscribe("changed", record)
        host.load(stories_dir, name="stories")
        qtbot.waitUntil(lambda: not page.busy(), timeout=WAIT_MS)
        msgs = page.conv.panes[0].messages
        assert [m.role for m in msgs] == ["user", "assistant"]
        assert msgs[1].stats["finish"] in ("stop", "length"), msgs[1].stats
        assert msgs[1].content.strip()
        # the notes clear themselves once the model is ready
        assert page.error_label.text() == "" and not page.load_row.isVisibleTo(page)
        assert not panel.stage.isVisibleTo(panel)
        assert not panel.values["state"].text().startswith("loading")
        # the load was shown as it went, stage and percent, on both
        assert len(shown) >= 3, shown
        percents = [s[0] for s in shown]
        assert percents == sorted(percents) and percents[-1] == 100
        for percent, label, bar, state, stage in shown:
            assert label.startswith("Loading stories: ") and f"· {percent} %" in label
            assert bar == percent and state == f"loading {percent} %"
            assert stage.startswith("stories: ") and len(stage) > len("stories: ")
