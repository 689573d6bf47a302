"""The chat page and the dashboard while the first model loads: a message sent then waits,
the load's stage and percent shown on both (and in the status bar).

`python packaging/screenshot_loading.py OUT_DIR` (offscreen by default); packaging/screenshots.py
calls it too. The model is stories260K from the development fixtures (tests/support/shared.py):
its weights take long enough to load for the shot to be taken mid-load.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))  # support.shared: the development fixtures
from support.shared import NPU_SMI_FIXTURES, STORIES_DIR


def capture_loading(out: Path, home: Path) -> list[Path]:
    from npu_console.console.app import LaunchOptions, build_window
    from npu_console.console.screenshots import _save, _settle
    from npu_console.console.testing import model_names, pump_until
    from PySide6.QtWidgets import QApplication

    if not (STORIES_DIR / "config.json").is_file():
        print(f"{STORIES_DIR} is missing: no loading screenshots", file=sys.stderr)
        return []
    out.mkdir(parents=True, exist_ok=True)
    replay = [str(NPU_SMI_FIXTURES / "910b3_info_1.txt")] if NPU_SMI_FIXTURES.is_dir() else []
    window = build_window(LaunchOptions(model="", replay=replay, theme="dark",
                                        settings_path=str(home / "shots-loading.ini")))
    window.resize(1360, 860)
    paths: list[Path] = []
    try:
        host, chat = window.ctx.engine_host, window.page("chat")
        host.start()
        pump_until(lambda: window.ctx.bridge.engine is not None, 300)
        window.show_page("chat")
        chat.input.setPlainText("Once upon a time")
        host.load(str(STORIES_DIR), name="stories260K")
        chat.send()  # held: no model yet, one loading
        load = window.ctx.loads.current
        if not pump_until(lambda: load() is not None and load().percent >= 15, 300):
            print("the load ended before the shot: none taken", file=sys.stderr)
            return paths
        _settle(300)
        paths.append(_save(window, out, "chat-loading"))
        window.show_page("dashboard")
        _settle(600)
        paths.append(_save(window, out, "dashboard-loading"))
        pump_until(lambda: bool(model_names(window)) and not chat.busy(), 400)
    finally:
        window.close()
        QApplication.instance().processEvents()
    return paths


def main(argv: list[str]) -> int:
    out = Path(argv[1] if len(argv) > 1 else ROOT / "docs" / "screenshots")
    home = Path(os.environ.setdefault("NPU_CONSOLE_HOME", tempfile.mkdtemp(prefix="npc-shots-")))
    for p in capture_loading(out, home):
        print(p)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
