"""Real console windows for the GUI tests: state kept under a test's own home, models loaded
through the window's own engine host, and the chat page put back to a known state per test."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest


@contextlib.contextmanager
def console_window(qapp, home: Path, page: str, models: tuple[tuple[Path, str], ...] = (),
                   wait_ms: int = 90_000, **options):
    """A real MainWindow with NPU_CONSOLE_HOME at `home`, showing `page`, closed afterwards.
    `models` ((folder, name), ...) are loaded into its engine and listed before it is yielded;
    `options` go to make_window (start_engine=False, replay=[] ...)."""
    from npu_console.console.testing import make_window, model_names
    from pytestqt.qtbot import QtBot

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("NPU_CONSOLE_HOME", str(home))
        win = make_window(home, **options)
        try:
            if models:
                host = win.ctx.engine_host
                host.start()
                for folder, name in models:
                    host.load(folder, name=name)
                names = sorted(name for _, name in models)
                QtBot(qapp).waitUntil(lambda: sorted(model_names(win)) == names,
                                      timeout=wait_ms)
            win.show_page(page)
            yield win
        finally:
            win.close()


def fresh_chat(window, qtbot, model: str, preset: str, max_tokens: int, wait_ms: int = 90_000):
    """The chat page idle, in a new single-pane conversation with `model`, `preset` and
    `max_tokens`."""
    from npu_console.console.testing import model_names

    page = window.page("chat")
    qtbot.waitUntil(lambda: not page.busy(), timeout=wait_ms)
    if page.ab_check.isChecked():
        page.ab_check.setChecked(False)
    page.new_chat()
    # the engine lists its models before its queued models_changed reaches the page's boxes
    qtbot.waitUntil(lambda: all(page.model_a.findText(n) >= 0 for n in model_names(window))
                    and page.model_a.findText(model) >= 0, timeout=wait_ms)
    page.model_a.setCurrentText(model)
    assert page.model_a.currentText() == model
    page.sampling.apply_preset(preset)
    page.sampling.max_tokens.setValue(max_tokens)
    return page
