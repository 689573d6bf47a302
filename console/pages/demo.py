"""Demo mode: a full-screen presentation view for stakeholders, readable across a room.

Large live numbers (decode tok/s, TTFT, active requests, accelerator utilisation and memory),
two live plots, and an A/B chat that streams two variants side by side. It only listens to the
bridge's signals (already coalesced on the GUI thread); Esc leaves it.
"""

from __future__ import annotations

import time

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QKeySequence, QPalette, QShortcut, QTextCharFormat, QTextCursor
from PySide6.QtWidgets import QTextEdit, QWidget

from .. import demo_feed
from . import demo_layout


class DemoView(QWidget):
    closed = Signal()

    def __init__(self, ctx, parent=None):
        super().__init__(parent, Qt.Window)
        self.ctx = ctx
        self.setWindowTitle("NPU Console — demo")
        self.setObjectName("DemoView")
        self._requests: dict[str, QTextEdit] = {}
        self._thinking: dict[str, bool] = {}  # request id -> still in its reasoning
        self._reasoners: set[str] = set()  # models whose chat replies carry reasoning
        demo_layout.build(self)
        QShortcut(QKeySequence(Qt.Key_Escape), self, activated=self.close)
        b = ctx.bridge
        b.stats.connect(self._on_stats)
        b.metrics.connect(self._on_metrics)
        b.telemetry.connect(self._on_telemetry)
        b.reasoning.connect(self._on_reasoning)
        b.tokens.connect(self._on_tokens)
        b.finished.connect(self._on_finished)
        ctx.engine_host.models_changed.connect(self.set_models)
        self.set_models(ctx.engine_host.models())
        poller = ctx.telemetry.poller
        if poller is not None and poller.latest is not None:
            self._on_telemetry(poller.latest)
        self._timer = QTimer(self)
        self._timer.setInterval(500)
        self._timer.timeout.connect(self._refresh_plots)
        self._timer.start()

    # ------------------------------------------------------------------ data

    def set_models(self, models) -> None:
        names = [m.name for m in models]
        self._reasoners = {m.name for m in models if getattr(m, "reasoning_parser", None)}
        for i, (box, _text) in enumerate(self.panes):
            current = box.currentText()
            box.clear()
            box.addItems(names)
            if current in names:
                box.setCurrentText(current)
            elif names:
                box.setCurrentIndex(min(i, len(names) - 1))

    def _on_stats(self, stats) -> None:
        now = time.time()
        self.tok_s.set(f"{stats.generation_tokens_per_s:.0f}")
        self.tok_plot.rings["tok/s"].append(now, stats.generation_tokens_per_s)
        self.active.set(str(stats.running), f"{stats.waiting} waiting")

    def _on_metrics(self, sample) -> None:
        now = time.time()
        if sample.ttft_p50 is not None:
            self.ttft.set(f"{sample.ttft_p50 * 1000:.0f}")
            self.ttft_plot.rings["p50"].append(now, sample.ttft_p50 * 1000)
        if sample.ttft_p99 is not None:
            self.ttft_plot.rings["p99"].append(now, sample.ttft_p99 * 1000)

    def _on_telemetry(self, snap) -> None:
        tiles = demo_feed.tiles(snap)
        if tiles is None:
            return
        self.util.label.setText(tiles.load_label)
        self.util.set(*tiles.load)
        self.memory.label.setText(tiles.memory_label)
        if tiles.memory is not None:
            self.memory.set(*tiles.memory)
        self.device_label.setText(tiles.device)

    def _refresh_plots(self) -> None:
        if self.isVisible():
            self.tok_plot.refresh()
            self.ttft_plot.refresh()

    # ------------------------------------------------------------------ A/B chat

    def send(self, text: str | None = None) -> list[str]:
        from ...engine.runtime.types import EngineError

        text = (text if isinstance(text, str) else None) or self.prompt.text().strip()
        if not text:
            return []
        ids = []
        seen = set()
        for box, pane in self.panes:
            model = box.currentText()
            pane.clear()
            if not model:
                pane.setPlainText("No model loaded.")
                continue
            if model in seen and len(self.panes) > 1:
                pane.setPlainText("(same model as A: pick another variant to compare)")
                continue
            seen.add(model)
            pane.setPlainText(f"» {text}\n\n")
            try:
                rid = self.ctx.bridge.submit(demo_feed.request(text, model,
                                                               model in self._reasoners))
            except EngineError as exc:
                pane.setPlainText(f"⚠ {exc}")
                continue
            self._requests[rid] = pane
            ids.append(rid)
        self.prompt.clear()
        return ids

    def _on_reasoning(self, rid: str, text: str, _n_tokens: int) -> None:
        pane = self._requests.get(rid)
        if pane is None or not text:
            return
        if rid not in self._thinking:
            self._thinking[rid] = True
            _append(pane, "Thinking: ", muted=True, bold=True)
        _append(pane, text, muted=True)

    def _on_tokens(self, rid: str, text: str) -> None:
        pane = self._requests.get(rid)
        if pane is not None and text:
            if self._thinking.get(rid):  # the answer starts below the reasoning
                self._thinking[rid] = False
                text = "\n\n" + text
            _append(pane, text)

    def _on_finished(self, rid: str, fin) -> None:
        pane = self._requests.pop(rid, None)
        self._thinking.pop(rid, None)
        if pane is None:
            return
        for line in demo_feed.finish_lines(fin):
            pane.append(line)

    def busy(self) -> bool:
        return bool(self._requests)

    # ------------------------------------------------------------------ lifecycle

    def keyPressEvent(self, event) -> None:
        # the shortcut needs an active window; a key that reaches us directly works everywhere
        if event.key() == Qt.Key_Escape:
            self.close()
            return
        super().keyPressEvent(event)

    def closeEvent(self, event) -> None:
        self._timer.stop()
        for rid in list(self._requests):
            self.ctx.bridge.cancel(rid)
        b = self.ctx.bridge
        for sig, slot in ((b.stats, self._on_stats), (b.metrics, self._on_metrics),
                          (b.telemetry, self._on_telemetry), (b.tokens, self._on_tokens),
                          (b.reasoning, self._on_reasoning),
                          (b.finished, self._on_finished)):
            try:
                sig.disconnect(slot)
            except (RuntimeError, TypeError):
                pass
        try:
            self.ctx.engine_host.models_changed.disconnect(self.set_models)
        except (RuntimeError, TypeError):
            pass
        self.closed.emit()
        event.accept()


def _append(pane: QTextEdit, text: str, muted: bool = False, bold: bool = False) -> None:
    """Add text at the end of a demo pane: the reasoning muted and italic, the answer plain."""
    cursor = pane.textCursor()
    cursor.movePosition(QTextCursor.End)
    fmt = QTextCharFormat()
    if muted:
        fmt.setForeground(pane.palette().color(QPalette.PlaceholderText))
        fmt.setFontItalic(not bold)
        if bold:
            fmt.setFontWeight(700)
    cursor.insertText(text, fmt)
    pane.setTextCursor(cursor)
