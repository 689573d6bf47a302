"""The GUI attached to headless `npu-console serve` processes (issue 25): File > Connect to server
driven through its widgets, the server remembered with its key outside the INI, chat and A/B on
a remote model, Benchmark aimed at the server, the Server page's read-only view, stop, and a
server killed in the middle of a stream.

Real servers: `npu-console serve` child processes on loopback with --api-key, serving the demo
model (one as is; one through tests/fakes/serve_slowed.py, whose steps are held a little so a
test can act while a reply streams). The window's own engine serves the demo model as "local".
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

pytest.importorskip("PySide6")
pytest.importorskip("pytestqt")

from npu_console.console.engines import LOCAL, host_label
from npu_console.console.servers import ServerStore
from npu_console.console.settings import open_settings
from npu_console.console.widgets.servers_menu import fill_servers_menu
from PySide6.QtCore import Qt, QTimer
from support.gui import console_window

ROOT = Path(__file__).resolve().parent.parent
KEY = "sk-remote-0123456789abcdef"
WAIT_MS = 120_000
pytestmark = [pytest.mark.slow, pytest.mark.gui]


def _start_serve(log: Path, *command: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "SLOW_STEP_S": "0.03"}
    with log.open("w") as fh:  # a file, not a pipe: nobody has to keep reading it
        return subprocess.Popen([sys.executable, *command], cwd=ROOT, env=env,
                                stdout=subprocess.DEVNULL, stderr=fh)


def _url_of(proc: subprocess.Popen, log: Path, timeout_s: float = 240.0) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        m = re.search(r"at (http://\S+)/v1", log.read_text())
        if m:
            return m.group(1)
        if proc.poll() is not None:
            break
        time.sleep(0.2)
    raise AssertionError(f"serve did not start: {log.read_text()[-2000:]}")


@pytest.fixture(scope="module")
def servers(demo_model_dir, tmp_path_factory):
    """{"stable": (proc, url), "slow": (proc, url)}, both started at once."""
    logs = tmp_path_factory.mktemp("serve-logs")
    args = ("serve", "--model", str(demo_model_dir), "--name", "demo", "--port", "0",
            "--api-key", KEY, "--threads", "1", "--log-level", "warning", "--grace", "1",
            "--telemetry-source", "off")
    procs = {"stable": _start_serve(logs / "stable.log", "-m", "npu_console.cli.main",
                                    *args),
             "slow": _start_serve(logs / "slow.log", str(ROOT / "tests/fakes/serve_slowed.py"),
                                  *args)}
    try:
        yield {k: (p, _url_of(p, logs / f"{k}.log")) for k, p in procs.items()}
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
            p.wait(30)


@pytest.fixture(scope="module")
def window(qapp, demo_model_dir, servers, tmp_path_factory):
    home = tmp_path_factory.mktemp("remote-home")
    with console_window(qapp, home, "chat", ((demo_model_dir, "local"),), wait_ms=WAIT_MS) as win:
        yield win


def _attach(window, qtbot, url: str):
    """The connection to `url` (attached without the dialog), its models read."""
    remote = window.ctx.remote
    if not remote.is_connected(url):
        remote.connect_server(url, KEY, remember=False)
    qtbot.waitUntil(lambda: (c := remote.engines.get(url)) is not None and bool(c.models),
                    timeout=30_000)
    return remote.engines.get(url)


@pytest.fixture
def chat(window, qtbot):
    page = window.page("chat")
    window.show_page("chat")
    qtbot.waitUntil(lambda: not page.busy(), timeout=WAIT_MS)
    if page.ab_check.isChecked():
        page.ab_check.setChecked(False)
    page.new_chat()
    page.sampling.apply_preset("Balanced")
    page.sampling.max_tokens.setValue(32)
    page.sampling.seed.setText("7")
    return page


def _labels(box) -> list[str]:
    return [box.itemText(i) for i in range(box.count())]


def _chat_requests(url: str) -> float:
    text = httpx.get(url + "/metrics", headers={"Authorization": f"Bearer {KEY}"}).text
    return sum(float(line.rpartition(" ")[2]) for line in text.splitlines()
               if line.startswith("npu_console_api_requests_total{")
               and 'route="/v1/chat/completions"' in line)


def _send_and_wait(qtbot, page, text: str):
    page.input.setPlainText(text)
    qtbot.mouseClick(page.send_btn, Qt.LeftButton)
    qtbot.waitUntil(lambda: not page.busy(), timeout=WAIT_MS)
    return [pane.messages[-1] for pane in page.conv.panes]


def test_connect_dialog_tests_connects_and_remembers_the_server(window, servers, qtbot):
    _, url = servers["stable"]
    ctx = window.ctx
    window.connect_action.trigger()  # File > Connect to server…
    dlg = window.connect_dialog
    assert dlg.isVisible()
    dlg.url_edit.setText(url)
    dlg.key_edit.setText("not-the-key")
    qtbot.mouseClick(dlg.test_btn, Qt.LeftButton)
    qtbot.waitUntil(lambda: dlg.result is not None and not dlg.busy(), timeout=30_000)
    assert not dlg.result.ok and "refused the API key" in dlg.result_label.text()
    assert not ctx.remote.is_connected(url)

    dlg.key_edit.setText(KEY)
    qtbot.mouseClick(dlg.test_btn, Qt.LeftButton)
    qtbot.waitUntil(lambda: dlg.result is not None and not dlg.busy(), timeout=30_000)
    assert dlg.result.ok and dlg.result.models == ("demo",) and dlg.result.keyed is True
    assert "demo" in dlg.result_label.text() and "API key required" in dlg.result_label.text()
    assert not ctx.remote.is_connected(url)  # Test only looks

    with qtbot.waitSignal(ctx.remote.connected, timeout=30_000) as connected:
        qtbot.mouseClick(dlg.connect_btn, Qt.LeftButton)
    assert connected.args == [url, ""] and not dlg.isVisible()
    conn = ctx.engines.get(url)
    assert [m.name for m in conn.models] == ["demo"] and conn.keyed and conn.reachable
    fleet = getattr(ctx, "fleet", None)  # the dashboard's fleet view watches it too
    if fleet is not None:
        assert [(r.url, r.api_key) for r in fleet.refs()] == [(url, KEY)]

    # remembered (most recent first) with its key, which is not in the INI
    assert [s.url for s in ctx.remote.servers.list()] == [url]
    ctx.settings.sync()
    ini = Path(ctx.settings.fileName()).read_text()
    assert url in ini and KEY not in ini
    assert ServerStore(open_settings(ctx.settings.fileName())).key(url) == KEY
    where = ctx.remote.servers.where(url)
    if "keyring" not in where:  # the private file
        path = Path(where.split(" (mode")[0])
        assert path.read_text().strip() == KEY and path.stat().st_mode & 0o777 == 0o600

    # File > Servers: connected (✓); Disconnect, then Connect again with the stored key
    menu = window.servers_menu
    fill_servers_menu(menu, ctx)
    assert [a.text() for a in menu.actions()] == [f"✓ {host_label(url)}"]
    sub = menu.actions()[0].menu()
    next(a for a in sub.actions() if a.text() == "Disconnect").trigger()
    assert not ctx.remote.is_connected(url)
    assert fleet is None or fleet.refs() == []
    fill_servers_menu(menu, ctx)
    assert [a.text() for a in menu.actions()] == [host_label(url)]
    # the worker thread fills the connection before `connected` reaches the GUI thread: wait for
    # the signal, after which every view (the Server page's picker too) has been told
    with qtbot.waitSignal(ctx.remote.connected, timeout=30_000) as connected:
        next(a for a in menu.actions()[0].menu().actions() if a.text() == "Connect").trigger()
    assert connected.args == [url, ""]
    assert ctx.engines.get(url).models and ctx.engines.get(url).keyed

    # the Server page shows it read-only; the status bar names it
    server = window.page("server")
    window.show_page("server")
    server.select_server(url)
    assert server.remote_view.isVisible() and not server.switch.isVisible()
    assert server.remote_view.fields["URL"].text() == url
    assert server.remote_view.fields["API key"].text().startswith("sent")
    assert "waiting" in server.remote_view.fields["Queue"].text()
    assert server.remote_view.rows()[0][0] == "demo"
    assert window.engine_label.text().startswith(f"engine: {host_label(url)}")
    server.select_server(None)
    assert server.switch.isVisible() and not server.remote_view.isVisible()
    assert ctx.remote.focus == LOCAL and host_label(url) not in window.engine_label.text()


def test_chat_streams_from_a_remote_model(window, servers, chat, qtbot):
    _, url = servers["stable"]
    _attach(window, qtbot, url)
    label = f"demo @ {host_label(url)}"
    qtbot.waitUntil(lambda: label in _labels(chat.model_a), timeout=10_000)
    assert _labels(chat.model_a)[0] == "local"
    chat.model_a.setCurrentText(label)
    assert window.engine_label.text().startswith(f"engine: {host_label(url)}")
    served = _chat_requests(url)
    chunks = []
    window.ctx.bridge.tokens.connect(lambda rid, text: chunks.append(text))
    (reply,) = _send_and_wait(qtbot, chat, "Hello! Who are you?")
    assert reply.content.strip() and reply.model == label
    assert "".join(chunks) == reply.content
    s = reply.stats
    assert s["finish"] in ("stop", "length") and s["error"] is None
    assert s["ttft_s"] > 0 and s["completion_tokens"] >= 1
    assert s["prompt_tokens"] > 0  # the server's usage chunk
    bubble = chat.transcripts[0].bubbles[-1]
    assert "TTFT" in bubble.stats.text() and "finish" in bubble.stats.text()
    if s["completion_tokens"] > 1:
        assert "tok/s" in bubble.stats.text()
    assert _chat_requests(url) == served + 1  # the server did the work


def test_ab_puts_a_local_model_beside_a_remote_one_or_two_servers(window, servers, chat, qtbot):
    _, url = servers["stable"]
    _attach(window, qtbot, url)
    label = f"demo @ {host_label(url)}"
    qtbot.waitUntil(lambda: label in _labels(chat.model_b), timeout=10_000)
    chat.model_a.setCurrentText("local")
    chat.ab_check.setChecked(True)
    chat.model_b.setCurrentText(label)
    served = _chat_requests(url)
    a, b = _send_and_wait(qtbot, chat, "Tell me about the sea.")
    for reply in (a, b):
        assert reply.content.strip() and reply.stats["finish"] in ("stop", "length")
        assert reply.stats["ttft_s"] > 0
    assert a.model == "local" and b.model == label
    assert _chat_requests(url) == served + 1  # B only; A ran in this console

    # or two servers side by side
    other = f"demo @ {host_label(_attach(window, qtbot, servers['slow'][1]).url)}"
    qtbot.waitUntil(lambda: other in _labels(chat.model_a), timeout=10_000)
    chat.model_a.setCurrentText(other)
    a, b = _send_and_wait(qtbot, chat, "And about the mountains?")
    assert (a.model, b.model) == (other, label)
    assert all(r.content.strip() and r.stats["finish"] in ("stop", "length") for r in (a, b))


def test_benchmark_targets_the_connected_server(window, servers, qtbot):
    _, url = servers["stable"]
    _attach(window, qtbot, url)
    page = window.page("benchmark")
    window.show_page("benchmark")
    page.tabs.setCurrentIndex(1)
    qtbot.waitUntil(lambda: page.server_box.findData(url) >= 0, timeout=10_000)
    page.target.select_server(url)
    assert page.target_server.isChecked()
    assert window.engine_label.text().startswith(f"engine: {host_label(url)}")
    page.num_prompts.setValue(3)
    page.mode_conc.setChecked(True)
    page.concurrency.setValue(1)
    page.s_input.setValue(8)
    page.s_output.setValue(4)
    page.slo_ttft.setValue(0)
    page.slo_tpot.setValue(0)
    assert page.start() is not None
    qtbot.waitUntil(lambda: not page.busy(), timeout=WAIT_MS)
    assert page.last_error == ""
    rec = page.record
    assert rec.kind == "serving" and rec.document["settings"]["base_url"] == url
    assert rec.document["metrics"]["completed"] == 3 and rec.document["metrics"]["failed"] == 0
    # the offline sweep runs in this console: its tab names this console's engine
    page.tabs.setCurrentIndex(0)
    assert window.ctx.remote.focus == LOCAL


def test_stop_ends_a_remote_stream(window, servers, chat, qtbot):
    _, url = servers["slow"]
    _attach(window, qtbot, url)
    label = f"demo @ {host_label(url)}"
    qtbot.waitUntil(lambda: label in _labels(chat.model_a), timeout=10_000)
    chat.model_a.setCurrentText(label)
    chat.sampling.max_tokens.setValue(900)
    chat.input.setPlainText("Write a long story about a lighthouse keeper.")
    qtbot.mouseClick(chat.send_btn, Qt.LeftButton)
    reply = chat.conv.panes[0].messages[-1]
    qtbot.waitUntil(lambda: bool(reply.content), timeout=WAIT_MS)
    qtbot.mouseClick(chat.stop_btn, Qt.LeftButton)
    qtbot.waitUntil(lambda: not chat.busy(), timeout=10_000)
    assert reply.stats["finish"] == "cancelled" and reply.content


def test_a_server_killed_mid_stream_ends_the_reply_with_an_error(window, servers, chat, qtbot):
    proc, url = servers["slow"]
    conn = _attach(window, qtbot, url)
    label = f"demo @ {host_label(url)}"
    qtbot.waitUntil(lambda: label in _labels(chat.model_a), timeout=10_000)
    chat.model_a.setCurrentText(label)
    chat.sampling.max_tokens.setValue(900)
    chat.input.setPlainText("Write a long story about a lighthouse keeper.")
    qtbot.mouseClick(chat.send_btn, Qt.LeftButton)
    reply = chat.conv.panes[0].messages[-1]
    qtbot.waitUntil(lambda: bool(reply.content), timeout=WAIT_MS)

    # the longest stretch the event loop goes without running a 20 ms timer
    ticks = [time.monotonic()]
    gaps = []
    timer = QTimer()
    timer.timeout.connect(lambda: (gaps.append(time.monotonic() - ticks[-1]),
                                   ticks.append(time.monotonic())))
    timer.start(20)
    proc.kill()
    qtbot.waitUntil(lambda: not chat.busy(), timeout=10_000)  # no hang
    assert reply.stats["finish"] == "error" and reply.stats["error"]
    bubble = chat.transcripts[0].bubbles[-1]
    assert "error:" in bubble.stats.text() and "▍" not in bubble.body.text()
    assert chat.error_label.text() == reply.stats["error"]
    # the connection turns unreachable; the window kept running its event loop meanwhile
    qtbot.waitUntil(lambda: bool(conn.error), timeout=20_000)
    timer.stop()
    assert max(gaps) < 2.0, f"the event loop stalled for {max(gaps):.2f} s"

    # a new message on a remote model that is gone fails at once, in that message
    (gone,) = _send_and_wait(qtbot, chat, "Are you there?")
    assert gone.stats["finish"] == "error" and "cannot reach" in gone.stats["error"]
    # and the local model still answers
    chat.model_a.setCurrentText("local")
    (local,) = _send_and_wait(qtbot, chat, "Hello again.")
    assert local.content.strip() and local.stats["finish"] in ("stop", "length")
    assert window.ctx.remote.focus == LOCAL
