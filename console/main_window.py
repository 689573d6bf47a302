"""Main window: sidebar of pages, stacked page area, status bar, shortcuts, About box."""

from __future__ import annotations

import importlib
import logging
import platform

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QMainWindow,
    QMessageBox,
    QStackedWidget,
    QVBoxLayout,
    QWidget,
)

from .pages import PAGES
from .pages.base import Page
from .theme import THEME_NAMES, app_icon, apply_theme
from .widgets.basic import Badge, Lamp
from .widgets.engine_alert import EngineCrashBanner

log = logging.getLogger(__name__)


class MainWindow(QMainWindow):
    closed = Signal()

    def __init__(self, ctx, parent=None):
        super().__init__(parent)
        self.ctx = ctx
        self.setWindowTitle("NPU Console")
        self.setWindowIcon(app_icon())
        self.resize(1280, 820)
        self.pages: list[Page] = []
        central = QWidget()
        lay = QHBoxLayout(central)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.setSpacing(0)
        self.sidebar = QListWidget()
        self.sidebar.setObjectName("Sidebar")
        self.sidebar.setFixedWidth(168)
        self.sidebar.setFocusPolicy(Qt.NoFocus)
        self.stack = QStackedWidget()
        lay.addWidget(self.sidebar)
        right = QVBoxLayout()
        right.setContentsMargins(0, 0, 0, 0)
        right.setSpacing(0)
        self.crash_banner = EngineCrashBanner()  # shown while the engine loop is dead
        right.addWidget(self.crash_banner)
        right.addWidget(self.stack, 1)
        lay.addLayout(right, 1)
        self.setCentralWidget(central)
        for module, cls in PAGES:
            self.add_page(getattr(importlib.import_module(module), cls)(ctx))
        self.sidebar.currentRowChanged.connect(self._switch)
        self._build_status_bar()
        self._build_menu()
        self._restore()
        self._closing = False

    # ------------------------------------------------------------------ pages

    def add_page(self, page: Page) -> None:
        """Extension point for later pages (Quantize, Benchmark, Server)."""
        self.pages.append(page)
        self.stack.addWidget(page)
        item = QListWidgetItem(f"{page.icon}   {page.title}")
        item.setData(Qt.UserRole, page.page_id)
        self.sidebar.addItem(item)
        n = len(self.pages)
        if n <= 9:
            action = QAction(self)
            action.setShortcut(QKeySequence(f"Ctrl+{n}"))
            action.triggered.connect(lambda _c=False, i=n - 1: self.show_page(i))
            self.addAction(action)

    def page(self, page_id: str) -> Page:
        return next(p for p in self.pages if p.page_id == page_id)

    def show_page(self, index_or_id) -> None:
        index = index_or_id if isinstance(index_or_id, int) else [
            p.page_id for p in self.pages].index(index_or_id)
        self.sidebar.setCurrentRow(index)

    def _switch(self, row: int) -> None:
        if row < 0:
            return
        old = self.stack.currentWidget()
        if isinstance(old, Page) and old is not self.pages[row]:
            old.deactivated()
        self.ctx.remote.set_focus(None)  # this console's numbers, unless the page names a server
        self.stack.setCurrentIndex(row)
        self.pages[row].activated()
        self.ctx.settings.setValue("window/page", self.pages[row].page_id)

    # ------------------------------------------------------------------ status bar

    def _build_status_bar(self) -> None:
        bar = self.statusBar()
        self.device_label = QLabel("device: …")
        self.model_label = QLabel("no model")
        self.model_badge = Badge("", "info")
        self.engine_label = QLabel("engine: not started")
        self.server_lamp = Lamp("off")
        self.server_label = QLabel("server off")
        self.queue_label = QLabel("queue 0")
        for w in (self.device_label, self.model_label, self.engine_label):
            bar.addWidget(w)
        # permanent: a badge shown while a message is up would sit on top of its first words
        bar.addPermanentWidget(self.model_badge)
        bar.addPermanentWidget(self.queue_label)
        bar.addPermanentWidget(self.server_lamp)
        bar.addPermanentWidget(self.server_label)
        self.ctx.bridge.stats.connect(self._on_stats)
        self.ctx.remote.focus_changed.connect(lambda _t: self._show_remote_source())
        self.ctx.remote.changed.connect(self._show_remote_source)
        self.ctx.engine_host.models_changed.connect(self._on_models)
        self.ctx.engine_host.device_changed.connect(self._on_device)
        self.ctx.server_state_changed.connect(self.set_server_state)
        host = self.ctx.engine_host
        host.engine_failed.connect(lambda msg: self.engine_label.setText(f"engine: failed ({msg})"))
        host.engine_starting.connect(lambda: self.engine_label.setText("engine: starting"))
        host.engine_ready.connect(lambda _e: self.engine_label.setText("engine: idle"))
        self.crash_banner.restart_requested.connect(host.restart_engine)
        host.engine_restarted.connect(
            lambda err: self.crash_banner.restart_failed(err) if err else None)
        self.server_lamp.set_state("off", "The HTTP API server is not running")
        self._corrupt_seen = 0  # damaged settings/history files reported so far
        self._corrupt_timer = QTimer(self)
        self._corrupt_timer.timeout.connect(self.report_corrupt_files)
        self._corrupt_timer.start(2000)
        QTimer.singleShot(0, self.report_corrupt_files)

    def report_corrupt_files(self) -> str:
        """Say in the status bar which settings/history files were damaged and kept aside."""
        from ..engine.atomic_files import corrupt_files

        found = corrupt_files()
        if len(found) <= self._corrupt_seen:
            return ""
        self._corrupt_seen = len(found)
        text = "; ".join(f"{path.name} was damaged: kept as {kept.name}, started afresh"
                         for path, kept, _why in found[-3:])
        self.statusBar().showMessage(f"⚠ {text}", 60_000)
        return text

    def _on_stats(self, stats) -> None:
        if stats.state == "error":
            self.crash_banner.show_crash(stats.last_error or "")
        elif stats.state != "stopped":
            self.crash_banner.clear()
        self._local_stats = stats
        if not self.ctx.remote.focus_text():  # else a server's numbers are on show
            self._show_local(stats)

    _local_stats = None
    _local_device = "…"  # this machine's engine device, as the engine host named it

    def _on_device(self, text: str) -> None:
        self._local_device = text
        if not self.ctx.remote.focus_text():  # else a server's device is on show
            self.device_label.setText(f"device: {text}")

    def _show_local(self, stats) -> None:
        state = stats.state if not stats.loading else f"loading {stats.loading}"
        load = self.ctx.loads.current()
        if stats.loading and load is not None:  # this console's load: its stage's percent
            state = f"loading {load.name} · {load.percent} %"
        self.engine_label.setText(f"engine: {state}")
        self.queue_label.setText(f"running {stats.running} · queue {stats.waiting}")

    def _show_remote_source(self) -> None:
        """When the page on show works on a connected server, its state and queue are in the
        status bar ("engine: 10.0.0.5:8000 · ready") instead of this console's."""
        text = self.ctx.remote.focus_text()
        if not text:
            self.device_label.setText(f"device: {self._local_device}")
            self._on_models(self.ctx.engine_host.models())
            if self._local_stats is not None:
                self._show_local(self._local_stats)
            elif self.engine_label.text().startswith("engine: ") and " · " in \
                    self.engine_label.text():
                self.engine_label.setText("engine: not started")
            return
        self.engine_label.setText(text)
        conn = self.ctx.engines.get(self.ctx.remote.focus)
        stats = conn.stats if conn is not None else None
        self.queue_label.setText(f"running {stats.running} · queue {stats.waiting}"
                                 if stats is not None else "running – · queue –")
        self._show_models_of(conn.models if conn is not None else [],
                             f" @ {conn.host}" if conn is not None else "")
        # the server's devices as its models report them, never this machine's
        devices = sorted({d for m in conn.models if (d := _served_on(m.device))}) \
            if conn is not None else []
        self.device_label.setText(f"device: {', '.join(devices) or '–'}"
                                  + (f" @ {conn.host}" if conn is not None else ""))

    def _on_models(self, models) -> None:
        if not self.ctx.remote.focus_text():  # else the server's models are on show
            self._show_models_of(models)

    def _show_models_of(self, models, where: str = "") -> None:
        if not models:
            self.model_label.setText(f"no model{where}")
            self.model_badge.set("", "none")
            return
        m = models[0]
        more = f" (+{len(models) - 1})" if len(models) > 1 else ""
        self.model_label.setText(f"model: {m.name}{where} · {m.dtype}{more}")
        self.model_badge.set("INT8" if m.quantization else "", "info")
        self.model_badge.setToolTip(m.quantization or "")

    def set_server_state(self, state: str, text: str) -> None:
        """state: on / off / busy / error (the Server page of part 2 drives this)."""
        self.server_lamp.set_state(state, text)
        self.server_label.setText(text)

    # ------------------------------------------------------------------ menu, shortcuts

    def _build_menu(self) -> None:
        menu = self.menuBar()
        file_menu = menu.addMenu("&File")
        from .widgets.servers_menu import add_server_actions

        self.connect_action, self.servers_menu = add_server_actions(file_menu, self)
        file_menu.addSeparator()
        quit_action = file_menu.addAction("Quit")
        quit_action.setShortcut(QKeySequence.Quit)
        quit_action.triggered.connect(self.close)
        view = menu.addMenu("&View")
        self.demo_action = view.addAction("Demo mode (full screen)")
        self.demo_action.setShortcuts([QKeySequence(Qt.Key_F11), QKeySequence("Ctrl+Shift+D")])
        self.demo_action.triggered.connect(self.open_demo)
        self.addAction(self.demo_action)  # the shortcut works with the menu bar hidden too
        view.addSeparator()
        for name in THEME_NAMES:
            act = view.addAction(f"{name.title()} theme")
            act.triggered.connect(lambda _c=False, n=name: self.set_theme(n))
        help_menu = menu.addMenu("&Help")
        about = help_menu.addAction("About NPU Console")
        about.triggered.connect(self.show_about)

    def open_demo(self):
        """Full-screen presentation view (console.pages.demo); Esc closes it."""
        from .pages.demo import DemoView

        if getattr(self, "demo", None) is None:
            self.demo = DemoView(self.ctx, self)
            self.demo.closed.connect(lambda: setattr(self, "demo", None))
            self.demo.setAttribute(Qt.WA_DeleteOnClose)
        self.demo.showFullScreen()
        self.demo.activateWindow()
        return self.demo

    def set_theme(self, name: str) -> None:
        from PySide6.QtWidgets import QApplication

        apply_theme(QApplication.instance(), name)
        self.ctx.settings.setValue("ui/theme", name)

    def about_text(self) -> str:
        from PySide6 import __version__ as pyside_version
        from PySide6.QtCore import qVersion

        from ..engine import __version__

        versions = self.ctx.engine_host.versions()
        rows = [("NPU Console", __version__), ("Python", platform.python_version()),
                ("Qt", qVersion()), ("PySide6", pyside_version),
                ("torch", versions.get("torch", "not loaded yet")),
                ("torch_npu", versions.get("torch_npu", "not installed")),
                ("Device", versions.get("device", "…"))]
        body = "".join(f"<tr><td><b>{k}</b>&nbsp;&nbsp;</td><td>{v}</td></tr>" for k, v in rows)
        return ("<h3>NPU Console</h3><p>Run, quantize, benchmark and serve LLMs on Ascend NPUs, "
                f"NVIDIA GPUs and CPUs.</p><table>{body}</table>")

    def show_about(self) -> QMessageBox:
        box = QMessageBox(self)
        box.setWindowTitle("About NPU Console")
        box.setIconPixmap(app_icon().pixmap(64, 64))
        box.setTextFormat(Qt.RichText)
        box.setText(self.about_text())
        box.open()
        self._about = box
        return box

    # ------------------------------------------------------------------ state

    def _restore(self) -> None:
        s = self.ctx.settings
        geometry = s.value("window/geometry")
        if geometry is not None:
            self.restoreGeometry(geometry)
        state = s.value("window/state")
        if state is not None:
            self.restoreState(state)
        page_id = s.value("window/page", "dashboard")
        ids = [p.page_id for p in self.pages]
        self.show_page(ids.index(page_id) if page_id in ids else 0)

    def closeEvent(self, event) -> None:
        if not self._closing:
            self._closing = True
            s = self.ctx.settings
            s.setValue("window/geometry", self.saveGeometry())
            s.setValue("window/state", self.saveState())
            if getattr(self, "demo", None) is not None:
                self.demo.close()
            for page in self.pages:
                try:
                    page.shutdown()
                except Exception:  # one page failing must not keep the engine running
                    log.exception("page %s shutdown", page.page_id)
            self.ctx.shutdown()
            s.sync()
            self.closed.emit()
        event.accept()


def single_shot(ms: int, fn) -> None:
    QTimer.singleShot(ms, fn)


def _served_on(device: str) -> str:
    """The device a server reported for a model it serves: "remote http://h:8000 (npu:0)" is
    npu:0; "" when it reported none."""
    head, _, rest = (device or "").partition(" (")
    return rest[:-1] if head.startswith("remote ") and rest.endswith(")") else ""
