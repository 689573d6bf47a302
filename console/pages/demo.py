"""Demo mode: a full-screen presentation view for stakeholders, readable across a room.

Large live numbers (decode tok/s, TTFT, active requests, accelerator utilisation and memory),
two live plots, and an A/B chat that streams two variants side by side. It only listens to the
bridge's signals (already coalesced on the GUI thread); Esc leaves it.
"""

from __future__ import annotations

import time

from npu_console.console.widgets.live_plot import LivePlot
from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QKeySequence, QPalette, QShortcut, QTextCharFormat, QTextCursor
from PySide6.QtWidgets import (
    QComboBox,
    QFrame,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QTextEdit,
    QVBoxLayout,
    QWidget,
)

BIG_PT = 40
LABEL_PT = 14


class Tile(QFrame):
    def __init__(self, label: str, unit: str = "", parent=None):
        super().__init__(parent)
        self.setProperty("card", True)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(18, 12, 18, 12)
        # the application stylesheet sets font sizes, so sizes here must be stylesheets too
        self.label = QLabel(label.upper())
        self.label.setStyleSheet(f"font-size: {LABEL_PT}pt; font-weight: 600;")
        self.label.setProperty("muted", True)
        self.value = QLabel("—")
        self.value.setStyleSheet(f"font-size: {BIG_PT}pt; font-weight: 700;")
        self.unit = QLabel(unit)
        self.unit.setStyleSheet(f"font-size: {LABEL_PT}pt;")
        self.unit.setProperty("muted", True)
        lay.addWidget(self.label)
        row = QHBoxLayout()
        row.addWidget(self.value)
        row.addWidget(self.unit, 0, Qt.AlignBottom)
        row.addStretch(1)
        lay.addLayout(row)

    def set(self, text: str, unit: str | None = None) -> None:
        self.value.setText(text)
        if unit is not None:
            self.unit.setText(unit)


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
        root = QVBoxLayout(self)
        root.setContentsMargins(28, 20, 28, 20)
        root.setSpacing(16)
        head = QHBoxLayout()
        title = QLabel("NPU Console · live")
        title.setStyleSheet("font-size: 26pt; font-weight: 700;")
        head.addWidget(title)
        head.addStretch(1)
        self.device_label = QLabel("")
        self.device_label.setStyleSheet(f"font-size: {LABEL_PT}pt;")
        self.device_label.setProperty("muted", True)
        head.addWidget(self.device_label)
        hint = QPushButton("Esc · leave demo")
        hint.clicked.connect(self.close)
        head.addWidget(hint)
        root.addLayout(head)

        tiles = QGridLayout()
        tiles.setSpacing(14)
        self.tok_s = Tile("Tokens / s", "decode")
        self.ttft = Tile("TTFT", "ms p50")
        self.active = Tile("Requests", "running")
        self.util = Tile("NPU load", "%")
        self.memory = Tile("HBM", "GB")
        for i, t in enumerate((self.tok_s, self.ttft, self.active, self.util, self.memory)):
            tiles.addWidget(t, 0, i)
        root.addLayout(tiles)

        plots = QHBoxLayout()
        self.tok_plot = LivePlot("Decode speed", "tok/s")
        self.tok_plot.add_series("tok/s")
        self.ttft_plot = LivePlot("TTFT", "ms")
        self.ttft_plot.add_series("p50", 1)
        self.ttft_plot.add_series("p99", 3, dashed=True)
        for p in (self.tok_plot, self.ttft_plot):
            p.set_window(60)
            plots.addWidget(p)
        root.addLayout(plots, 2)

        chat = QHBoxLayout()
        self.panes: list[tuple[QComboBox, QTextEdit]] = []
        big = "font-size: 16pt;"
        for side in ("A", "B"):
            col = QVBoxLayout()
            box = QComboBox()
            box.setStyleSheet(big)
            text = QTextEdit()
            text.setReadOnly(True)
            text.setStyleSheet(big)
            text.setPlaceholderText(f"Model {side}'s answer streams here.")
            row = QHBoxLayout()
            lab = QLabel(side)
            lab.setStyleSheet(big + ' font-weight: 700;')
            row.addWidget(lab)
            row.addWidget(box, 1)
            col.addLayout(row)
            col.addWidget(text, 1)
            chat.addLayout(col, 1)
            self.panes.append((box, text))
        root.addLayout(chat, 3)
        prow = QHBoxLayout()
        self.prompt = QLineEdit()
        self.prompt.setStyleSheet(big)
        self.prompt.setPlaceholderText("Ask both models the same question and press Enter")
        self.prompt.returnPressed.connect(self.send)
        self.send_btn = QPushButton("Ask both")
        self.send_btn.setStyleSheet(big)
        self.send_btn.setProperty("primary", True)
        self.send_btn.clicked.connect(self.send)
        prow.addWidget(self.prompt, 1)
        prow.addWidget(self.send_btn)
        root.addLayout(prow)

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
        devs = [d for d in snap.devices if d.kind != "cpu"]
        if devs:
            utils = [d.util_pct for d in devs if d.util_pct is not None]
            used = sum(d.mem_used_mb or 0 for d in devs)
            total = sum(d.mem_total_mb or 0 for d in devs)
            npu = devs[0].kind == "npu"
            self.util.label.setText("NPU LOAD" if npu else "GPU LOAD")
            self.util.set(f"{sum(utils) / len(utils):.0f}" if utils else "—",
                          f"% · {len(devs)} card{'s' if len(devs) > 1 else ''}")
            self.memory.label.setText("HBM" if npu else "GPU MEMORY")
            self.memory.set(f"{used / 1024:.0f}", f"of {total / 1024:.0f} GB" if total else "GB")
            self.device_label.setText(f"{len(devs)} × {devs[0].name} · {snap.source}")
        elif snap.host is not None:
            h = snap.host
            self.util.label.setText("CPU LOAD")
            self.util.set(f"{h.cpu_pct:.0f}" if h.cpu_pct is not None else "—", "%")
            self.memory.label.setText("HOST MEMORY")
            if h.mem_used_mb is not None and h.mem_total_mb:
                self.memory.set(f"{h.mem_used_mb / 1024:.1f}", f"of {h.mem_total_mb / 1024:.0f} GB")
            self.device_label.setText("host CPU · no accelerator found")

    def _refresh_plots(self) -> None:
        if self.isVisible():
            self.tok_plot.refresh()
            self.ttft_plot.refresh()

    # ------------------------------------------------------------------ A/B chat

    def send(self, text: str | None = None) -> list[str]:
        from npu_console.engine.runtime.types import EngineError, GenerationRequest, SamplingParams

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
            # a reasoning model is asked as a chat, so its thinking comes apart from its answer
            chat = model in self._reasoners
            req = GenerationRequest(messages=[{"role": "user", "content": text}] if chat else None,
                                    prompt=None if chat else text, model=model,
                                    params=SamplingParams(max_tokens=256 if chat else 96,
                                                          temperature=0.0))
            try:
                rid = self.ctx.bridge.submit(req)
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
        if fin.usage.reasoning_tokens and fin.timings.first_answer_s is not None:
            pane.append(f"\n— thought for {fin.usage.reasoning_tokens} tokens · first answer "
                        f"token {fin.timings.first_answer_s * 1000:.0f} ms")
        if fin.error:
            pane.append(f"\n⚠ {fin.error}")
        elif fin.timings.tpot_s:
            pane.append(f"\n— {fin.usage.completion_tokens} tokens · "
                        f"{1 / fin.timings.tpot_s:.0f} tok/s · TTFT "
                        f"{(fin.timings.ttft_s or 0) * 1000:.0f} ms")

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
