"""`npu-console gui` with a scripted user: once the model is loaded it turns on A/B compare
(the same model on both sides), slows the engine's steps (fakes.slow_steps) so the replies
are still streaming when a test signals the process, sends one message, and prints
`STREAMING <conversation id>` once both replies have text. Everything else is the console's
own start-up and event loop (console.app.run).

    python tests/fakes/gui_scripted_chat.py gui --model DIR
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for `fakes`


def script(window) -> None:
    from PySide6.QtCore import QTimer

    from fakes.slow_steps import slowed_steps

    def when_loaded() -> None:
        if not window.ctx.engine_host.models():
            QTimer.singleShot(50, when_loaded)
            return
        chat = window.page("chat")
        window.show_page("chat")
        window._slowed = slowed_steps(window.ctx.bridge.engine, 0.02)
        window._slowed.__enter__()  # held until the process ends
        chat.sampling.max_tokens.setValue(900)
        chat.ab_check.setChecked(True)
        chat.send("Once upon a time")
        wait_for_text(chat)

    def wait_for_text(chat) -> None:
        if chat.live and all(p.messages[-1].content for p in chat.conv.panes):
            print(f"STREAMING {chat.conv.id}", flush=True)
            return
        QTimer.singleShot(20, lambda: wait_for_text(chat))

    QTimer.singleShot(50, when_loaded)


def main() -> int:
    from npu_console.console import app

    real_build = app.build_window

    def build_window(options):
        window = real_build(options)
        script(window)
        return window
    app.build_window = build_window
    from npu_console.cli.main import main as cli_main

    return cli_main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
