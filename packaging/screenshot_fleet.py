"""The dashboard's fleet view: two real `npu-console serve` processes on loopback, each with an
API key and a replayed capture (8 x 910B3, 2 x 310P3: real npu-smi captures from the
development fixtures, tests/support/shared.py), watched beside this machine (replaying a 300I
Duo capture).

`python packaging/screenshot_fleet.py OUT_DIR` (offscreen by default); packaging/screenshots.py
calls it too. Two shots: `dashboard-fleet` (every host's card, this machine's chips) and
`dashboard-fleet-host` (drilled into the 910B3 server while it answers a few requests, the
310P3 one killed: its card greyed, retrying).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))  # support.shared: the development fixtures
from support.shared import NPU_SMI_FIXTURES

FIXTURES = NPU_SMI_FIXTURES
SERVERS = (("rack-a", "910b3_info_1.txt", "fleet-demo-key-a"),
           ("edge-b", "310p3_info_8.txt", "fleet-demo-key-b"))
LOCAL_CAPTURE = "310p3-duo_info_1.txt"


def _serve(capture: Path, key: str) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "npu_console.cli.main", "serve", "--host", "127.0.0.1",
         "--port", "0", "--threads", "1", "--log-level", "warning", "--api-key", key,
         "--telemetry-input", str(capture), "--telemetry-interval", "1"],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        m = re.search(r" at (http://\S+)/v1", line)
        if m:
            threading.Thread(target=proc.stderr.read, daemon=True).start()  # keep it drained
            return proc, m.group(1)
        if not line and proc.poll() is not None:
            break
    proc.kill()
    raise SystemExit(f"serve did not start for {capture.name}")


def _load(url: str, key: str, stop: threading.Event) -> None:
    """A few chat requests at a time, so the server's engine has numbers to show."""
    import httpx

    def one(i: int) -> None:
        while not stop.is_set():
            try:
                httpx.post(f"{url}/v1/chat/completions", timeout=60,
                           headers={"Authorization": f"Bearer {key}"},
                           json={"messages": [{"role": "user", "content": f"A story {i}"}],
                                 "max_tokens": 64})
            except httpx.HTTPError:
                time.sleep(0.5)

    for i in range(3):
        threading.Thread(target=one, args=(i,), daemon=True).start()


def capture_fleet(out: Path, home: Path) -> list[Path]:
    from npu_console.console.app import LaunchOptions, build_window
    from npu_console.console.screenshots import _save, _settle
    from npu_console.console.testing import pump_until
    from npu_console.engine.remote.fleet import ServerRef
    from PySide6.QtWidgets import QApplication

    if not FIXTURES.is_dir():
        print(f"{FIXTURES} is missing: no fleet screenshots", file=sys.stderr)
        return []
    out.mkdir(parents=True, exist_ok=True)
    started = [(name, key, *_serve(FIXTURES / capture, key)) for name, capture, key in SERVERS]
    stop = threading.Event()
    window = build_window(LaunchOptions(model="", replay=[str(FIXTURES / LOCAL_CAPTURE)],
                                        theme="dark", start_engine=False,
                                        settings_path=str(home / "shots-fleet.ini")))
    window.resize(1360, 860)
    paths: list[Path] = []
    try:
        window.show_page("dashboard")
        page = window.page("dashboard")
        fleet = window.ctx.fleet
        for name, key, _proc, url in started:
            fleet.add_server(ServerRef(url, key, name))
        urls = [url for *_rest, url in started]
        pump_until(lambda: all((s := fleet.snapshot(u)) is not None and s.state == "up"
                               and s.engine is not None for u in urls), 60)
        _load(urls[0], started[0][1], stop)
        page.window_box.setCurrentIndex(0)  # 1 min: the few samples are visible
        page.metric_box.setCurrentText("Memory %")  # the captured chips idle at 0 % AI Core
        _settle(6000)
        paths.append(_save(window, out, "dashboard-fleet"))
        page.fleet.view_host(urls[0])
        page.metric_box.setCurrentText("Power W")
        started[1][2].kill()  # the second server is lost
        pump_until(lambda: fleet.snapshot(urls[1]).state == "unreachable", 30)
        _settle(6000)
        paths.append(_save(window, out, "dashboard-fleet-host"))
    finally:
        stop.set()
        window.close()
        QApplication.instance().processEvents()
        for _name, _key, proc, _url in started:
            proc.kill()
            proc.wait(30)
    return paths


def main(argv: list[str]) -> int:
    out = Path(argv[1] if len(argv) > 1 else ROOT / "docs" / "screenshots")
    home = Path(os.environ.setdefault("NPU_CONSOLE_HOME", tempfile.mkdtemp(prefix="npc-shots-")))
    for p in capture_fleet(out, home):
        print(p)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
