"""Application entry: QApplication on a qasync loop, settings, theme, background start-up.

The window is shown before anything slow happens; torch import, engine start, the default
model's load and the first telemetry poll all run on worker threads afterwards.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import sys
from dataclasses import dataclass, field
from pathlib import Path

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication

from .context import ConsoleContext
from .main_window import MainWindow
from .settings import open_settings
from .signals import install_quit_signals
from .theme import app_icon, apply_theme

log = logging.getLogger(__name__)


@dataclass
class LaunchOptions:
    model: str | None = None  # folder to load at start; None = the demo model; "" = none
    replay: list[str] = field(default_factory=list)  # npu-smi captures instead of live telemetry
    settings_path: str | None = None
    theme: str | None = None  # overrides the saved theme
    start_engine: bool = True
    note: str | None = None  # a line for the status bar at start (why `make run` fell back)
    load_as: str = "float"  # "int8": a GGUF model opens straight in INT8 (W8A16)


def ensure_app(argv: list[str] | None = None) -> QApplication:
    app = QApplication.instance()
    if app is None:
        app = QApplication(argv or [sys.argv[0]])
    app.setApplicationName("NPU Console")
    app.setOrganizationName("npu-console")
    app.setWindowIcon(app_icon())
    return app


def build_window(options: LaunchOptions) -> MainWindow:
    """Create context + window and kick off the background work; returns the shown window."""
    app = ensure_app()
    settings = open_settings(options.settings_path)
    apply_theme(app, options.theme or str(settings.value("ui/theme", "dark")))
    ctx = ConsoleContext(settings)
    window = MainWindow(ctx)
    window.show()
    if options.note:
        window.statusBar().showMessage(options.note, 60_000)
    elif options.load_as == "int8" and str(options.model or "").endswith(".gguf"):
        window.statusBar().showMessage(
            "Model in INT8 (W8A16 straight from the GGUF: a quarter of float32's memory, "
            "faster); for float32: Models › Weights › Float, then Load", 60_000)
    # after the first paint: the window must be usable before anything slow starts
    QTimer.singleShot(0, lambda: start_background(ctx, options))
    return window


def start_background(ctx: ConsoleContext, options: LaunchOptions) -> None:
    if ctx.closed:  # the window was closed before the event loop got here
        return
    # the window, Qt's wrappers and every module imported so far live as long as the process:
    # keep them out of the collector's full passes, which otherwise walk them all (a frozen
    # frame of 0.2-0.4 s) whenever the pollers (telemetry, the fleet) have made enough objects;
    # a console without a local model never reaches the freeze after a load (engine_host.py)
    gc.freeze()
    try:
        if options.replay:
            ctx.telemetry.start_replay(options.replay)
        else:
            ctx.telemetry.start_live()
    except Exception as exc:  # telemetry is optional: the rest of the console still works  # noqa: BLE001
        log.warning("telemetry did not start: %s", exc)
    if not options.start_engine:
        return
    ctx.engine_host.start()
    model = options.model
    if model is None:
        from ..engine.paths import DEMO_MODEL_DIR

        # a checkout without the trained demo model still opens; the user picks a folder
        model = str(DEMO_MODEL_DIR) if (DEMO_MODEL_DIR / "config.json").exists() else ""
    if model:
        models_page = _page(ctx, "models")
        if models_page is not None and models_page.open_folder(model):
            from .pages.models_weights import sync_weights

            sync_weights(models_page.weights_box, models_page.report, want=options.load_as)
            models_page.start_load()
        elif models_page is None:
            ctx.engine_host.load(model, name=Path(model).name, load_as=options.load_as)


def _page(ctx, page_id):
    for w in QApplication.topLevelWidgets():
        if isinstance(w, MainWindow) and w.ctx is ctx:
            return w.page(page_id)
    return None


def run(options: LaunchOptions) -> int:
    """Run the GUI until the window closes; returns the exit code."""
    import qasync

    app = ensure_app()
    loop = qasync.QEventLoop(app)
    asyncio.set_event_loop(loop)
    window = build_window(options)
    # SIGTERM (systemd, kill) and Ctrl-C close the window as File > Quit does
    uninstall = install_quit_signals(lambda _signum: window.close(), window)
    done = asyncio.Event()
    window.closed.connect(done.set)
    app.aboutToQuit.connect(done.set)
    try:
        with loop:
            loop.run_until_complete(done.wait())
    finally:
        uninstall()
    return 0
