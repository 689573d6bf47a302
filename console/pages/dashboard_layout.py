"""The Dashboard's widgets, built in named parts (the page itself renders and forwards)."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QComboBox,
    QGridLayout,
    QHBoxLayout,
    QPushButton,
    QScrollArea,
    QSplitter,
    QStackedWidget,
    QVBoxLayout,
    QWidget,
)

from ..widgets.basic import muted, page_title
from ..widgets.chip_drawer import ChipDrawer
from ..widgets.engine_panel import EnginePanel
from ..widgets.live_plot import LivePlot
from .dashboard_fleet import FleetView


def build(page, windows, metrics) -> None:
    """The title row, the host strip, the alert banners, then chips | drawer | engine.
    `windows`: (label, seconds) of the history window box; `metrics`: the history's choices."""
    root = QVBoxLayout(page)
    root.setContentsMargins(16, 12, 16, 12)
    root.addLayout(header(page, windows))
    page.fleet = FleetView(page)  # the host strip; hidden until a server is attached
    root.addWidget(page.fleet.strip)
    page.banner_box = QVBoxLayout()
    page.banner_box.setSpacing(4)
    root.addLayout(page.banner_box)
    split = QSplitter(Qt.Horizontal)
    split.setChildrenCollapsible(False)
    split.addWidget(chips(page, metrics))
    page.drawer = ChipDrawer()  # a chip's npu-smi details; opened by a click on its card
    page.drawer.hide()
    page.drawer.closed.connect(page._drawer_closed)
    split.addWidget(page.drawer)
    page.engine_panel = EnginePanel()  # this machine's engine; a host's is the fleet view's
    page.engines = QStackedWidget()
    page.engines.addWidget(page.engine_panel)
    split.addWidget(page.engines)
    split.setStretchFactor(0, 1)
    split.setStretchFactor(2, 1)
    split.setSizes([560, 0, 560])
    page.split = split
    root.addWidget(split, 1)


def header(page, windows) -> QHBoxLayout:
    """The title, where the numbers come from, the history window and the replay buttons."""
    head = QHBoxLayout()
    head.addWidget(page_title("Dashboard"))
    page.source = muted("telemetry: not started")
    head.addWidget(page.source, 1)
    page.window_box = QComboBox()
    for label, seconds in windows:
        page.window_box.addItem(label, seconds)
    page.window_box.setToolTip("History window of every plot")
    page.replay_btn = QPushButton("Replay capture…")
    page.replay_btn.setToolTip("Show saved `npu-smi info` captures instead of live data")
    page.folder_btn = QPushButton("Folder…")
    page.folder_btn.setToolTip("Replay a folder of captures: `npu-smi info` tables and their "
                               "`info -t` sub-commands (chip details)")
    page.live_btn = QPushButton("Live")
    page.live_btn.setToolTip("Back to live telemetry")
    page.back_btn = QPushButton("← This machine")
    page.back_btn.setToolTip("Show this machine's chips and engine again")
    page.back_btn.hide()
    head.addWidget(page.back_btn)
    head.addWidget(muted("Window"))
    head.addWidget(page.window_box)
    head.addWidget(page.replay_btn)
    head.addWidget(page.folder_btn)
    head.addWidget(page.live_btn)
    return head


def chips(page, metrics) -> QWidget:
    """The chip cards (a grid in a scroll area) over the device history plot."""
    left = QWidget()
    left_lay = QVBoxLayout(left)
    left_lay.setContentsMargins(0, 0, 6, 0)
    page.host_note = muted("")  # a drilled-in host that is lost: since when, next try
    page.host_note.setWordWrap(True)
    page.host_note.hide()
    left_lay.addWidget(page.host_note)
    page.empty = muted("Waiting for the first telemetry sample…")
    page.empty.setAlignment(Qt.AlignCenter)
    left_lay.addWidget(page.empty)
    page.cards_host = QWidget()
    page.cards_grid = QGridLayout(page.cards_host)
    page.cards_grid.setContentsMargins(0, 0, 0, 0)
    page.cards_grid.setSpacing(8)
    scroll = QScrollArea()
    scroll.setWidgetResizable(True)
    scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarAlwaysOff)
    scroll.setWidget(page.cards_host)
    left_lay.addWidget(scroll, 3)
    hist_head = QHBoxLayout()
    hist_head.addWidget(muted("Device history"))
    hist_head.addStretch(1)
    page.metric_box = QComboBox()
    for label, key, _host_key in metrics:
        page.metric_box.addItem(label, key)
    hist_head.addWidget(page.metric_box)
    left_lay.addLayout(hist_head)
    page.history = LivePlot("", "", capacity=3600)
    left_lay.addWidget(page.history, 2)
    return left


def connect(page) -> None:
    """The bridge's samples and alerts, the telemetry source, and the user's actions."""
    ctx = page.ctx
    bridge = ctx.bridge
    bridge.telemetry.connect(page.on_snapshot)
    bridge.alert.connect(page.on_alert)
    bridge.stats.connect(page.engine_panel.add_stats)
    bridge.metrics.connect(page.engine_panel.add_metrics)
    ctx.loads.subscribe("changed", lambda _loads: page.engine_panel.set_load(ctx.loads.current()))
    ctx.telemetry.source_changed.connect(page.on_source)
    page.window_box.currentIndexChanged.connect(page.on_window)
    page.metric_box.currentIndexChanged.connect(lambda _i: page._rebuild_history())
    page.replay_btn.clicked.connect(page.choose_replay)
    page.folder_btn.clicked.connect(page.choose_replay_folder)
    page.live_btn.clicked.connect(page.go_live)
    page.back_btn.clicked.connect(lambda: page.fleet.view_host(""))
