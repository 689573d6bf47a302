"""`npu-console chat --remote URL`: the terminal chat against a real server on loopback."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def server(stories_dir):
    from support.api import keyed_server as serving

    with serving(stories_dir, "stories", "k1", max_running=2) as served:
        yield served


def feed(monkeypatch, lines):
    it = iter(lines)

    def fake_input(prompt=""):
        try:
            return next(it)
        except StopIteration:
            raise EOFError from None

    monkeypatch.setattr("builtins.input", fake_input)


def test_chat_streams_replies_from_the_remote_server(server, monkeypatch, capsys):
    from npu_console.cli.main import main

    engine, url = server
    finished_before = engine.stats().requests_finished
    feed(monkeypatch, ["Tell me a story.", "/reset", "And another one."])
    rc = main(["chat", "--remote", url + "/v1", "--api-key", "k1", "--max-tokens", "12",
               "--temperature", "0"])
    out = capsys.readouterr()
    assert rc == 0, out.err
    assert "stories at " + url in out.err
    replies = [line for line in out.out.splitlines() if line.startswith("bot> ")]
    assert len(replies) == 2 and all(len(r) > len("bot> ") for r in replies)
    assert "(conversation cleared)" in out.out
    assert engine.stats().requests_finished == finished_before + 2  # the server did the work


@pytest.mark.parametrize("argv, message", [
    (["--remote", "http://127.0.0.1:9"], "cannot reach"),
    (["--model", "nope"], "not served"),
    (["--api-key", "wrong"], "refused the API key"),
])
def test_chat_remote_errors_are_one_line(server, monkeypatch, capsys, argv, message):
    from npu_console.cli.main import main

    _, url = server
    feed(monkeypatch, [])
    args = ["chat", "--remote", url, "--api-key", "k1"]
    rc = main(args + argv)
    err = capsys.readouterr().err
    assert rc == 2 and message in err and "Traceback" not in err
