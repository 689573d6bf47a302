"""The console's look for a pyqtgraph plot, shared by the live plots and the bar charts."""

from __future__ import annotations

import pyqtgraph as pg
from PySide6.QtWidgets import QSizePolicy

from ..theme import current_theme


def style_plot(plot: pg.PlotWidget, min_height: int, title: str = "", unit: str = ""):
    """Theme colours, no context menu or buttons, no mouse zoom (a plot here is read, not
    explored), an optional "title (unit)"; returns the plot item for the caller's extras."""
    theme = current_theme()
    plot.setBackground(theme.color("plot_bg"))
    plot.setMinimumHeight(min_height)
    plot.setSizePolicy(QSizePolicy.Expanding, QSizePolicy.Expanding)
    item = plot.getPlotItem()
    item.setMenuEnabled(False)
    item.hideButtons()
    plot.setMouseEnabled(x=False, y=False)
    for axis in ("left", "bottom"):
        ax = item.getAxis(axis)
        ax.setTextPen(theme.color("plot_fg"))
        ax.setPen(theme.color("border"))
    if title:
        item.setTitle(f"<span style='color:{theme.color('plot_fg')}'>{title}"
                      + (f" ({unit})" if unit else "") + "</span>", size="9pt")
    return item
