"""Screenshots of every console page for the docs: `python packaging/screenshots.py OUT_DIR`.

Runs offscreen (or under Xvfb) on the demo model (stories260K from ../shared when the demo model
is missing), with the dashboard replaying a real 8-card 910B capture; then a second pass shows
the host-CPU fallback and the light theme.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main(argv: list[str]) -> int:
    out = Path(argv[1] if len(argv) > 1 else ROOT / "docs" / "screenshots")
    os.environ.setdefault("NPU_CONSOLE_HOME", tempfile.mkdtemp(prefix="npc-shots-"))
    from console.app import LaunchOptions
    from console.screenshots import capture_all
    from engine.paths import DEMO_MODEL_DIR

    model = DEMO_MODEL_DIR
    if not (model / "config.json").exists():
        model = ROOT.parent / "shared" / "models" / "stories260K"
    fixtures = ROOT.parent / "shared" / "fixtures" / "npu-smi"
    replay = [str(fixtures / "910b3_info_1.txt")] if fixtures.is_dir() else []
    settings = Path(os.environ["NPU_CONSOLE_HOME"]) / "shots.ini"
    paths = capture_all(LaunchOptions(model=str(model), replay=replay, settings_path=str(settings),
                                      theme="dark"), out)
    # host fallback (live psutil) in the light theme, no model: the empty states
    light = out / "light"
    for p in capture_all(LaunchOptions(model="", settings_path=str(settings), theme="light",
                                       start_engine=False), light, ab=False):
        target = out / f"{p.stem}-light-empty.png"
        p.replace(target)
        paths.append(target)
    light.rmdir()
    for p in paths:
        print(p)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
