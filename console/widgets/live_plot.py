"""A small time-series plot over Ring buffers; redrawn only when its owner calls refresh()."""

from __future__ import annotations

import time

import numpy as np
import pyqtgraph as pg

from ...engine.ring import Ring
from ..theme import current_theme
from .plot_style import style_plot

pg.setConfigOptions(antialias=False, useOpenGL=False)


class LivePlot(pg.PlotWidget):
    """Curves keyed by name; x is seconds relative to now so the window reads '-5 min .. 0'."""

    def __init__(self, title: str = "", unit: str = "", capacity: int = 3600,
                 y_range: tuple[float, float] | None = None, parent=None):
        super().__init__(parent=parent)
        theme = current_theme()
        item = style_plot(self, 120, title, unit)
        item.showGrid(x=True, y=True, alpha=0.15)
        item.setDownsampling(auto=True, mode="peak")
        item.setClipToView(True)
        item.getAxis("bottom").setHeight(22)
        item.getAxis("left").setWidth(34)
        self._legend = item.addLegend(offset=(2, 2), labelTextSize="7pt", verSpacing=-6)
        self._legend.setBrush(pg.mkBrush(theme.color("panel") + "c0"))
        self._legend.setLabelTextColor(theme.color("fg"))
        self._fixed_y = y_range
        if y_range:
            self.setYRange(*y_range, padding=0.02)
        self.capacity = capacity
        self.window_s = 300.0
        self.rings: dict[str, Ring] = {}
        self._curves: dict[str, pg.PlotDataItem] = {}
        self._clock = time.time

    def add_series(self, name: str, color_index: int | None = None, dashed: bool = False) -> Ring:
        theme = current_theme()
        color = theme.series[(len(self._curves) if color_index is None else color_index)
                             % len(theme.series)]
        pen = pg.mkPen(color, width=1.6, style=pg.QtCore.Qt.DashLine if dashed else
                       pg.QtCore.Qt.SolidLine)
        ring = Ring(self.capacity)
        self.rings[name] = ring
        self._curves[name] = self.plot([], [], pen=pen, name=name, connect="finite",
                                       skipFiniteCheck=True)
        return ring

    def clear_series(self) -> None:
        for curve in self._curves.values():
            self.removeItem(curve)
        self._legend.clear()
        self._curves.clear()
        self.rings.clear()

    def set_legend_columns(self, n: int) -> None:
        self._legend.setColumnCount(n)

    def set_window(self, seconds: float) -> None:
        self.window_s = float(seconds)
        self.refresh()

    def set_clock(self, clock) -> None:
        """Replays run on captured time, not wall time."""
        self._clock = clock

    def refresh(self) -> None:
        now = self._clock()
        since = now - self.window_s
        ymax = 0.0
        for name, ring in self.rings.items():
            t, v = ring.data(since)
            self._curves[name].setData(t - now, v)
            if len(v) and np.isfinite(v).any():
                ymax = max(ymax, float(np.nanmax(v)))
        self.setXRange(-self.window_s, 0, padding=0)
        if not self._fixed_y:
            self.setYRange(0, ymax * 1.15 if ymax > 0 else 1.0, padding=0)
