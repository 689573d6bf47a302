"""The chat page, A/B view and demo mode on the real chat model `make run` opens
(SmolLM2-135M-Instruct, a GGUF), for the README.

`python packaging/screenshot_chat_model.py OUT_DIR [GGUF]` (offscreen by default);
packaging/screenshots.py calls it when the GGUF is there (models/, as `make run` fetches it, or
the development fixtures, tests/support/shared.py). A/B puts the float32 model beside the same weights in bfloat16.
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
from support.shared import SMOLLM2_GGUF

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
CANDIDATES = (ROOT / "models" / "smollm2-135m-instruct" / GGUF_NAME,
              SMOLLM2_GGUF)
QUESTIONS = ("What is the capital of France?", "Give me three tips for a good presentation.")


def find_chat_model() -> Path | None:
    return next((p for p in CANDIDATES if p.is_file()), None)


def capture_chat_model(gguf: Path, out: Path, home: Path) -> list[Path]:
    from npu_console.console.app import LaunchOptions, build_window
    from npu_console.console.screenshots import LOAD_TIMEOUT_S, _save, _settle, capture_demo
    from npu_console.console.testing import model_names, pump_until
    from PySide6.QtWidgets import QApplication

    out.mkdir(parents=True, exist_ok=True)
    window = build_window(LaunchOptions(model=str(gguf), theme="dark",
                                        settings_path=str(home / "shots-chat.ini")))
    window.resize(1360, 860)
    paths: list[Path] = []
    try:
        host = window.ctx.engine_host
        if not pump_until(lambda: bool(model_names(window)), LOAD_TIMEOUT_S):
            print("the chat model did not load: no screenshots", file=sys.stderr)
            return []
        chat = window.page("chat")
        window.show_page("chat")
        chat.sampling.apply_preset("Precise (greedy)")
        chat.sampling.max_tokens.setValue(120)
        for question in QUESTIONS:
            chat.send(question)
            pump_until(lambda: not chat.busy(), 180)
        _settle(800)
        paths.append(_save(window, out, "chat"))

        float_name = model_names(window)[0]
        host.load(gguf, name=f"{float_name}-bf16", dtype="bfloat16")
        pump_until(lambda: len(model_names(window)) >= 2, LOAD_TIMEOUT_S)
        chat.new_chat()
        chat.ab_check.setChecked(True)
        chat.set_models(host.models())  # the models_changed signal may still be queued
        chat.model_b.setCurrentText(model_names(window)[-1])
        chat.send(QUESTIONS[0])
        pump_until(lambda: not chat.busy(), 180)
        _settle(800)
        paths.append(_save(window, out, "chat-ab"))

        paths.append(capture_demo(window, out, float_name, model_names(window)[-1], QUESTIONS))
    finally:
        window.close()
        QApplication.instance().processEvents()
    return paths


def main(argv: list[str]) -> int:
    out = Path(argv[1] if len(argv) > 1 else ROOT / "docs" / "screenshots")
    gguf = Path(argv[2]) if len(argv) > 2 else find_chat_model()
    if gguf is None:
        print(f"no {GGUF_NAME}: run `make run` once (it fetches it)", file=sys.stderr)
        return 1
    home = Path(os.environ.setdefault("NPU_CONSOLE_HOME", tempfile.mkdtemp(prefix="npc-shots-")))
    for p in capture_chat_model(gguf, out, home):
        print(p)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
