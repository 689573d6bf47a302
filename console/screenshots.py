"""Save a PNG of every page (used by `npu-console gui --screenshot-dir` and packaging/screenshots.py)."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtWidgets import QApplication

from .app import LaunchOptions, build_window, ensure_app
from .testing import model_names, pump_until

LOAD_TIMEOUT_S = 180.0


def _settle(ms: int = 600) -> None:
    pump_until(lambda: False, timeout=ms / 1000.0)


def _save(window, out: Path, name: str) -> Path:
    window.page(window.stack.currentWidget().page_id).update()
    _settle(300)
    path = out / f"{name}.png"
    window.grab().save(str(path))
    return path


def capture_all(options: LaunchOptions, out_dir: str | Path, prompt: str = "Once upon a time",
                ab: bool = True) -> list[Path]:
    ensure_app()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    window = build_window(options)
    window.resize(1360, 860)
    paths: list[Path] = []
    try:
        host = window.ctx.engine_host
        if options.start_engine and options.model != "":
            pump_until(lambda: bool(model_names(window)) or host.start_error is not None,
                       LOAD_TIMEOUT_S)
        chat = window.page("chat")
        names = model_names(window)
        if names:
            window.show_page("chat")
            chat.sampling.max_tokens.setValue(60)
            chat.sampling.seed.setText("1")
            chat.send(prompt)
            pump_until(lambda: not chat.busy(), 60)
        _settle(2500)  # a few telemetry / stats samples for the plots
        for page in window.pages:
            window.show_page(page.page_id)
            _settle(800)
            paths.append(_save(window, out, page.page_id))
        if ab and names:
            if len(names) < 2:
                host.load(window.page("models").report.path, name=f"{names[0]}-b")
                pump_until(lambda: len(model_names(window)) >= 2, LOAD_TIMEOUT_S)
            window.show_page("chat")
            chat.new_chat()
            chat.ab_check.setChecked(True)
            names = model_names(window)
            chat.set_models(host.models())  # the models_changed signal may still be queued
            chat.model_b.setCurrentText(names[-1])
            chat.send(prompt)
            pump_until(lambda: not chat.busy(), 60)
            paths.append(_save(window, out, "chat-ab"))
    finally:
        window.close()
        QApplication.instance().processEvents()
    return paths


def capture_demo(window, out: Path, model_a: str, model_b: str, questions: tuple[str, ...],
                 timeout_s: float = 180.0) -> Path:
    """Demo mode at a projector size, both models asked each question in turn."""
    demo = window.open_demo()
    demo.showNormal()  # the offscreen screen is small: take the shot at a projector size
    demo.resize(1600, 900)
    demo.panes[0][0].setCurrentText(model_a)
    demo.panes[1][0].setCurrentText(model_b)
    for question in questions:
        demo.send(question)
        pump_until(lambda: not demo.busy(), timeout_s)
        _settle(2000)
    path = out / "demo.png"
    demo.grab().save(str(path))
    demo.close()
    return path
