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
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFileDialog, QTableWidgetItem

from ..bench_history import (
    OFFLINE_HEADERS,
    SERVING_HEADERS,
    BenchHistory,
    offline_options,
    offline_points,
    offline_rows,
    offline_work,
    roofline_text,
    serving_bars,
    serving_rows,
    serving_summary,
    serving_work,
)
from ..bench_store import (
    BenchRecord,
    export_csv,
    export_json,
)
from ..jobs import BackgroundJob
from ..theme import current_theme
from . import benchmark_layout
from .base import Page


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
        benchmark_layout.build(self)
        self.bench.events.subscribe("records", self.show_history)
        self.bench.events.subscribe("current", self.show_record)
        ctx.engine_host.models_changed.connect(self.set_models)
        self.set_models(ctx.engine_host.models())
        self.bench.reload()

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
        opts = offline_options(self.model_box.currentData(), self.batch_sizes(),
                               self.input_len.value(), self.output_len.value())
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
        self.bench.add(rec)  # its "records" and "current" redraw the history and the result
        self.progress.finish(f"Done: {rec.title}")

    # ------------------------------------------------------------------ results

    @property
    def record(self) -> BenchRecord | None:
        return self.bench.current

    def show_history(self, records: list[BenchRecord]) -> None:
        self.history.setRowCount(len(records))
        for r, rec in enumerate(records):
            when = rec.created[5:16].replace("T", " ")
            self.history.setItem(r, 0, QTableWidgetItem(when))
            item = QTableWidgetItem(f"{rec.kind}: {rec.title}")
            item.setToolTip(rec.title)
            self.history.setItem(r, 1, item)
        self.history_empty.setVisible(not records)

    def show_record(self, rec: BenchRecord) -> None:
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
        labels, series, ttft = offline_points(doc)
        theme = current_theme()
        self.tput_plot.clear()
        self.ttft_plot.clear()
        for name, color, dashed, pts in series:
            pen = pg.mkPen(theme.series[color], width=2,
                           style=Qt.DashLine if dashed else Qt.SolidLine)
            self.tput_plot.plot([p for p, _ in pts], [y for _, y in pts], pen=pen, name=name,
                                symbol=None if dashed else "o", symbolSize=6,
                                symbolBrush=theme.series[color])
        if ttft:
            self.ttft_plot.plot([p for p, _ in ttft], [y for _, y in ttft],
                                pen=pg.mkPen(theme.series[2], width=2), symbol="o",
                                symbolSize=6, symbolBrush=theme.series[2])
        for plot in (self.tput_plot, self.ttft_plot):
            plot.getPlotItem().getAxis("bottom").setTicks([list(enumerate(labels))])
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

