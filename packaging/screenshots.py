"""Screenshots of every console page for the docs: `python packaging/screenshots.py OUT_DIR`
(`--part2`: only Quantize, Benchmark, Server and demo mode, with real results in them).

Runs offscreen (or under Xvfb) on the demo model (stories260K from the development
fixtures, tests/support/shared.py, when the demo model is missing), with the dashboard replaying a real 8-card 910B capture; then a second pass shows
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
sys.path.insert(0, str(ROOT / "tests"))  # support.shared: the development fixtures


def main(argv: list[str]) -> int:
    part2_only = "--part2" in argv  # only Quantize / Benchmark / Server / demo mode
    argv = [a for a in argv if a != "--part2"]
    out = Path(argv[1] if len(argv) > 1 else ROOT / "docs" / "screenshots")
    os.environ.setdefault("NPU_CONSOLE_HOME", tempfile.mkdtemp(prefix="npc-shots-"))
    from npu_console.console.app import LaunchOptions
    from npu_console.console.screenshots import capture_all
    from npu_console.engine.paths import DEMO_MODEL_DIR
    from support import shared

    model = DEMO_MODEL_DIR
    if not (model / "config.json").exists():
        model = shared.STORIES_DIR
    fixtures = shared.NPU_SMI_FIXTURES
    replay = [str(fixtures / "910b3_info_1.txt")] if fixtures.is_dir() else []
    settings = Path(os.environ["NPU_CONSOLE_HOME"]) / "shots.ini"
    if part2_only:
        for p in capture_part2(model, out, replay, Path(os.environ["NPU_CONSOLE_HOME"])):
            print(p)
        return 0
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
    paths += capture_part2(model, out, replay, Path(os.environ["NPU_CONSOLE_HOME"]))
    from screenshot_thinking import capture_thinking  # the reasoning model's Thinking block

    paths += capture_thinking(out, Path(os.environ["NPU_CONSOLE_HOME"]))
    from screenshot_drawer import capture_drawer  # a chip's detail drawer, capture folder

    paths += capture_drawer(out, Path(os.environ["NPU_CONSOLE_HOME"]))
    from screenshot_loading import capture_loading  # a message held while a model loads

    paths += capture_loading(out, Path(os.environ["NPU_CONSOLE_HOME"]))
    from screenshot_fleet import capture_fleet  # two serve hosts beside this machine

    paths += capture_fleet(out, Path(os.environ["NPU_CONSOLE_HOME"]))
    from screenshot_remote import capture_remote  # attached to a headless serve (issue 25)

    paths += capture_remote(out, Path(os.environ["NPU_CONSOLE_HOME"]))
    from screenshot_remote_admin import capture_remote_admin  # Models / Quantize on a server

    paths += capture_remote_admin(out, Path(os.environ["NPU_CONSOLE_HOME"]))
    from screenshot_chat_model import capture_chat_model, find_chat_model

    chat_model = find_chat_model()  # the real chat model, where `make run` fetched it
    if chat_model is not None:  # its chat, A/B and demo shots replace the demo model's
        paths += capture_chat_model(chat_model, out, Path(os.environ["NPU_CONSOLE_HOME"]))
    for p in paths:
        print(p)
    return 0


def _calib_file(home: Path) -> str | None:
    """The shipped calibration text, or (in a checkout without it) the project's own docs."""
    from npu_console.engine.paths import CALIB_DIR

    if (CALIB_DIR / "calibration.txt").is_file():
        return None
    paras = []
    for md in sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]:
        if md.is_file():
            paras += [p.strip() for p in md.read_text(encoding="utf-8").split("\n\n")
                      if len(p.split()) > 12 and not p.lstrip().startswith(("|", "```", "#"))]
    path = home / "calib-docs.txt"
    path.write_text("\n\n".join(paras), encoding="utf-8")
    return str(path)


def capture_part2(model: Path, out: Path, replay: list[str], home: Path) -> list[Path]:
    """Quantize, Benchmark, Server and demo mode with real results in them (dark theme)."""
    import socket

    import httpx
    from npu_console.console.app import LaunchOptions, build_window
    from npu_console.console.screenshots import LOAD_TIMEOUT_S, _save, _settle
    from npu_console.console.testing import model_names, pump_until

    window = build_window(LaunchOptions(model=str(model), replay=replay, theme="dark",
                                        settings_path=str(home / "shots2.ini")))
    window.resize(1360, 860)
    paths: list[Path] = []
    try:
        if not pump_until(lambda: bool(model_names(window)), LOAD_TIMEOUT_S):
            print("model did not load: part 2 screenshots skipped", file=sys.stderr)
            return paths
        float_name = model_names(window)[0]

        q = window.page("quantize")
        window.show_page("quantize")
        q.eval_tokens, q.eval_prompts, q.new_tokens = 1024, 4, 16
        q.set_method("w8a8-static", "all", smoothquant=0.5)
        q.set_calibration(_calib_file(home), 16, 128)
        q.budget.setValue(1.0)
        q.go(1)
        _settle(300)
        paths.append(_save(window, out, "quantize-method"))
        q.go(3)
        q.start_sensitivity()
        pump_until(lambda: not q.busy(), 900)
        _settle(300)
        paths.append(_save(window, out, "quantize-sensitivity"))
        q.go(4)
        q.start_run()
        pump_until(lambda: not q.busy(), 900)
        pump_until(lambda: len(model_names(window)) >= 2, LOAD_TIMEOUT_S)
        _settle(500)
        paths.append(_save(window, out, "quantize-run"))

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        server = window.page("server")
        server.port.setValue(port)
        server.start()
        pump_until(lambda: server.running() and not server.busy(), 60)
        for i in range(3):
            httpx.post(f"{server.url}/v1/chat/completions", timeout=120, json={
                "model": model_names(window)[i % 2],
                "messages": [{"role": "user", "content": f"Tell me about lists {i}"}],
                "max_tokens": 24})
        httpx.get(f"{server.url}/v1/models", timeout=30)
        window.show_page("server")
        _settle(800)
        paths.append(_save(window, out, "server-running"))

        b = window.page("benchmark")
        window.show_page("benchmark")
        b.tabs.setCurrentIndex(1)
        b.num_prompts.setValue(16)
        b.concurrency.setValue(4)
        b.s_input.setValue(32)
        b.s_output.setValue(32)
        b.start()
        pump_until(lambda: not b.busy(), 600)
        _settle(500)
        paths.append(_save(window, out, "benchmark-serving"))
        b.tabs.setCurrentIndex(0)
        b.model_box.setCurrentText(float_name)
        for size, check in b.batch_checks.items():
            check.setChecked(size <= 8)
        b.input_len.setValue(32)
        b.output_len.setValue(32)
        b.start()
        pump_until(lambda: not b.busy(), 900)
        _settle(500)
        paths.append(_save(window, out, "benchmark-sweep"))
        server.stop()
        pump_until(lambda: not server.running() and not server.busy(), 30)

        from npu_console.console.screenshots import capture_demo

        paths.append(capture_demo(window, out, float_name, model_names(window)[-1],
                                  ("What is a tuple?", "The list type"), 120))
    finally:
        window.close()
        from PySide6.QtWidgets import QApplication

        QApplication.instance().processEvents()
    return paths


if __name__ == "__main__":
    sys.exit(main(sys.argv))
