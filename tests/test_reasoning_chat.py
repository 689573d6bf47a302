"""The chat page's Thinking block, the A/B view and demo mode, through real widgets on a real
engine serving the reasoning demo model (and the demo model, which does not reason)."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("PySide6")
pytest.importorskip("pytestqt")

from fakes.slow_steps import slowed_steps
from npu_console.console.chat_store import export
from PySide6.QtCore import Qt
from support.gui import console_window, fresh_chat

WAIT_MS = 120_000
QUESTION = "Spell rocket backwards."
pytestmark = [pytest.mark.slow, pytest.mark.gui]


@pytest.fixture(scope="module")
def window(qapp, think_model_dir, demo_model_dir, tmp_path_factory):
    home = tmp_path_factory.mktemp("think-chat-home")
    with console_window(qapp, home, "chat", ((think_model_dir, "think"), (demo_model_dir, "demo")),
                        WAIT_MS) as win:
        yield win


@pytest.fixture
def chat(window, qtbot):
    return fresh_chat(window, qtbot, "think", "Precise (greedy)", 200, WAIT_MS)


def _send(qtbot, page, text=QUESTION):
    page.input.setPlainText(text)
    ids = page.send()
    assert ids
    qtbot.waitUntil(lambda: not page.busy(), timeout=WAIT_MS)
    return ids


def test_the_model_list_is_read_on_the_gui_thread_as_it_arrives(window, chat, qtbot):
    """Two loads finishing on two threads once delivered the older snapshot of the model list
    last, and a stale [demo] left the chat's box with demo alone (the chat answered from it).
    Workers now only say that the list changed; the host reads it on the GUI thread as each
    announcement arrives, so every page gets the engine's list of that moment, and the boxes
    keep every model and the user's pick."""
    import threading

    host = window.ctx.engine_host
    got = []
    spy = lambda models: got.append((threading.current_thread() is threading.main_thread(),
                                     [m.name for m in models], [m.name for m in host.models()]))
    host.models_changed.connect(spy, Qt.DirectConnection)  # runs where models_changed is emitted
    try:
        for _ in range(4):  # each unload (of nothing) announces from its own worker thread
            host.unload("no-such-model")
        qtbot.waitUntil(lambda: len(got) == 4, timeout=10000)
    finally:
        host.models_changed.disconnect(spy)
    for on_gui_thread, delivered, current in got:
        assert on_gui_thread and delivered == current and {"think", "demo"} <= set(delivered)
    assert chat.model_a.findText("think") >= 0 and chat.model_a.findText("demo") >= 0
    assert chat.model_a.currentText() == "think"


def test_thinking_block_streams_live_then_folds_above_the_answer(window, chat, qtbot, tmp_path):
    seen = []  # the bubble as each reasoning flush left it (the page's slot runs first)

    def watch(rid, text, n):
        live = chat.live.get(rid)
        if live is not None:
            b = live.bubble
            seen.append((b.thinking.isVisible(), b.thinking.expanded, b.thinking.text.text(),
                         b.thinking.toggle.text(), live.message.content))

    window.ctx.bridge.reasoning.connect(watch)
    try:
        # 10 ms a step: on a quiet machine the whole thought otherwise fits in one flush
        with slowed_steps(window.ctx.bridge.engine):
            _send(qtbot, chat)
    finally:
        window.ctx.bridge.reasoning.disconnect(watch)
    reply = chat.conv.panes[0].messages[1]
    assert reply.reasoning and reply.content
    assert "<think>" not in reply.content + reply.reasoning
    assert "</think>" not in reply.content + reply.reasoning
    # live: open, growing, with a running count, before any answer text
    # (a first flush may carry only the tag's tokens: no text yet, so no block yet)
    assert not any(vis for vis, _, text, _, _ in seen if not text)
    seen = [s for s in seen if s[2]]
    assert len(seen) >= 2
    assert all(vis and exp and not content for vis, exp, _, _, content in seen)
    texts = [t for _, _, t, _, _ in seen]
    assert texts == sorted(texts, key=len) and len(texts[0]) < len(texts[-1])
    assert seen[-1][3].startswith("▾ Thinking… · ") and " tokens · " in seen[-1][3]
    # finished: folded above the answer, with its own token count and time
    bubble = chat.transcripts[0].bubbles[1]
    block = bubble.thinking
    assert block.isVisible() and not block.expanded and not block.text.isVisible()
    n = reply.stats["reasoning_tokens"]
    assert 0 < n < reply.stats["completion_tokens"]
    assert block.toggle.text() == f"▸ Thinking · {n} tokens · {reply.stats['reasoning_s']:.1f} s"
    assert block.text.text() == reply.reasoning
    lay = bubble.layout()
    assert lay.indexOf(block) < lay.indexOf(bubble.body)
    assert reply.content.split()[0] in bubble.body.text()
    # per-message stats: time to first answer token after TTFT
    assert reply.stats["first_answer_s"] > reply.stats["ttft_s"] > 0
    assert "first answer token" in bubble.stats.text()
    # a click opens it
    qtbot.mouseClick(block.toggle, Qt.LeftButton)
    assert block.expanded and block.text.isVisible()
    # the exports keep the reasoning apart from the answer
    md = export(chat.conv, tmp_path / "c.md").read_text()
    assert f"<details><summary>Thinking · {n} tokens" in md
    assert reply.reasoning in md and md.index(reply.reasoning) < md.index(reply.content)
    data = json.loads(export(chat.conv, tmp_path / "c.json").read_text())
    saved = data["panes"][0]["messages"][1]
    assert (saved["reasoning"], saved["content"]) == (reply.reasoning, reply.content)
    # the next turn sends the answer only, and a reopened chat shows the block folded
    assert chat.conv.panes[0].history()[1] == {"role": "assistant", "content": reply.content}
    chat.open_conversation(chat.conv.id)
    again = chat.transcripts[0].bubbles[1]
    assert again.message.reasoning == reply.reasoning
    qtbot.waitUntil(again.thinking.isVisible, timeout=5_000)
    assert not again.thinking.expanded


def test_unclosed_thinking_shows_no_answer(chat, qtbot):
    chat.sampling.max_tokens.setValue(10)
    _send(qtbot, chat)
    reply = chat.conv.panes[0].messages[1]
    assert reply.reasoning and reply.content == "" and reply.stats["finish"] == "length"
    bubble = chat.transcripts[0].bubbles[1]
    assert bubble.thinking.isVisible()
    assert "ended while thinking" in bubble.body.text()


def test_ab_view_shows_thinking_only_where_there_is_some(chat, qtbot):
    chat.ab_check.setChecked(True)
    chat.model_b.setCurrentText("demo")
    _send(qtbot, chat, "What does json.dumps do?")
    a, b = (chat.transcripts[i].bubbles[1] for i in (0, 1))
    assert a.message.reasoning and a.thinking.isVisible()
    assert b.message.content and not b.message.reasoning
    assert not b.thinking.isVisible()  # no empty thinking block
    assert "first answer token" not in b.stats.text()
    assert "reasoning_tokens" not in b.message.stats


def test_demo_mode_shows_the_thinking_then_the_answer(window, qtbot):
    demo = window.open_demo()
    try:
        demo.panes[0][0].setCurrentText("think")
        demo.panes[1][0].setCurrentText("demo")
        ids = demo.send(QUESTION)
        assert len(ids) == 2
        qtbot.waitUntil(lambda: not demo.busy(), timeout=WAIT_MS)
        think = demo.panes[0][1].toPlainText()
        plain = demo.panes[1][1].toPlainText()
    finally:
        demo.close()
    assert "Thinking: " in think and "thought for" in think and "first answer token" in think
    assert "<think>" not in think and "</think>" not in think
    head, _, answer = think.partition("Thinking: ")[2].partition("\n\n")
    assert head.strip() and answer.strip()
    assert "Thinking" not in plain and "thought for" not in plain
