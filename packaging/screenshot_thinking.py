"""The chat page with a reasoning model's reply: its Thinking block folded above the answer.

`python packaging/screenshot_thinking.py OUT_DIR` (offscreen by default); packaging/screenshots.py
calls it too. Runs the real engine on the reasoning demo model (assets/models/demo-think).
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

QUESTIONS = ("Hello", "Which is larger, 37 or 73?")


def capture_thinking(out: Path, home: Path) -> list[Path]:
    from npu_console.console.app import LaunchOptions, build_window
    from npu_console.console.screenshots import LOAD_TIMEOUT_S, _save, _settle
    from npu_console.console.testing import model_names, pump_until
    from npu_console.engine.paths import THINK_MODEL_DIR
    from PySide6.QtWidgets import QApplication

    out.mkdir(parents=True, exist_ok=True)
    window = build_window(LaunchOptions(model=str(THINK_MODEL_DIR), theme="dark",
                                        settings_path=str(home / "shots-think.ini")))
    window.resize(1360, 860)
    try:
        if not pump_until(lambda: bool(model_names(window)), LOAD_TIMEOUT_S):
            print("the reasoning model did not load: no screenshot", file=sys.stderr)
            return []
        chat = window.page("chat")
        window.show_page("chat")
        chat.sampling.preset_box.setCurrentText("Precise (greedy)")
        chat.sampling.apply_preset("Precise (greedy)")
        for question in QUESTIONS:
            chat.send(question)
            pump_until(lambda: not chat.busy(), 120)
        _settle(800)
        return [_save(window, out, "chat-thinking")]
    finally:
        window.close()
        QApplication.instance().processEvents()


def main(argv: list[str]) -> int:
    out = Path(argv[1] if len(argv) > 1 else ROOT / "docs" / "screenshots")
    home = Path(os.environ.setdefault("NPU_CONSOLE_HOME", tempfile.mkdtemp(prefix="npc-shots-")))
    for p in capture_thinking(out, home):
        print(p)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
