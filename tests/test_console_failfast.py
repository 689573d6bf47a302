"""The console over a failing engine: a dead loop shows its reason above every page with a
Restart button that revives it, and the Server page raises the queue limit safely while
hundreds of HTTP requests are in flight. Real windows, a real engine on the demo model, a
real uvicorn server; faults go in through fakes.faults."""

from __future__ import annotations

import asyncio
import threading

import httpx
import pytest

pytest.importorskip("PySide6")
pytest.importorskip("pytestqt")

from fakes.faults import fatal_fault
from fakes.slow_steps import slowed_steps
from PySide6.QtCore import Qt
from support.gui import console_window

WAIT_MS = 90_000
pytestmark = [pytest.mark.slow, pytest.mark.gui]


@pytest.fixture
def window(qapp, demo_model_dir, tmp_path):
    with console_window(qapp, tmp_path, "chat", ((demo_model_dir, "demo"),), wait_ms=WAIT_MS) as win:
        yield win


def test_a_crash_shows_its_reason_and_restart_revives_the_engine(window, qtbot):
    chat = window.page("chat")
    engine = window.ctx.bridge.engine
    banner = window.crash_banner
    assert banner.isHidden()
    chat.sampling.max_tokens.setValue(8)
    with fatal_fault(engine):
        assert chat.send("Once upon a time")
        qtbot.waitUntil(lambda: not chat.live, timeout=WAIT_MS)
    reply = chat.conv.panes[0].messages[-1]
    assert reply.stats["finish"] == "error" and "engine loop crashed" in reply.stats["error"]
    qtbot.waitUntil(lambda: banner.isVisible(), timeout=WAIT_MS)
    assert "The engine stopped" in banner.label.text()
    assert "injected: the engine thread was killed" in banner.label.text()
    assert window.engine_label.text() == "engine: error"
    assert banner.restart.isEnabled()
    qtbot.mouseClick(banner.restart, Qt.LeftButton)
    qtbot.waitUntil(lambda: banner.isHidden(), timeout=WAIT_MS)
    assert engine.crash_reason is None
    assert chat.send("Once upon a time")
    qtbot.waitUntil(lambda: not chat.live, timeout=WAIT_MS)
    assert chat.conv.panes[0].messages[-1].stats["finish"] in ("length", "stop")


async def _burst(url: str, n: int) -> list[int]:
    limits = httpx.Limits(max_connections=n + 10, max_keepalive_connections=n + 10)
    async with httpx.AsyncClient(limits=limits, timeout=180) as client:
        async def one(i):
            r = await client.post(url + "/v1/completions", json={
                "prompt": f"Once upon a time {i}", "max_tokens": 8})
            if r.status_code == 200:
                assert r.json()["usage"]["completion_tokens"] >= 1
            return r.status_code
        return await asyncio.gather(*(one(i) for i in range(n)))


def test_raising_the_queue_limit_with_300_requests_in_flight(window, qtbot):
    page = window.page("server")
    window.show_page("server")
    engine = window.ctx.bridge.engine
    page.max_queue.setValue(120)
    assert engine.config.max_waiting == 120
    assert page.start()
    qtbot.waitUntil(lambda: page.running() and not page.busy(), timeout=WAIT_MS)
    url = page.url
    statuses: list[int] = []
    with slowed_steps(engine, 0.002):
        burst = threading.Thread(target=lambda: statuses.extend(asyncio.run(_burst(url, 300))))
        burst.start()
        qtbot.waitUntil(lambda: engine.stats().waiting >= 60, timeout=WAIT_MS)
        page.max_queue.setValue(1000)  # while the requests are in flight
        assert engine.config.max_waiting == 1000
        qtbot.waitUntil(lambda: not burst.is_alive(), timeout=240_000)
    assert len(statuses) == 300 and set(statuses) <= {200, 429}
    assert statuses.count(200) >= 120
    assert engine.crash_reason is None and engine.stats().state == "ready"
    r = httpx.post(url + "/v1/completions", json={"prompt": "Once", "max_tokens": 4},
                   timeout=60)
    assert r.status_code == 200
    assert window.ctx.settings.value("server/max_queue") in (1000, "1000")
    page.stop()
    qtbot.waitUntil(lambda: not page.running() and not page.busy(), timeout=WAIT_MS)
