"""`npu-console gui` closes cleanly on SIGTERM and SIGINT, as File > Quit does: exit status 0
within 5 s, no traceback, streams stopped, the API server drained, chats and settings saved.
The console runs offscreen as a real subprocess."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from support.waiting import free_port

pytest.importorskip("PySide6")
pytestmark = [pytest.mark.slow, pytest.mark.gui]

TESTS = Path(__file__).resolve().parent


def gui_env(home: Path) -> dict:
    return {**os.environ, "QT_QPA_PLATFORM": "offscreen", "NPU_CONSOLE_HOME": str(home),
            "NPU_CONSOLE_SETTINGS": str(home / "console.ini"),
            "PYTHONPATH": str(TESTS.parent)}


def stop_and_wait(proc: subprocess.Popen, sig: int) -> tuple[float, str]:
    t0 = time.monotonic()
    proc.send_signal(sig)
    try:
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return time.monotonic() - t0, err


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_while_two_replies_stream_closes_cleanly_and_saves_the_chat(
        sig, tmp_path, demo_model_dir):
    proc = subprocess.Popen(
        [sys.executable, str(TESTS / "fakes" / "gui_scripted_chat.py"), "gui",
         "--model", str(demo_model_dir)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=gui_env(tmp_path))
    conv_id = None
    deadline = time.monotonic() + 240
    while conv_id is None and time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line and proc.poll() is not None:
            break
        if line.startswith("STREAMING "):
            conv_id = line.split()[1]
    assert conv_id, proc.stderr.read() if proc.poll() is not None else "no STREAMING line"
    took, err = stop_and_wait(proc, sig)
    assert proc.returncode == 0, err
    assert took < 5.0, f"closing took {took:.1f} s"
    assert "Traceback" not in err, err
    saved = json.loads((tmp_path / "conversations" / f"{conv_id}.json").read_text())
    assert len(saved["panes"]) == 2
    for pane in saved["panes"]:
        user, reply = pane["messages"][-2:]
        assert user["content"] == "Once upon a time"
        assert reply["role"] == "assistant" and reply["content"]  # what had streamed
    ini = (tmp_path / "console.ini").read_text()
    assert "geometry" in ini  # the window's state was saved as on File > Quit


def test_sigterm_drains_the_api_server_and_stops_its_streams(tmp_path, demo_model_dir):
    port = free_port()
    (tmp_path / "console.ini").write_text(
        f"[server]\nautostart=true\nport={port}\nlan=false\nmax_queue=64\n")
    proc = subprocess.Popen(
        [sys.executable, "-m", "npu_console.cli.main", "gui", "--model", str(demo_model_dir)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=gui_env(tmp_path))
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                if httpx.get(url + "/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        assert httpx.get(url + "/health", timeout=2).status_code == 200
        endings: list[list[str]] = [[], []]
        started = threading.Barrier(3, timeout=60)

        def stream(i: int) -> None:
            with httpx.stream("POST", url + "/v1/completions", timeout=60, json={
                    "prompt": "Once upon a time", "max_tokens": 1000, "ignore_eos": True,
                    "stream": True}) as r:
                first = True
                for line in r.iter_lines():
                    if line.startswith("data: "):
                        endings[i].append(line[6:])
                        if first:
                            first = False
                            started.wait()
        readers = [threading.Thread(target=stream, args=(i,)) for i in range(2)]
        for t in readers:
            t.start()
        started.wait()  # both replies are streaming
    except BaseException:
        proc.kill()
        proc.communicate()
        raise
    took, err = stop_and_wait(proc, signal.SIGTERM)
    for t in readers:
        t.join(30)
    assert proc.returncode == 0, err
    assert took < 5.0, f"closing took {took:.1f} s"
    assert "Traceback" not in err, err
    for events in endings:  # each stream ended properly: a finish reason, then [DONE]
        assert events[-1] == "[DONE]"
        finishes = [json.loads(e)["choices"][0]["finish_reason"] for e in events[:-1]
                    if e.startswith("{") and json.loads(e).get("choices")]
        assert finishes[-1] in ("cancelled", "length", "abort", "stop"), finishes[-3:]
    with pytest.raises(httpx.ConnectError):
        httpx.get(url + "/health", timeout=2)
