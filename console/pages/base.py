"""What every sidebar page is: a QWidget with an id, a title, and show/hide hooks."""

from __future__ import annotations

from PySide6.QtWidgets import QWidget


class Page(QWidget):
    """Subclass and register in console.pages.PAGES; the main window builds them in order."""

    page_id = "page"
    title = "Page"
    icon = "•"  # a glyph shown in the sidebar; real icons can replace it

    def __init__(self, ctx, parent=None):
        super().__init__(parent)
        self.ctx = ctx

    def activated(self) -> None:
        """Called when the page becomes the visible one."""

    def deactivated(self) -> None:
        """Called when another page is shown (stop redraw timers here)."""

    def shutdown(self) -> None:
        """Called once when the window closes, before the engine stops."""
