"""Server page: the switch starts a real uvicorn server over the console's engine that the
official openai client can use, the request log fills, a busy port gets a clear message."""

from __future__ import annotations

import socket

import pytest

pytest.importorskip("PySide6")
pytest.importorskip("pytestqt")
openai = pytest.importorskip("openai")

import httpx
from npu_console.console.server_service import AdvancedOptions
from npu_console.console.widgets.server_advanced import ServerAdvanced
from PySide6.QtCore import Qt
from support.gui import console_window
from support.waiting import free_port

WAIT_MS = 90_000
pytestmark = [pytest.mark.slow, pytest.mark.gui]


@pytest.fixture(scope="module")
def window(qapp, stories_dir, tmp_path_factory):
    home = tmp_path_factory.mktemp("server-home")
    with console_window(qapp, home, "server", ((stories_dir, "stories"),), wait_ms=WAIT_MS) as win:
        yield win


@pytest.fixture
def page(window, qtbot):
    p = window.page("server")
    if p.running():
        p.stop()
        qtbot.waitUntil(lambda: not p.running() and not p.busy(), timeout=WAIT_MS)
    p.lan.setChecked(False)
    p.api_key.setText("")
    p.advanced.set_options(AdvancedOptions())
    return p


def test_switch_serves_the_openai_client_and_stops(window, page, qtbot):
    port = free_port()
    page.port.setValue(port)
    qtbot.mouseClick(page.switch, Qt.LeftButton)
    qtbot.waitUntil(lambda: page.running() and not page.busy(), timeout=WAIT_MS)
    assert page.url == f"http://127.0.0.1:{port}"
    assert window.server_lamp.state == "on" and "server on" in window.server_label.text()
    assert page.switch.text() == "Stop server"
    assert f"127.0.0.1:{port}/v1" in page.python_text.toPlainText()
    assert '"model": "stories"' in page.curl_text.toPlainText()

    client = openai.OpenAI(base_url=page.url + "/v1", api_key="unused", max_retries=0,
                           timeout=60)
    assert [m.id for m in client.models.list().data] == ["stories"]
    reply = client.chat.completions.create(
        model="stories", messages=[{"role": "user", "content": "Once upon a time"}],
        max_tokens=8, temperature=0)
    assert reply.usage.completion_tokens >= 1
    assert isinstance(reply.choices[0].message.content, str)
    # the request log row arrives through the queued signal
    qtbot.waitUntil(lambda: any("/v1/chat/completions" in r[1] and r[2] == "200"
                                for r in page.log_rows()), timeout=10_000)
    row = next(r for r in page.log_rows() if "/v1/chat/completions" in r[1])
    assert row[3] == "stories" and "→" in row[4] and row[6].endswith("ms")

    qtbot.mouseClick(page.switch, Qt.LeftButton)
    qtbot.waitUntil(lambda: not page.running() and not page.busy(), timeout=WAIT_MS)
    assert window.server_lamp.state == "off"
    from npu_console.engine.api.ports import port_in_use

    assert not port_in_use("127.0.0.1", port)
    with pytest.raises(openai.APIConnectionError):
        client.models.list()


def test_port_in_use_shows_a_clear_message(window, page, qtbot):
    blocker = socket.socket()
    blocker.bind(("127.0.0.1", 0))
    blocker.listen(1)
    port = blocker.getsockname()[1]
    try:
        page.port.setValue(port)
        assert page.check_port() is False
        assert f"port {port}" in page.port_status.text()
        assert "already in use" in page.port_status.text()
        assert page.start()
        qtbot.waitUntil(lambda: not page.busy(), timeout=WAIT_MS)
        assert not page.running()
        assert "already in use" in page.error_text and str(port) in page.error_text
        assert page.message.isVisible() and "Traceback" not in page.message.text()
        assert window.server_lamp.state == "error"
    finally:
        blocker.close()
    assert page.check_port() is True


def test_lan_needs_an_api_key(page, window):
    page.lan.setChecked(True)
    assert page.host() == "0.0.0.0"
    assert page.lan_warning.isVisibleTo(page)
    assert not page.switch.isEnabled()
    assert page.start() is False and "API key" in page.error_text
    key = page.generate_key()
    assert len(key) >= 24 and page.api_key.text() == key
    assert page.switch.isEnabled()
    # the snippets mask the key unless it is shown; Copy snippet copies a working one
    assert key not in page.curl_text.toPlainText() + page.python_text.toPlainText()
    assert f"Bearer ••••••••{key[-4:]}" in page.curl_text.toPlainText()
    page.show_key.setChecked(True)
    assert f"Bearer {key}" in page.curl_text.toPlainText()
    page.show_key.setChecked(False)
    assert key not in page.curl_text.toPlainText()
    assert f"Bearer {key}" in page.snippet_text(reveal=True)
    page.autostart.setChecked(True)
    assert window.ctx.settings.value("server/autostart", type=bool) is True
    page.autostart.setChecked(False)


def _start(page, qtbot) -> None:
    page.port.setValue(free_port())
    assert page.start()
    qtbot.waitUntil(lambda: page.running() and not page.busy(), timeout=WAIT_MS)


def _stop(page, qtbot) -> None:
    assert page.stop()
    qtbot.waitUntil(lambda: not page.running() and not page.busy(), timeout=WAIT_MS)


def test_advanced_options_reach_the_server_and_are_kept(window, page, qtbot, stories_dir):
    """Allowed hosts, the request timeout and --expose-paths set in the Advanced group apply to
    the server the page starts next, and are kept in the settings."""
    adv = page.advanced

    def get_models(host: str) -> httpx.Response:
        return httpx.get(page.url + "/v1/models", headers={"Host": host}, timeout=30)

    _start(page, qtbot)  # serve's defaults: loopback names only, no paths
    assert get_models("api.example").status_code == 400
    assert get_models("localhost").json()["data"][0]["root"] == "stories"
    _stop(page, qtbot)

    adv.set_expanded(True)
    adv.allowed_hosts.setText("api.example, Other.Example")
    adv.request_timeout.setValue(0.1)
    adv.expose_paths.setChecked(True)
    _start(page, qtbot)
    try:
        assert not adv.body.isEnabled() and "stop it" in adv.note.text()  # read-only meanwhile
        assert get_models("evil.example").status_code == 400
        for host in ("api.example", "other.example", "localhost"):
            assert get_models(host).status_code == 200, host
        root = get_models("api.example").json()["data"][0]["root"]
        assert root != "stories" and root.endswith("stories260K")
        r = httpx.post(page.url + "/v1/completions", timeout=60, json={
            "prompt": "Once upon a time", "max_tokens": 400, "n": 8, "ignore_eos": True})
        assert r.status_code == 504 and r.json()["error"]["code"] == "request_timeout"
    finally:
        _stop(page, qtbot)
    assert adv.body.isEnabled()
    kept = ServerAdvanced(window.ctx.settings).options()
    assert kept == adv.options() and kept.allowed_hosts == "api.example, Other.Example"
    assert kept.request_timeout_s == 0.1 and kept.expose_paths
