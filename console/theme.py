"""Dark and light themes: one QSS template in assets/themes filled from a palette JSON."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import cache

from PySide6.QtGui import QColor, QIcon, QPalette
from PySide6.QtWidgets import QApplication

from ..engine.paths import ASSETS_DIR

THEMES_DIR = ASSETS_DIR / "themes"
ICON_PATH = ASSETS_DIR / "icons" / "app.svg"
THEME_NAMES = ("dark", "light")


@dataclass(frozen=True)
class Theme:
    name: str
    colors: dict
    series: tuple[str, ...]

    def color(self, key: str) -> str:
        return self.colors[key]


@cache
def load_theme(name: str) -> Theme:
    if name not in THEME_NAMES:
        name = "dark"
    data = json.loads((THEMES_DIR / f"{name}.json").read_text())
    series = tuple(data.pop("series"))
    return Theme(name, data, series)


def stylesheet(theme: Theme) -> str:
    template = (THEMES_DIR / "base.qss").read_text()
    # longest token first is unnecessary: tokens are whole words thanks to the \b
    return re.sub(r"@([a-z_]+)\b", lambda m: theme.colors.get(m.group(1), m.group(0)), template)


_current: Theme | None = None


def current_theme() -> Theme:
    return _current or load_theme("dark")


def apply_theme(app: QApplication, name: str) -> Theme:
    """Set palette + stylesheet on the whole app; plots pick colors from current_theme()."""
    global _current
    theme = load_theme(name)
    _current = theme
    pal = QPalette()
    c = theme.colors
    pal.setColor(QPalette.Window, QColor(c["bg"]))
    pal.setColor(QPalette.WindowText, QColor(c["fg"]))
    pal.setColor(QPalette.Base, QColor(c["input"]))
    pal.setColor(QPalette.Text, QColor(c["fg"]))
    pal.setColor(QPalette.Button, QColor(c["button"]))
    pal.setColor(QPalette.ButtonText, QColor(c["fg"]))
    pal.setColor(QPalette.Highlight, QColor(c["accent"]))
    pal.setColor(QPalette.HighlightedText, QColor(c["on_accent"]))
    pal.setColor(QPalette.PlaceholderText, QColor(c["muted"]))
    pal.setColor(QPalette.ToolTipBase, QColor(c["panel"]))
    pal.setColor(QPalette.ToolTipText, QColor(c["fg"]))
    app.setPalette(pal)
    app.setStyleSheet(stylesheet(theme))
    return theme


def app_icon() -> QIcon:
    return QIcon(str(ICON_PATH))


def repolish(widget) -> None:
    """Re-apply the stylesheet after a dynamic property change (badge kind, banner level)."""
    style = widget.style()
    style.unpolish(widget)
    style.polish(widget)
