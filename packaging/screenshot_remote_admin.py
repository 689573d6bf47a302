"""The Models page and the Quantize wizard aimed at a connected server with `--allow-admin`
(issue 25): the server's model folders with a model it loaded from them, and a quantization
running on the server, caught mid-progress (then cancelled: the server writes nothing).

`python packaging/screenshot_remote_admin.py OUT_DIR` (offscreen by default). Starts a real
`npu-console serve --allow-admin` child process with an API key on loopback over a temporary
model root holding a copy of the demo model, and a real window whose own engine runs the demo
model.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

KEY = "sk-shots-0123456789abcdef"


def start_admin_server(base: Path) -> tuple[subprocess.Popen, str]:
    from npu_console.engine.paths import DEMO_MODEL_DIR

    models = base / "models"
    shutil.copytree(DEMO_MODEL_DIR, models / "demo")
    log = base / "serve.log"
    with log.open("w") as fh:
        proc = subprocess.Popen(
            [sys.executable, "-m", "npu_console.cli.main", "serve", "--model",
             str(models / "demo"), "--name", "base", "--port", "0", "--api-key", KEY,
             "--allow-admin", "--model-root", str(models), "--output-root",
             str(base / "quantized"), "--log-level", "warning", "--threads", "1",
             "--telemetry-source", "off"],
            cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.DEVNULL,
            stderr=fh)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        m = re.search(r"at (http://\S+)/v1", log.read_text())
        if m:
            return proc, m.group(1)
        if proc.poll() is not None:
            break
        time.sleep(0.5)
    proc.kill()
    raise SystemExit(f"serve did not start: {log.read_text()[-1500:]}")


def capture_remote_admin(out: Path, home: Path) -> list[Path]:
    from npu_console.console.app import LaunchOptions, build_window
    from npu_console.console.screenshots import LOAD_TIMEOUT_S, _save, _settle
    from npu_console.console.testing import model_names, pump_until
    from npu_console.engine.paths import DEMO_MODEL_DIR
    from PySide6.QtWidgets import QApplication

    out.mkdir(parents=True, exist_ok=True)
    base = Path(tempfile.mkdtemp(prefix="shots-admin-", dir=home))
    proc, url = start_admin_server(base)
    window = build_window(LaunchOptions(model=str(DEMO_MODEL_DIR), theme="dark",
                                        settings_path=str(home / "shots-admin.ini")))
    window.resize(1360, 860)
    paths = []
    try:
        if not pump_until(lambda: bool(model_names(window)), LOAD_TIMEOUT_S):
            raise SystemExit("the local demo model did not load")
        remote = window.ctx.remote
        remote.connect_server(url, KEY, name="npu-server-1", remember=False)
        if not pump_until(lambda: (c := remote.engines.get(url)) is not None and bool(c.models),
                          60):
            raise SystemExit("the server did not connect")

        models = window.page("models")
        window.show_page("models")
        pump_until(lambda: models.remote.picker.findData(url) >= 0, 10)
        models.remote.select(url)
        pump_until(lambda: models.remote.view is not None and not models.remote.reading(), 60)
        models.remote.select_folder("models/demo")
        models.name_edit.setText("demo-fp32")
        models.dtype_box.setCurrentIndex(models.dtype_box.findData("float32"))
        models.start_load()
        pump_until(lambda: not models.remote.busy(), 120)
        pump_until(lambda: models.table.rowCount() == 2 and not models.remote.reading(), 60)
        models.remote.select_folder("models/demo")
        window.statusBar().clearMessage()
        _settle(500)
        paths.append(_save(window, out, "models-remote"))

        quant = window.page("quantize")
        window.show_page("quantize")
        quant.remote.select(url)
        pump_until(lambda: quant.remote.view is not None and not quant.remote.reading(), 60)
        quant.set_method("w8a8-dynamic")
        quant.set_calibration(None, 1024, 256)  # long enough to be caught mid-way
        quant.go(4)
        job = quant.start_run()
        if job is None:
            raise SystemExit(quant.run_step.run_progress.stage.text())
        pump_until(lambda: job.fraction > 0.08 or not quant.busy(), 300)
        _settle(600)
        paths.append(_save(window, out, "quantize-remote"))
        quant.run_step.run_progress.cancel()
        pump_until(lambda: not quant.busy(), 60)
        return paths
    finally:
        window.close()
        QApplication.instance().processEvents()
        proc.terminate()
        proc.wait(30)


def main(argv: list[str]) -> int:
    out = Path(argv[1] if len(argv) > 1 else ROOT / "docs" / "screenshots")
    home = Path(os.environ.setdefault("NPU_CONSOLE_HOME", tempfile.mkdtemp(prefix="npc-shots-")))
    for p in capture_remote_admin(out, home):
        print(p)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
