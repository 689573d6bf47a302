"""The picker a page shows beside its title to work on this machine or a connected server (File >
Connect to server): the Models page and the Quantize wizard. It follows the connections as they
come and go; `target_changed` fires when the choice changes, also when its server went away.
While its page is on show, show_focus() puts the server's engine and model in the status bar."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QComboBox

from ..engines import LOCAL
from ..jobs import BackgroundJob
from ..remote_jobs import AdminView, read_admin


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
    ServerTarget): the page asks them, they ask the picker. They read the server's admin view
    through read_admin_view() and say whether a read is on with reading()."""

    picker: ServerTarget
    _read: BackgroundJob | None = None
    _gen = 0  # which read_admin_view call is the latest: an earlier one's answer is stale

    def read_admin_view(self, on_view: Callable[[AdminView], object],
                        on_failure: Callable[[str], object]) -> BackgroundJob | None:
        """Read the targeted server's AdminView off the GUI thread (None for this machine or a
        server gone). Only the latest read answers: on_view(view) while its server is still
        the target, on_failure(message) when the read failed and its server is still the
        target."""
        where = self.picker.where()
        if where is None:
            return None
        self._gen += 1
        gen = self._gen
        url = self.target()
        job = BackgroundJob(lambda _r: read_admin(*where), "admin-models", parent=self)
        job.finished.connect(lambda view: gen == self._gen and view.url == self.target()
                             and on_view(view))
        # a failure, too, only speaks for the server still picked: aimed back at this machine
        # meanwhile, the page must not show "cannot read the server" or empty its local lists
        job.failed.connect(lambda msg: gen == self._gen and url == self.target()
                           and on_failure(msg))
        self._read = job.start()
        return job

    def reading(self) -> bool:
        return self._read is not None and self._read.running()

    def target(self) -> str:
        return self.picker.target()

    def active(self) -> bool:
        return self.picker.active()

    def select(self, url: str | None) -> None:
        """Aim the page at a connected server (None: this machine)."""
        self.picker.select(url)

    def show_focus(self) -> None:
        self.picker.show_focus()
