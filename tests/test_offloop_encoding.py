"""Chat templates and tokenization never run on the HTTP server's event loop nor on the GUI
thread, and the n choices of one request encode their prompt once. Real engine on the demo
model, real uvicorn, a real window; the encoder is only watched (fakes.faults)."""

from __future__ import annotations

import threading

import httpx
import pytest
from fakes.faults import recording_encoders
from support.api import own_engine, running_server

pytest.importorskip("pytestqt")
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def engine(demo_model_dir):
    with own_engine(demo_model_dir, "demo") as eng:
        yield eng


def test_http_requests_encode_on_worker_threads_once_per_prompt(engine):
    with running_server(engine) as (_, url), recording_encoders(engine) as seen:
        r = httpx.post(url + "/v1/chat/completions", timeout=60, json={
            "messages": [{"role": "user", "content": "Tell me a story"}], "max_tokens": 4,
            "n": 8})
        assert r.status_code == 200 and len(r.json()["choices"]) == 8
        assert len(seen) == 1  # one rendering and tokenization for the 8 choices
        r = httpx.post(url + "/v1/completions", timeout=60, json={
            "prompt": ["Once upon a time", "The dog"], "max_tokens": 4, "n": 2})
        assert r.status_code == 200 and len(r.json()["choices"]) == 4
        assert len(seen) == 3  # one per distinct prompt
    assert seen and not any(name.startswith("npu-console-api") for name in seen), seen


def test_the_chat_page_encodes_off_the_gui_thread(qapp, qtbot, tmp_path, demo_model_dir):
    from support.gui import console_window

    with console_window(qapp, tmp_path, "chat", ((demo_model_dir, "demo"),), wait_ms=120_000) as win:
        chat = win.page("chat")
        chat.sampling.max_tokens.setValue(4)
        with recording_encoders(win.ctx.bridge.engine) as seen:
            assert chat.send("Once upon a time " * 200)
            qtbot.waitUntil(lambda: not chat.live, timeout=60_000)
        assert seen and threading.main_thread().name not in seen, seen
        assert all(name.startswith("bridge-submit-") for name in seen)
        assert chat.conv.panes[0].messages[-1].stats["completion_tokens"] >= 1
