"""Benchmark: an offline batch sweep of a loaded model and serving runs against this console's
server, a connected server or any OpenAI-compatible URL, with plots, a results history and
CSV / JSON / PNG export.

Both benchmarks are engine.bench functions run as BackgroundJobs: the sweep builds its own
engine over a fresh copy of the model (so its numbers are not mixed with Chat traffic), the
serving run is a real HTTP load generator.
"""

from __future__ import annotations

from pathlib import Path

import pyqtgraph as pg
from npu_console.console.bench_history import (
    OFFLINE_HEADERS,
    SERVING_HEADERS,
    BenchHistory,
    offline_rows,
    offline_work,
    roofline_text,
    serving_bars,
    serving_rows,
    serving_summary,
    serving_work,
)
from npu_console.console.bench_store import (
    BenchRecord,
    export_csv,
    export_json,
)
from npu_console.console.jobs import BackgroundJob
from npu_console.console.pages.base import Page
from npu_console.console.theme import current_theme
from npu_console.console.widgets.bars import BarChart, radio_style
from npu_console.console.widgets.basic import card, card_title, muted, page_title, spin
from npu_console.console.widgets.bench_target import ServingTarget
from npu_console.console.widgets.job_progress import JobProgress
from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QAbstractItemView,
    QButtonGroup,
    QCheckBox,
    QComboBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QPushButton,
    QRadioButton,
    QStackedWidget,
    QTableWidget,
    QTableWidgetItem,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

BATCH_CHOICES = (1, 2, 4, 8, 16)


class BenchmarkPage(Page):
    page_id = "benchmark"
    title = "Benchmark"
    icon = "▤"

    def __init__(self, ctx, parent=None):
        super().__init__(ctx, parent)
        self.bench = BenchHistory()  # the Qt-free model: history and the record on show
        self.store = self.bench.store
        self.job: BackgroundJob | None = None
        self.last_error = ""
        root = QHBoxLayout(self)
        root.setContentsMargins(16, 12, 16, 12)
        root.setSpacing(10)

        left = QVBoxLayout()
        left.setSpacing(10)
        left.addWidget(page_title("Benchmark"))
        self.tabs = QTabWidget()
        self.tabs.addTab(self._build_offline(), "Offline sweep")
        self.tabs.addTab(self._build_serving(), "Serving")
        left.addWidget(self.tabs)
        brow = QHBoxLayout()
        self.run_btn = QPushButton("Run benchmark")
        self.run_btn.setProperty("primary", True)
        self.run_btn.clicked.connect(self.start)
        brow.addWidget(self.run_btn)
        brow.addStretch(1)
        left.addLayout(brow)
        self.progress = JobProgress("Pick a benchmark and press Run.")
        left.addWidget(self.progress)
        hist = card()
        hv = QVBoxLayout(hist)
        hv.setContentsMargins(12, 10, 12, 10)
        hv.addWidget(card_title("History"))
        self.history = QTableWidget(0, 2)
        self.history.setHorizontalHeaderLabels(["When", "Run"])
        self.history.horizontalHeader().setSectionResizeMode(0, QHeaderView.ResizeToContents)
        self.history.horizontalHeader().setSectionResizeMode(1, QHeaderView.Stretch)
        self.history.verticalHeader().setVisible(False)
        self.history.setEditTriggers(QAbstractItemView.NoEditTriggers)
        self.history.setSelectionBehavior(QAbstractItemView.SelectRows)
        self.history.setSelectionMode(QAbstractItemView.SingleSelection)
        self.history.cellClicked.connect(lambda r, _c: self.show_record(self.bench.records[r]))
        hv.addWidget(self.history, 1)
        self.history_empty = muted("Finished runs are kept here.")
        hv.addWidget(self.history_empty)
        left.addWidget(hist, 1)
        lw = QWidget()
        lw.setLayout(left)
        lw.setMaximumWidth(480)
        root.addWidget(lw, 2)

        right = card()
        rv = QVBoxLayout(right)
        rv.setContentsMargins(12, 10, 12, 10)
        top = QHBoxLayout()
        self.result_title = card_title("No result yet")
        self.result_title.setWordWrap(True)
        top.addWidget(self.result_title, 1)
        self.export_buttons = []
        for label, fn in (("CSV", self.export_csv), ("JSON", self.export_json),
                          ("PNG", self.export_png)):
            b = QPushButton(f"Export {label}")
            b.setEnabled(False)
            b.clicked.connect(lambda _c=False, f=fn: f())
            self.export_buttons.append(b)
            top.addWidget(b)
        rv.addLayout(top)
        self.roofline_label = QLabel("")
        self.roofline_label.setWordWrap(True)
        self.roofline_label.setTextFormat(Qt.RichText)
        rv.addWidget(self.roofline_label)
        self.plots = QStackedWidget()
        self.empty_plot = muted("Run a sweep or a serving benchmark: plots and numbers appear "
                                "here, and every run is kept in the history.")
        self.empty_plot.setAlignment(Qt.AlignCenter)
        self.empty_plot.setWordWrap(True)
        self.plots.addWidget(self.empty_plot)
        self.offline_plots = self._build_offline_plots()
        self.plots.addWidget(self.offline_plots)
        self.serving_chart = BarChart("Latency percentiles", "ms")
        self.plots.addWidget(self.serving_chart)
        rv.addWidget(self.plots, 3)
        self.table = QTableWidget(0, 0)
        self.table.setEditTriggers(QAbstractItemView.NoEditTriggers)
        self.table.verticalHeader().setVisible(False)
        self.table.horizontalHeader().setSectionResizeMode(QHeaderView.Stretch)
        rv.addWidget(self.table, 2)
        self.notes = muted("")
        self.notes.setWordWrap(True)
        rv.addWidget(self.notes)
        root.addWidget(right, 3)

        self.setStyleSheet(radio_style())
        ctx.engine_host.models_changed.connect(self.set_models)
        self.set_models(ctx.engine_host.models())
        self.refresh_history()

    # ------------------------------------------------------------------ forms

    def _build_offline(self) -> QWidget:
        w = QWidget()
        form = QFormLayout(w)
        self.model_box = QComboBox()
        form.addRow("Model", self.model_box)
        brow = QHBoxLayout()
        self.batch_checks: dict[int, QCheckBox] = {}
        for b in BATCH_CHOICES:
            c = QCheckBox(str(b))
            c.setChecked(True)
            self.batch_checks[b] = c
            brow.addWidget(c)
        brow.addStretch(1)
        form.addRow("Batch sizes", brow)
        self.input_len = spin(1, 8192, 128)
        self.output_len = spin(2, 8192, 128)
        form.addRow("Prompt tokens", self.input_len)
        form.addRow("New tokens", self.output_len)
        note = muted("Runs on a separate copy of the model, greedy, fixed lengths.")
        note.setWordWrap(True)
        form.addRow(note)
        return w

    def _build_serving(self) -> QWidget:
        w = QWidget()
        form = QFormLayout(w)
        # this console's server, a connected one (File > Connect to server) or a URL
        self.target = ServingTarget(self.ctx)
        form.addRow("Target", self.target)
        t = self.target
        self.target_local, self.target_server, self.target_url = t.local, t.server, t.url
        self.server_box, self.url_edit, self.key_edit = t.server_box, t.url_edit, t.key_edit
        self.model_edit = QLineEdit()
        self.model_edit.setPlaceholderText("first model the server lists")
        form.addRow("Model", self.model_edit)
        lrow = QHBoxLayout()
        self.mode_conc = QRadioButton("Concurrency")
        self.mode_rate = QRadioButton("Rate (req/s)")
        self.mode_conc.setChecked(True)
        mg = QButtonGroup(w)
        mg.addButton(self.mode_conc)
        mg.addButton(self.mode_rate)
        self.concurrency = spin(1, 1024, 4)
        self.rate = spin(0.1, 1000.0, 2.0)
        lrow.addWidget(self.mode_conc)
        lrow.addWidget(self.concurrency, 1)
        rrow = QHBoxLayout()
        rrow.addWidget(self.mode_rate)
        rrow.addWidget(self.rate, 1)
        form.addRow("Load", lrow)
        form.addRow("", rrow)
        self.num_prompts = spin(1, 100000, 32)
        form.addRow("Requests", self.num_prompts)
        srow = QHBoxLayout()
        self.s_input = spin(1, 8192, 64)
        self.s_output = spin(1, 8192, 64)
        srow.addWidget(self.s_input)
        srow.addWidget(muted("prompt +"))
        srow.addWidget(self.s_output)
        srow.addWidget(muted("new tokens"))
        form.addRow("Lengths", srow)
        grow = QHBoxLayout()
        self.slo_ttft = spin(0, 600000, 1000, " ms")
        self.slo_tpot = spin(0, 600000, 200, " ms")
        for box, label in ((self.slo_ttft, "TTFT ≤"), (self.slo_tpot, "TPOT ≤")):
            box.setSpecialValueText("off")
            grow.addWidget(muted(label))
            grow.addWidget(box)
        form.addRow("Goodput SLO", grow)
        return w

    def _build_offline_plots(self) -> QWidget:
        w = QWidget()
        lay = QHBoxLayout(w)
        lay.setContentsMargins(0, 0, 0, 0)
        theme = current_theme()
        self.tput_plot = pg.PlotWidget()
        self.ttft_plot = pg.PlotWidget()
        for plot, title in ((self.tput_plot, "Tokens/s by batch size"),
                            (self.ttft_plot, "TTFT by batch size (ms)")):
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
        legend = self.tput_plot.getPlotItem().addLegend(offset=(4, 4), labelTextSize="8pt")
        legend.setBrush(pg.mkBrush(theme.color("panel") + "c0"))
        legend.setLabelTextColor(theme.color("fg"))
        return w

    def set_models(self, models) -> None:
        current = self.model_box.currentText()
        self.model_box.clear()
        for m in models:
            self.model_box.addItem(m.name, m.path)
        i = self.model_box.findText(current)
        if i >= 0:
            self.model_box.setCurrentIndex(i)

    def batch_sizes(self) -> tuple[int, ...]:
        return tuple(b for b, c in self.batch_checks.items() if c.isChecked())

    # ------------------------------------------------------------------ run

    def busy(self) -> bool:
        return self.job is not None and self.job.running()

    def start(self) -> BackgroundJob | None:
        if self.busy():
            return None
        try:
            fn, kind = (self._offline_job() if self.tabs.currentIndex() == 0
                        else self._serving_job())
        except ValueError as exc:
            self.last_error = str(exc)
            self.progress.finish(f"⚠ {exc}")
            return None
        self.last_error = ""
        self.job = BackgroundJob(fn, kind, parent=self)
        self.progress.bind(self.job)
        self.run_btn.setEnabled(False)
        self.job.finished.connect(self._on_result)
        self.job.failed.connect(self._on_failed)
        self.job.cancelled.connect(lambda: self.progress.finish("Cancelled."))
        self.job.ended.connect(lambda: self.run_btn.setEnabled(True))
        self.job.start()
        return self.job

    # engine.bench imports (numpy, httpx, torch on first use) happen in the worker functions,
    # not on the GUI thread

    def _offline_job(self):
        path = self.model_box.currentData()
        if not path:
            raise ValueError("Load a model first (Models page): the sweep benchmarks a loaded "
                             "model.")
        sizes = self.batch_sizes()
        if not sizes:
            raise ValueError("Tick at least one batch size.")
        opts = {"model": path, "batch_sizes": sizes, "input_len": self.input_len.value(),
                "output_len": self.output_len.value(), "num_threads": 1}
        return offline_work(opts, self.model_box.currentText()), "offline"

    def _serving_job(self):
        url, key = self.target.resolve()
        slo = {"ttft_ms": self.slo_ttft.value() or None,
               "tpot_ms": self.slo_tpot.value() or None}
        opts = {"base_url": url, "model": self.model_edit.text().strip() or None, "api_key": key,
                "num_prompts": self.num_prompts.value(),
                "concurrency": self.concurrency.value() if self.mode_conc.isChecked() else None,
                "rate": self.rate.value() if self.mode_rate.isChecked() else None,
                "input_len": self.s_input.value(), "output_len": self.s_output.value()}
        return serving_work(opts, slo), "serving"

    def _on_failed(self, msg: str) -> None:
        self.last_error = msg
        self.progress.finish(f"⚠ {msg}")

    def _on_result(self, rec: BenchRecord) -> None:
        self.bench.add(rec)
        self.refresh_history(reload=False)
        self.show_record(rec)
        self.progress.finish(f"Done: {rec.title}")

    # ------------------------------------------------------------------ results

    @property
    def record(self) -> BenchRecord | None:
        return self.bench.current

    def refresh_history(self, reload: bool = True) -> None:
        records = self.bench.reload() if reload else self.bench.records
        self.history.setRowCount(len(records))
        for r, rec in enumerate(records):
            when = rec.created[5:16].replace("T", " ")
            self.history.setItem(r, 0, QTableWidgetItem(when))
            item = QTableWidgetItem(f"{rec.kind}: {rec.title}")
            item.setToolTip(rec.title)
            self.history.setItem(r, 1, item)
        self.history_empty.setVisible(not records)

    def show_record(self, rec: BenchRecord) -> None:
        self.bench.current = rec
        for b in self.export_buttons:
            b.setEnabled(True)
        self.result_title.setText(f"{rec.kind.title()}: {rec.title}")
        if rec.kind == "offline":
            self._show_offline(rec.document)
        else:
            self._show_serving(rec.document)
        self.notes.setText("\n".join(f"note: {n}" for n in rec.document.get("notes", [])))

    def _fill_table(self, headers: list[str], rows: list[list[str]]) -> None:
        self.table.clear()
        self.table.setColumnCount(len(headers))
        self.table.setRowCount(len(rows))
        self.table.setHorizontalHeaderLabels(headers)
        for r, row in enumerate(rows):
            for c, text in enumerate(row):
                item = QTableWidgetItem(text)
                item.setTextAlignment(Qt.AlignCenter)
                self.table.setItem(r, c, item)

    def _show_offline(self, doc: dict) -> None:
        batches = doc.get("batches", [])
        theme = current_theme()
        xs = [b["batch_size"] for b in batches]
        pos = list(range(len(xs)))
        ticks = [[(i, str(x)) for i, x in zip(pos, xs)]]
        self.tput_plot.clear()
        self.ttft_plot.clear()
        series = (("output tok/s", "output_tokens_per_s", 0, False),
                  ("decode tok/s", "decode_tokens_per_s", 1, False),
                  ("bandwidth limit", "roofline_tokens_per_s", 3, True))
        for name, key, color, dashed in series:
            ys = [b.get(key) for b in batches]
            pts = [(p, y) for p, y in zip(pos, ys) if y is not None]
            if not pts:
                continue
            pen = pg.mkPen(theme.series[color], width=2,
                           style=Qt.DashLine if dashed else Qt.SolidLine)
            self.tput_plot.plot([p for p, _ in pts], [y for _, y in pts], pen=pen, name=name,
                                symbol=None if dashed else "o", symbolSize=6,
                                symbolBrush=theme.series[color])
        tt = [(p, b.get("ttft_ms_mean")) for p, b in zip(pos, batches)
              if b.get("ttft_ms_mean") is not None]
        if tt:
            self.ttft_plot.plot([p for p, _ in tt], [y for _, y in tt],
                                pen=pg.mkPen(theme.series[2], width=2), symbol="o",
                                symbolSize=6, symbolBrush=theme.series[2])
        for plot in (self.tput_plot, self.ttft_plot):
            plot.getPlotItem().getAxis("bottom").setTicks(ticks)
            plot.getPlotItem().setLabel("bottom", "batch size")
            plot.enableAutoRange()
        self.plots.setCurrentWidget(self.offline_plots)
        self._fill_table(OFFLINE_HEADERS, offline_rows(doc))
        self.roofline_label.setText(roofline_text(doc))

    def _show_serving(self, doc: dict) -> None:
        self.serving_chart.set_bars(*serving_bars(doc), label_width=80)
        self.plots.setCurrentWidget(self.serving_chart)
        self._fill_table(SERVING_HEADERS, serving_rows(doc))
        self.roofline_label.setText(serving_summary(doc))

    # ------------------------------------------------------------------ export

    def _ask_path(self, suffix: str) -> str | None:
        default = str(Path.home() / f"npu-console-{self.record.kind}-"
                      f"{self.record.created.replace(':', '')[:15]}.{suffix}")
        path, _ = QFileDialog.getSaveFileName(self, f"Export {suffix.upper()}", default,
                                              f"{suffix.upper()} (*.{suffix})")
        return path or None

    def export_csv(self, path: str | None = None) -> Path | None:
        if self.record is None or not (path := path or self._ask_path("csv")):
            return None
        return export_csv(self.record, path)

    def export_json(self, path: str | None = None) -> Path | None:
        if self.record is None or not (path := path or self._ask_path("json")):
            return None
        return export_json(self.record, path)

    def export_png(self, path: str | None = None) -> Path | None:
        if self.record is None or not (path := path or self._ask_path("png")):
            return None
        self.plots.currentWidget().grab().save(str(path))
        return Path(path)

    def shutdown(self) -> None:
        if self.busy():
            self.job.cancel()

