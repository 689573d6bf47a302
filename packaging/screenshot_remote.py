"""The console attached to a headless server (issue 25): the Connect dialog after its Test, a chat
streaming from the server's model, and A/B with this console's model beside the server's.

`python packaging/screenshot_remote.py OUT_DIR` (offscreen by default). Starts a real
`npu-console serve` child process with an API key on loopback (SmolLM2-135M-Instruct from
the development fixtures, tests/support/shared.py, when it is there, else the demo model), and a real window whose own engine runs the
demo model.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))  # support.shared: the development fixtures
from support.shared import SMOLLM2_GGUF

KEY = "sk-shots-0123456789abcdef"
SMOLLM2 = SMOLLM2_GGUF


def start_server(log: Path) -> tuple[subprocess.Popen, str, str]:
    """(process, base URL, model id) of a keyed `serve` on a free loopback port."""
    from npu_console.engine.paths import DEMO_MODEL_DIR

    model, name = (SMOLLM2, "smollm2") if SMOLLM2.exists() else (DEMO_MODEL_DIR, "demo")
    with log.open("w") as fh:
        proc = subprocess.Popen(
            [sys.executable, "-m", "npu_console.cli.main", "serve", "--model", str(model),
             "--name", name, "--port", "0", "--api-key", KEY, "--log-level", "warning",
             # one torch thread: beside the window's own engine on a small shared machine, a
             # second OpenMP thread mostly spins waiting for a core (decode ran ~10x slower)
             "--threads", "1", "--telemetry-source", "off"],
            cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.DEVNULL,
            stderr=fh)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        m = re.search(r"at (http://\S+)/v1", log.read_text())
        if m:
            return proc, m.group(1), name
        if proc.poll() is not None:
            break
        time.sleep(0.5)
    proc.kill()
    raise SystemExit(f"serve did not start: {log.read_text()[-1500:]}")


def capture_remote(out: Path, home: Path) -> list[Path]:
    import httpx
    from npu_console.console.app import LaunchOptions, build_window
    from npu_console.console.engines import host_label
    from npu_console.console.screenshots import LOAD_TIMEOUT_S, _save, _settle
    from npu_console.console.testing import model_names, pump_until
    from npu_console.console.widgets.servers_menu import open_connect_dialog
    from npu_console.engine.paths import DEMO_MODEL_DIR
    from PySide6.QtWidgets import QApplication

    out.mkdir(parents=True, exist_ok=True)
    proc, url, remote_model = start_server(home / "serve.log")
    window = build_window(LaunchOptions(model=str(DEMO_MODEL_DIR), theme="dark",
                                        settings_path=str(home / "shots-remote.ini")))
    window.resize(1360, 860)
    paths = []
    try:
        if not pump_until(lambda: bool(model_names(window)), LOAD_TIMEOUT_S):
            raise SystemExit("the local demo model did not load")
        dialog = open_connect_dialog(window)
        dialog.url_edit.setText(url)
        dialog.key_edit.setText(KEY)
        dialog.test()
        pump_until(lambda: dialog.result is not None and not dialog.busy(), 60)
        _settle(300)
        path = out / "connect-dialog.png"
        dialog.grab().save(str(path))
        paths.append(path)
        # one request first: a server's first one builds its native kernels (seconds), which
        # is not what a chat on a running server looks like
        httpx.post(url + "/v1/chat/completions", headers={"Authorization": f"Bearer {KEY}"},
                   json={"model": remote_model, "max_tokens": 4,
                         "messages": [{"role": "user", "content": "Hi"}]}, timeout=300)
        dialog.test(connect=True)
        label = f"{remote_model} @ {host_label(url)}"
        chat = window.page("chat")
        window.show_page("chat")
        if not pump_until(lambda: chat.model_a.findText(label) >= 0, 60):
            raise SystemExit(f"{label} never appeared in the model picker")
        chat.model_a.setCurrentText(label)
        window.statusBar().clearMessage()  # "Connected to …" would hide "engine: host"
        chat.sampling.preset_box.setCurrentText("Precise (greedy)")
        chat.sampling.apply_preset("Precise (greedy)")
        chat.sampling.max_tokens.setValue(80)
        chat.send("What is the capital of France?")
        pump_until(lambda: not chat.busy(), 180)
        chat.send("Tell me one fact about Paris.")
        # caught while the reply streams: a few words in, the cursor still there
        pump_until(lambda: len(chat.conv.panes[0].messages[-1].content) > 40, 120)
        paths.append(_save(window, out, "chat-remote"))
        pump_until(lambda: not chat.busy(), 180)

        chat.new_chat()
        chat.model_a.setCurrentText(DEMO_MODEL_DIR.name)
        chat.ab_check.setChecked(True)
        chat.model_b.setCurrentText(label)
        chat.send("Hello! Who are you?")
        pump_until(lambda: not chat.busy(), 180)
        _settle(800)
        paths.append(_save(window, out, "chat-ab-remote"))
        return paths
    finally:
        window.close()
        QApplication.instance().processEvents()
        proc.terminate()
        proc.wait(30)


def main(argv: list[str]) -> int:
    out = Path(argv[1] if len(argv) > 1 else ROOT / "docs" / "screenshots")
    home = Path(os.environ.setdefault("NPU_CONSOLE_HOME", tempfile.mkdtemp(prefix="npc-shots-")))
    for p in capture_remote(out, home):
        print(p)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
