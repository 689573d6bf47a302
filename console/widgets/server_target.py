"""The picker a page shows beside its title to work on this machine or a connected server (File >
Connect to server): the Models page and the Quantize wizard. It follows the connections as they
come and go; `target_changed` fires when the choice changes, also when its server went away.
While its page is on show, show_focus() puts the server's engine and model in the status bar."""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QComboBox

from ..engines import LOCAL
from ..gui_thread import post
from ..remote_jobs import AdminView, ServerAdmin


class ServerTarget(QComboBox):
    target_changed = Signal()

    def __init__(self, ctx, local_text: str, server_text: str, page, parent=None):
        """`server_text` is formatted with the server's label ("Run on {}")."""
        super().__init__(parent)
        self.ctx, self.page, self.server_text = ctx, page, server_text
        self.addItem(local_text, LOCAL)
        self.currentIndexChanged.connect(lambda _i: self.target_changed.emit())
        ctx.remote.changed.connect(self._servers_changed)
        self._servers_changed()

    def target(self) -> str:
        return self.currentData() or LOCAL

    def active(self) -> bool:
        """A server is the target."""
        return self.target() != LOCAL

    def select(self, url: str | None) -> None:
        """Aim at a connected server (None: this machine); ValueError when not connected."""
        i = self.findData(url or LOCAL)
        if i < 0:
            raise ValueError(f"{url} is not connected")
        self.setCurrentIndex(i)

    def where(self) -> tuple[str, str | None] | None:
        """(URL, API key) of the targeted server; None for this machine or one gone."""
        conn = self.ctx.engines.get(self.target())
        return (conn.url, conn.engine.api_key) if conn is not None else None

    def label(self) -> str:
        conn = self.ctx.engines.get(self.target())
        return conn.label if conn is not None else self.target()

    def show_focus(self) -> None:
        if self.page.isVisible():
            self.ctx.remote.set_focus(self.target() if self.active() else None)

    def _servers_changed(self) -> None:
        conns = self.ctx.remote.connections()
        if [c.url for c in conns] == [self.itemData(i) for i in range(1, self.count())]:
            return
        current = self.currentData()
        self.blockSignals(True)
        while self.count() > 1:
            self.removeItem(1)
        for c in conns:
            self.addItem(self.server_text.format(c.label), c.url)
        self.setCurrentIndex(max(0, self.findData(current)))
        self.blockSignals(False)
        if self.currentData() != current:  # its server went away
            self.target_changed.emit()


class PickerOwner:
    """For the objects (QObjects) that aim a page at a server through their `picker` (a
    ServerTarget): the page asks them, they ask the picker. What the picked server offers and
    the job on it are the model's, `admin` (console.remote_jobs.ServerAdmin, free of Qt): the
    picker's choice is forwarded to it, and the owner renders its events."""

    picker: ServerTarget
    admin: ServerAdmin

    def own_admin(self, ctx) -> ServerAdmin:
        """Make the owner's model, aimed wherever the picker points, news on the GUI thread."""

        def connection(url: str) -> tuple[str, str | None] | None:
            conn = ctx.engines.get(url)
            return (conn.url, conn.engine.api_key) if conn is not None else None

        admin = self.admin = ServerAdmin(connection, post, served_changed=ctx.remote.refresh)
        self.picker.target_changed.connect(lambda: admin.aim(self.picker.target()))
        self.picker.destroyed.connect(lambda *_: admin.close())  # the page is going
        return admin

    @property
    def view(self) -> AdminView | None:
        """The server's AdminView last read (None before the first answer)."""
        return self.admin.view

    def reading(self) -> bool:
        return self.admin.reading

    def target(self) -> str:
        return self.picker.target()

    def active(self) -> bool:
        return self.picker.active()

    def select(self, url: str | None) -> None:
        """Aim the page at a connected server (None: this machine)."""
        self.picker.select(url)

    def show_focus(self) -> None:
        self.picker.show_focus()
