"""Horizontal bar chart with category labels (per-layer sensitivity, latency percentiles)."""

from __future__ import annotations

import pyqtgraph as pg

from ..theme import current_theme
from .plot_style import style_plot


class BarChart(pg.PlotWidget):
    def __init__(self, title: str = "", unit: str = "", parent=None):
        super().__init__(parent=parent)
        item = style_plot(self, 160, title, unit)
        item.showGrid(x=False, y=False)
        self._items: list = []
        self.labels: list[str] = []
        self.values: list[float] = []

    def set_bars(self, labels: list[str], values: list[float],
                 highlight: set[int] | None = None, label_width: int = 150) -> None:
        """First label at the top; `highlight` indexes get the warning colour."""
        theme = current_theme()
        for it in self._items:
            self.removeItem(it)
        self._items.clear()
        self.labels, self.values = list(labels), [float(v) for v in values]
        n = len(labels)
        ys = list(range(n))[::-1]
        highlight = highlight or set()
        brushes = [pg.mkBrush(theme.color("warn") if i in highlight else theme.series[0])
                   for i in range(n)]
        if n:
            bars = pg.BarGraphItem(x0=[0.0] * n, y=ys, height=0.7, width=self.values,
                                   brushes=brushes, pens=[pg.mkPen(None)] * n)
            self.addItem(bars)
            self._items.append(bars)
        left = self.getPlotItem().getAxis("left")
        left.setTicks([[(y, lab) for y, lab in zip(ys, labels)]])
        left.setWidth(label_width)
        top = max(self.values) if self.values else 1.0
        self.setXRange(0, top * 1.08 if top > 0 else 1.0, padding=0)
        self.setYRange(-0.6, max(n, 1) - 0.4, padding=0)


def radio_style() -> str:
    """Radio buttons in the theme (the shared stylesheet only styles check boxes)."""
    c = current_theme().colors
    return (f"QRadioButton {{ background: transparent; spacing: 6px; }}"
            f"QRadioButton::indicator {{ width: 12px; height: 12px; border-radius: 7px; "
            f"border: 1px solid {c['muted']}; background: {c['input']}; }}"
            f"QRadioButton::indicator:checked {{ background: qradialgradient(cx:0.5, cy:0.5, "
            f"radius:0.5, fx:0.5, fy:0.5, stop:0 {c['accent']}, stop:0.55 {c['accent']}, "
            f"stop:0.65 {c['input']}, stop:1 {c['input']}); border: 1px solid {c['accent']}; }}")
