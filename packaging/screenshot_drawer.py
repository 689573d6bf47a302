"""The dashboard with a chip's detail drawer open, on a replayed capture folder.

`python packaging/screenshot_drawer.py OUT_DIR` (offscreen by default); packaging/screenshots.py
calls it too. The folder is made of real npu-smi captures (tests/support/shared.py): the 8-card
old-910 table (910a_info_1) and that family's `info -t usages|board|board -c|ecc|health -c`
captures, all of NPU 0, so npu0-0's drawer is the one that is full.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))  # support.shared: the development fixtures
from support.shared import NPU_SMI_FIXTURES

FIXTURES = NPU_SMI_FIXTURES
CAPTURES = ("910a_info_1", "910a_usages_2", "910a_board_1", "910a_board-c_1", "910a_ecc_1",
            "910a_health-c_1")


def capture_folder(home: Path) -> Path | None:
    if not FIXTURES.is_dir():
        return None
    folder = home / "captures-910a"
    folder.mkdir(parents=True, exist_ok=True)
    for name in CAPTURES:
        shutil.copy(FIXTURES / f"{name}.txt", folder)
    return folder


def capture_drawer(out: Path, home: Path) -> list[Path]:
    from npu_console.console.app import LaunchOptions, build_window
    from npu_console.console.screenshots import _save, _settle
    from npu_console.console.testing import pump_until
    from PySide6.QtWidgets import QApplication

    folder = capture_folder(home)
    if folder is None:
        print(f"{FIXTURES} is missing: no drawer screenshot", file=sys.stderr)
        return []
    out.mkdir(parents=True, exist_ok=True)
    window = build_window(LaunchOptions(model="", replay=[str(folder)], theme="dark",
                                        start_engine=False,
                                        settings_path=str(home / "shots-drawer.ini")))
    window.resize(1360, 860)
    try:
        window.show_page("dashboard")
        page = window.page("dashboard")
        pump_until(lambda: "npu0-0" in page.cards, 30)
        poller = window.ctx.telemetry.poller  # a few replayed samples: lines in the history plot
        pump_until(lambda: poller.cycles >= 5, 30)
        page.metric_box.setCurrentText("Power W")  # the captured chips idle at 0 % AI Core
        page.window_box.setCurrentIndex(0)  # 1 min: the few replayed samples are visible
        page.open_drawer("npu0-0")
        _settle(800)
        return [_save(window, out, "dashboard-drawer")]
    finally:
        window.close()
        QApplication.instance().processEvents()


def main(argv: list[str]) -> int:
    out = Path(argv[1] if len(argv) > 1 else ROOT / "docs" / "screenshots")
    home = Path(os.environ.setdefault("NPU_CONSOLE_HOME", tempfile.mkdtemp(prefix="npc-shots-")))
    for p in capture_drawer(out, home):
        print(p)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
