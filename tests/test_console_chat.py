"""Chat playground driven through real widgets on a real engine (stories260K, loaded twice)."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("PySide6")
pytest.importorskip("pytestqt")

from fakes.slow_steps import slowed_steps
from PySide6.QtCore import Qt
from support.gui import console_window, fresh_chat

WAIT_MS = 90_000
pytestmark = [pytest.mark.slow, pytest.mark.gui]  # one engine start (torch import) per module


@pytest.fixture(scope="module")
def window(qapp, stories_dir, tmp_path_factory):
    home = tmp_path_factory.mktemp("chat-home")
    with console_window(qapp, home, "chat", ((stories_dir, "a"), (stories_dir, "b")),
                        WAIT_MS) as win:
        win.home = home
        yield win


@pytest.fixture
def chat(window, qtbot):
    page = fresh_chat(window, qtbot, "a", "Balanced", 48, WAIT_MS)
    page.sampling.seed.setText("7")
    return page


def _wait_done(qtbot, page):
    qtbot.waitUntil(lambda: not page.busy(), timeout=WAIT_MS)


def test_send_streams_tokens_and_shows_stats(window, chat, qtbot):
    chunks = []
    window.ctx.bridge.tokens.connect(lambda rid, text: chunks.append((rid, text)))
    chat.input.setPlainText("Once upon a time")
    # 10 ms a step: 48 tokens of the demo model otherwise fit in one repaint's batch
    with slowed_steps(window.ctx.bridge.engine):
        qtbot.keyClick(chat.input, Qt.Key_Return, Qt.ControlModifier)  # Ctrl+Enter sends
        assert chat.busy() and chat.stop_btn.isEnabled() and not chat.send_btn.isEnabled()
        _wait_done(qtbot, chat)
    msgs = chat.conv.panes[0].messages
    assert [m.role for m in msgs] == ["user", "assistant"]
    reply = msgs[1]
    assert reply.content.strip()
    # streamed in several coalesced pieces that add up to the final text
    mine = [t for rid, t in chunks]
    assert len(mine) >= 2
    assert "".join(mine) == reply.content
    assert reply.stats["finish"] in ("stop", "length")
    assert reply.stats["completion_tokens"] >= 1 and reply.stats["ttft_s"] > 0
    bubble = chat.transcripts[0].bubbles[1]
    assert "TTFT" in bubble.stats.text() and "finish" in bubble.stats.text()
    assert "▍" not in bubble.body.text()
    # the context gauge counts prompt + completion tokens of the last exchange
    total = reply.stats["prompt_tokens"] + reply.stats["completion_tokens"]
    assert chat.ctx_gauge.value() == total and chat.ctx_gauge.maximum() == 512
    # saved locally as JSON
    saved = json.loads(chat.store.path(chat.conv.id).read_text())
    assert saved["panes"][0]["messages"][1]["content"] == reply.content


def test_stop_aborts_in_the_engine(window, chat, qtbot):
    chat.sampling.max_tokens.setValue(400)
    # 10 ms per step: the reply is still streaming when Esc lands (fakes/slow_steps.py)
    with slowed_steps(window.ctx.bridge.engine):
        ids = chat.send("Tell me a long story about a dog")
        assert len(ids) == 1
        qtbot.waitUntil(lambda: bool(chat.conv.panes[0].messages[-1].content), timeout=WAIT_MS)
        qtbot.keyClick(chat.input, Qt.Key_Escape)  # Esc stops
        _wait_done(qtbot, chat)
    stats = chat.conv.panes[0].messages[-1].stats
    assert stats["finish"] == "cancelled"
    assert stats["completion_tokens"] < 400
    qtbot.waitUntil(lambda: window.ctx.bridge.engine.stats().running == 0, timeout=10_000)


def test_regenerate_replaces_the_last_reply(chat, qtbot):
    chat.sampling.seed.setText("")
    chat.sampling.temperature.setValue(1.0)
    chat.send("The cat")
    _wait_done(qtbot, chat)
    ids = chat.regenerate()
    assert len(ids) == 1
    _wait_done(qtbot, chat)
    msgs = chat.conv.panes[0].messages
    assert [m.role for m in msgs] == ["user", "assistant"]
    assert msgs[1].stats["finish"] in ("stop", "length")
    assert len(chat.transcripts[0].bubbles) == 2


def test_edit_and_resend(chat, qtbot):
    chat.send("first question")
    _wait_done(qtbot, chat)
    chat.send("second question")
    _wait_done(qtbot, chat)
    assert len(chat.conv.panes[0].messages) == 4
    # the Edit button on the second user message
    bubble = chat.transcripts[0].bubbles[2]
    edit = next(b for b in bubble.findChildren(type(chat.send_btn)) if b.text() == "Edit")
    qtbot.mouseClick(edit, Qt.LeftButton)
    assert chat.input.toPlainText() == "second question"
    assert len(chat.conv.panes[0].messages) == 2
    chat.input.setPlainText("second question, edited")
    qtbot.mouseClick(chat.send_btn, Qt.LeftButton)
    _wait_done(qtbot, chat)
    msgs = chat.conv.panes[0].messages
    assert [m.content for m in msgs if m.role == "user"] == ["first question",
                                                             "second question, edited"]
    assert len(chat.transcripts[0].bubbles) == 4


def test_ab_mode_two_variants_side_by_side(window, chat, qtbot, tmp_path):
    chat.ab_check.setChecked(True)
    chat.model_b.setCurrentText("b")
    assert chat.transcripts[1].isVisible()
    ids = chat.send("A dog and a cat")
    assert len(ids) == 2
    _wait_done(qtbot, chat)
    a, b = chat.conv.panes
    assert a.messages[-1].model == "a" and b.messages[-1].model == "b"
    for pane in (a, b):
        assert pane.messages[0].content == "A dog and a cat"
        assert pane.messages[-1].stats["completion_tokens"] >= 1
    assert chat.transcripts[1].bubbles[-1].stats.text()
    md = chat.conv.to_markdown()
    assert "## A: a" in md and "## B: b" in md
    chat.grab().save(str(tmp_path.parent / "chat_ab.png"))
    # a new chat empties both panes; the saved one opens as it was, both sides drawn again
    conv_id = chat.conv.id
    chat.new_chat()
    assert [len(t.bubbles) for t in chat.transcripts] == [0, 0]
    chat.open_conversation(conv_id)
    assert chat.ab_check.isChecked()
    assert [len(t.bubbles) for t in chat.transcripts] == [2, 2]
    assert chat.transcripts[1].bubbles[-1].message.model == "b"


def test_unknown_model_error_is_shown_inline(chat, qtbot):
    chat.model_a.addItem("ghost")
    chat.model_a.setCurrentText("ghost")
    assert chat.send("hello") == []
    assert "ghost" in chat.error_label.text()
    assert chat.conv.panes[0].messages[-1].stats["finish"] == "error"
    assert not chat.busy()


def test_presets_saved_as_json(chat, window):
    from npu_console.console import presets

    chat.sampling.temperature.setValue(0.33)
    chat.sampling.system.setPlainText("Be brief.")
    chat.sampling.stop.setText("The end, \\n\\n")
    chat.sampling.preset_name.setText("terse")
    chat.sampling.save_btn.click()
    data = json.loads((presets.presets_dir() / "terse.json").read_text())
    assert data["values"]["temperature"] == pytest.approx(0.33)
    assert data["values"]["stop"] == ["The end", "\n\n"]
    chat.sampling.apply_preset("Creative")
    assert chat.sampling.temperature.value() == pytest.approx(1.1)
    chat.sampling.apply_preset("terse")
    assert chat.sampling.system.toPlainText() == "Be brief."
    assert "terse" in [chat.sampling.preset_box.itemText(i)
                       for i in range(chat.sampling.preset_box.count())]


def test_bad_seed_is_a_plain_error(chat):
    chat.sampling.seed.setText("abc")
    assert chat.send("hi") == []
    assert "seed must be a whole number" in chat.error_label.text()


def test_export_markdown_and_json(chat, qtbot, tmp_path):
    from npu_console.console.chat_store import export

    chat.send("export me")
    _wait_done(qtbot, chat)
    md = export(chat.conv, tmp_path / "c.md").read_text()
    assert "export me" in md and "TTFT" in md
    data = json.loads(export(chat.conv, tmp_path / "c.json").read_text())
    assert data["panes"][0]["messages"][0]["content"] == "export me"
    # reopen from the list restores the transcript
    chat.new_chat()
    assert not chat.transcripts[0].bubbles
    chat.open_conversation(data["id"])
    assert next(b.message.content for b in chat.transcripts[0].bubbles) == "export me"


def test_streams_share_a_few_submit_threads(window, chat, qtbot):
    """No thread per stream: the bridge's few submit threads open the requests and the
    handles' callbacks carry their events back."""
    import threading

    from npu_console.console.bridge import SUBMIT_THREADS

    chat.ab_check.setChecked(True)
    for text in ("A dog", "A cat", "A bird"):
        assert len(chat.send(text)) == 2
        _wait_done(qtbot, chat)
    assert all(m.content for m in chat.conv.panes[1].messages if m.role == "assistant")
    names = [t.name for t in threading.enumerate()]
    assert not any(n.startswith("stream-") for n in names), names
    assert 1 <= sum(n.startswith("bridge-submit-") for n in names) <= SUBMIT_THREADS
