"""Live engine plots: throughput, TTFT / ITL percentiles, queue and batch, KV use."""

from __future__ import annotations

import time

from PySide6.QtWidgets import QGridLayout, QLabel, QVBoxLayout, QWidget

from .basic import card, muted
from .live_plot import LivePlot

# at the bridge's 4 Hz sample rate this holds the longest (60 min) window
CAPACITY = 4 * 3600


class EnginePanel(QWidget):
    """Fed by EngineBridge.stats / .metrics samples; redraws only when refresh() is called."""

    def __init__(self, parent=None):
        super().__init__(parent)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.setSpacing(8)
        summary = card()
        grid = QGridLayout(summary)
        grid.setContentsMargins(12, 8, 12, 8)
        self.values: dict[str, QLabel] = {}
        self._load = None  # this console's load in flight (console.loads.LoadProgress)
        self._state = "–"
        for i, (key, label) in enumerate((
                ("state", "Engine"), ("tps", "Output tok/s"), ("running", "Running"),
                ("waiting", "Waiting"), ("kv", "KV cache"), ("ttft", "TTFT p50/p99"),
                ("itl", "ITL p50/p99"), ("batch", "Batch size"))):
            r, c = divmod(i, 4)
            box = QVBoxLayout()
            box.setSpacing(0)
            box.addWidget(muted(label))
            value = QLabel("–")
            value.setObjectName("BigValue")
            self.values[key] = value
            box.addWidget(value)
            if key == "state":  # what a load is doing ("converting GGUF tensors")
                self.stage = muted("")
                self.stage.setVisible(False)
                box.addWidget(self.stage)
            grid.addLayout(box, r, c)
        lay.addWidget(summary)
        self.tps = LivePlot("Output throughput", "tok/s", CAPACITY)
        self.tps.add_series("output")
        self.tps.add_series("prompt", 1, dashed=True)
        self.ttft = LivePlot("Time to first token", "ms", CAPACITY)
        self.ttft.add_series("p50")
        self.ttft.add_series("p99", 3)
        self.itl = LivePlot("Inter-token latency", "ms", CAPACITY)
        self.itl.add_series("p50")
        self.itl.add_series("p99", 3)
        self.queue = LivePlot("Requests", "", CAPACITY)
        self.queue.add_series("running")
        self.queue.add_series("waiting", 2)
        self.queue.add_series("batch", 4, dashed=True)
        self.kv = LivePlot("KV cache use", "%", CAPACITY, y_range=(0, 100))
        self.kv.add_series("kv", 5)
        self.plots = [self.tps, self.queue, self.ttft, self.itl, self.kv]
        grid = QGridLayout()
        grid.setSpacing(6)
        for i, plot in enumerate(self.plots):
            r, c = divmod(i, 2)
            grid.addWidget(plot, r, c, 1, 2 if i == len(self.plots) - 1 else 1)
        lay.addLayout(grid, 1)

    def set_window(self, seconds: float) -> None:
        for plot in self.plots:
            plot.window_s = seconds

    def add_stats(self, stats, t: float | None = None) -> None:
        t = time.time() if t is None else t
        self.tps.rings["output"].append(t, stats.generation_tokens_per_s)
        self.tps.rings["prompt"].append(t, stats.prompt_tokens_per_s)
        self.queue.rings["running"].append(t, stats.running)
        self.queue.rings["waiting"].append(t, stats.waiting)
        self.kv.rings["kv"].append(t, 100.0 * stats.kv_usage)
        self._state = stats.state + (f" ({stats.loading})" if stats.loading else "")
        self._show_state()
        self.values["tps"].setText(f"{stats.generation_tokens_per_s:.1f}")
        self.values["running"].setText(f"{stats.running}/{stats.max_running}")
        self.values["waiting"].setText(str(stats.waiting))
        self.values["kv"].setText(f"{100.0 * stats.kv_usage:.0f} %")

    def set_load(self, load) -> None:
        """This console's load in flight (a LoadProgress, None when none): the card shows its
        percent and stage instead of the engine's bare "loading (name)"."""
        self._load = load
        self._show_state()

    def _show_state(self) -> None:
        load = self._load
        if load is None:
            self.values["state"].setText(self._state)
            self.stage.setVisible(False)
            return
        self.values["state"].setText(f"loading {load.percent} %")
        self.stage.setText(f"{load.name}: {load.stage}")
        self.stage.setToolTip(load.text())
        self.stage.setVisible(True)

    def add_metrics(self, sample, t: float | None = None) -> None:
        """sample: console.engine_host.MetricsSample (latency percentiles in seconds)."""
        t = time.time() if t is None else t

        def ms(v):
            return None if v is None else 1000.0 * v

        self.ttft.rings["p50"].append(t, ms(sample.ttft_p50))
        self.ttft.rings["p99"].append(t, ms(sample.ttft_p99))
        self.itl.rings["p50"].append(t, ms(sample.itl_p50))
        self.itl.rings["p99"].append(t, ms(sample.itl_p99))
        self.queue.rings["batch"].append(t, sample.batch_size)
        self.values["ttft"].setText(latency_text(ms(sample.ttft_p50), ms(sample.ttft_p99)))
        self.values["itl"].setText(latency_text(ms(sample.itl_p50), ms(sample.itl_p99)))
        self.values["batch"].setText("–" if sample.batch_size is None else f"{sample.batch_size:.0f}")

    def refresh(self) -> None:
        for plot in self.plots:
            plot.refresh()


def latency_text(a, b) -> str:
    """"12/40 ms" from p50 / p99 in ms (None: "–")."""
    if a is None:
        return "–"
    return f"{a:.0f}/{b:.0f} ms" if b is not None else f"{a:.0f} ms"
