"""The Benchmark page's widgets, built in named parts (the page renders and forwards)."""

from __future__ import annotations

import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QAbstractItemView,
    QButtonGroup,
    QCheckBox,
    QComboBox,
    QFormLayout,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QPushButton,
    QRadioButton,
    QStackedWidget,
    QTableWidget,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from ..theme import current_theme
from ..widgets.bars import BarChart, radio_style
from ..widgets.basic import card, card_title, muted, page_title, spin
from ..widgets.bench_target import ServingTarget
from ..widgets.job_progress import JobProgress

BATCH_CHOICES = (1, 2, 4, 8, 16)


def build(page) -> None:
    """The forms, Run, progress and history on the left; the result on the right."""
    root = QHBoxLayout(page)
    root.setContentsMargins(16, 12, 16, 12)
    root.setSpacing(10)
    root.addWidget(controls(page), 2)
    root.addWidget(results(page), 3)
    page.setStyleSheet(radio_style())


def controls(page) -> QWidget:
    """The two forms as tabs, Run, the job's progress and the history."""
    left = QVBoxLayout()
    left.setSpacing(10)
    left.addWidget(page_title("Benchmark"))
    page.tabs = QTabWidget()
    page.tabs.addTab(offline_form(page), "Offline sweep")
    page.tabs.addTab(serving_form(page), "Serving")
    left.addWidget(page.tabs)
    brow = QHBoxLayout()
    page.run_btn = QPushButton("Run benchmark")
    page.run_btn.setProperty("primary", True)
    page.run_btn.clicked.connect(page.start)
    brow.addWidget(page.run_btn)
    brow.addStretch(1)
    left.addLayout(brow)
    page.progress = JobProgress("Pick a benchmark and press Run.")
    left.addWidget(page.progress)
    left.addWidget(history_card(page), 1)
    lw = QWidget()
    lw.setLayout(left)
    lw.setMaximumWidth(480)
    return lw


def history_card(page) -> QWidget:
    """Earlier runs, newest first; a click shows one."""
    hist = card()
    hv = QVBoxLayout(hist)
    hv.setContentsMargins(12, 10, 12, 10)
    hv.addWidget(card_title("History"))
    page.history = QTableWidget(0, 2)
    page.history.setHorizontalHeaderLabels(["When", "Run"])
    page.history.horizontalHeader().setSectionResizeMode(0, QHeaderView.ResizeToContents)
    page.history.horizontalHeader().setSectionResizeMode(1, QHeaderView.Stretch)
    page.history.verticalHeader().setVisible(False)
    page.history.setEditTriggers(QAbstractItemView.NoEditTriggers)
    page.history.setSelectionBehavior(QAbstractItemView.SelectRows)
    page.history.setSelectionMode(QAbstractItemView.SingleSelection)
    page.history.cellClicked.connect(lambda r, _c: page.bench.pick(r))
    hv.addWidget(page.history, 1)
    page.history_empty = muted("Finished runs are kept here.")
    hv.addWidget(page.history_empty)
    return hist


def results(page) -> QWidget:
    """The record on show: its title and exports, summary line, plots, table and notes."""
    right = card()
    rv = QVBoxLayout(right)
    rv.setContentsMargins(12, 10, 12, 10)
    top = QHBoxLayout()
    page.result_title = card_title("No result yet")
    page.result_title.setWordWrap(True)
    top.addWidget(page.result_title, 1)
    page.export_buttons = []
    for label, fn in (("CSV", page.export_csv), ("JSON", page.export_json),
                      ("PNG", page.export_png)):
        b = QPushButton(f"Export {label}")
        b.setEnabled(False)
        b.clicked.connect(lambda _c=False, f=fn: f())
        page.export_buttons.append(b)
        top.addWidget(b)
    rv.addLayout(top)
    page.roofline_label = QLabel("")
    page.roofline_label.setWordWrap(True)
    page.roofline_label.setTextFormat(Qt.RichText)
    rv.addWidget(page.roofline_label)
    rv.addWidget(plots(page), 3)
    page.table = QTableWidget(0, 0)
    page.table.setEditTriggers(QAbstractItemView.NoEditTriggers)
    page.table.verticalHeader().setVisible(False)
    page.table.horizontalHeader().setSectionResizeMode(QHeaderView.Stretch)
    rv.addWidget(page.table, 2)
    page.notes = muted("")
    page.notes.setWordWrap(True)
    rv.addWidget(page.notes)
    return right


def plots(page) -> QStackedWidget:
    """An empty state, the sweep's two line plots, the serving run's percentile bars."""
    page.plots = QStackedWidget()
    page.empty_plot = muted("Run a sweep or a serving benchmark: plots and numbers appear "
                            "here, and every run is kept in the history.")
    page.empty_plot.setAlignment(Qt.AlignCenter)
    page.empty_plot.setWordWrap(True)
    page.plots.addWidget(page.empty_plot)
    page.offline_plots = offline_plots(page)
    page.plots.addWidget(page.offline_plots)
    page.serving_chart = BarChart("Latency percentiles", "ms")
    page.plots.addWidget(page.serving_chart)
    return page.plots


def offline_form(page) -> QWidget:
    """The sweep: a loaded model, the batch sizes, fixed prompt and output lengths."""
    w = QWidget()
    form = QFormLayout(w)
    page.model_box = QComboBox()
    form.addRow("Model", page.model_box)
    brow = QHBoxLayout()
    page.batch_checks: dict[int, QCheckBox] = {}
    for b in BATCH_CHOICES:
        c = QCheckBox(str(b))
        c.setChecked(True)
        page.batch_checks[b] = c
        brow.addWidget(c)
    brow.addStretch(1)
    form.addRow("Batch sizes", brow)
    page.input_len = spin(1, 8192, 128)
    page.output_len = spin(2, 8192, 128)
    form.addRow("Prompt tokens", page.input_len)
    form.addRow("New tokens", page.output_len)
    note = muted("Runs on a separate copy of the model, greedy, fixed lengths.")
    note.setWordWrap(True)
    form.addRow(note)
    return w


def serving_form(page) -> QWidget:
    """The serving run: target, model, load (concurrency or rate), sizes and the SLO."""
    w = QWidget()
    form = QFormLayout(w)
    # this console's server, a connected one (File > Connect to server) or a URL
    page.target = ServingTarget(page.ctx)
    form.addRow("Target", page.target)
    t = page.target
    page.target_local, page.target_server, page.target_url = t.local, t.server, t.url
    page.server_box, page.url_edit, page.key_edit = t.server_box, t.url_edit, t.key_edit
    page.model_edit = QLineEdit()
    page.model_edit.setPlaceholderText("first model the server lists")
    form.addRow("Model", page.model_edit)
    lrow = QHBoxLayout()
    page.mode_conc = QRadioButton("Concurrency")
    page.mode_rate = QRadioButton("Rate (req/s)")
    page.mode_conc.setChecked(True)
    mg = QButtonGroup(w)
    mg.addButton(page.mode_conc)
    mg.addButton(page.mode_rate)
    page.concurrency = spin(1, 1024, 4)
    page.rate = spin(0.1, 1000.0, 2.0)
    lrow.addWidget(page.mode_conc)
    lrow.addWidget(page.concurrency, 1)
    rrow = QHBoxLayout()
    rrow.addWidget(page.mode_rate)
    rrow.addWidget(page.rate, 1)
    form.addRow("Load", lrow)
    form.addRow("", rrow)
    page.num_prompts = spin(1, 100000, 32)
    form.addRow("Requests", page.num_prompts)
    form.addRow("Lengths", _lengths_row(page))
    form.addRow("Goodput SLO", _slo_row(page))
    return w


def _lengths_row(page) -> QHBoxLayout:
    srow = QHBoxLayout()
    page.s_input = spin(1, 8192, 64)
    page.s_output = spin(1, 8192, 64)
    srow.addWidget(page.s_input)
    srow.addWidget(muted("prompt +"))
    srow.addWidget(page.s_output)
    srow.addWidget(muted("new tokens"))
    return srow


def _slo_row(page) -> QHBoxLayout:
    grow = QHBoxLayout()
    page.slo_ttft = spin(0, 600000, 1000, " ms")
    page.slo_tpot = spin(0, 600000, 200, " ms")
    for box, label in ((page.slo_ttft, "TTFT ≤"), (page.slo_tpot, "TPOT ≤")):
        box.setSpecialValueText("off")
        grow.addWidget(muted(label))
        grow.addWidget(box)
    return grow


def offline_plots(page) -> QWidget:
    """Tokens/s and TTFT by batch size, side by side, in the theme's plot colours."""
    w = QWidget()
    lay = QHBoxLayout(w)
    lay.setContentsMargins(0, 0, 0, 0)
    theme = current_theme()
    page.tput_plot = pg.PlotWidget()
    page.ttft_plot = pg.PlotWidget()
    for plot, title in ((page.tput_plot, "Tokens/s by batch size"),
                        (page.ttft_plot, "TTFT by batch size (ms)")):
        plot.setBackground(theme.color("plot_bg"))
        item = plot.getPlotItem()
        item.setMenuEnabled(False)
        item.hideButtons()
        item.showGrid(x=True, y=True, alpha=0.15)
        plot.setMouseEnabled(x=False, y=False)
        for axis in ("left", "bottom"):
            ax = item.getAxis(axis)
            ax.setTextPen(theme.color("plot_fg"))
            ax.setPen(theme.color("border"))
        item.setTitle(f"<span style='color:{theme.color('plot_fg')}'>{title}</span>",
                      size="9pt")
        lay.addWidget(plot)
    legend = page.tput_plot.getPlotItem().addLegend(offset=(4, 4), labelTextSize="8pt")
    legend.setBrush(pg.mkBrush(theme.color("panel") + "c0"))
    legend.setLabelTextColor(theme.color("fg"))
    return w
