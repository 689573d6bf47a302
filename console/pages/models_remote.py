"""The Models page aimed at a connected server: its model folders (the admin listing, ROOT/REL
paths), Load with the job's progress and Cancel in the page's own Load card, Unload of the
models it serves. A server without `--allow-admin` gets one line saying so and nothing that
would fail. The server's listing and the job on it are the model's (console.remote_jobs.
ServerAdmin, free of Qt): this view forwards the user's choices to it and renders its events."""

from __future__ import annotations

from PySide6.QtCore import QObject
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
)

from ..remote_jobs import NO_ADMIN, AdminJob
from ..widgets.basic import card, fmt_bytes, muted
from ..widgets.server_target import PickerOwner, ServerTarget

FOLDER_HEADERS = ["Path", "Format", "Size", "Summary", "Loaded as"]
DTYPES = ("auto", "float32", "bfloat16", "float16")
LOCAL_DTYPES = DTYPES[1:]  # the page's own list: this machine picks no "auto"


class RemoteModels(QObject, PickerOwner):
    """Owns the target picker and the server's folder card; renders the server's listing and
    its load / unload (`admin`'s events) in the page's Load card and loaded-models table while a
    server is the target."""

    def __init__(self, page):
        super().__init__(page)
        self.page = page
        self.ctx = page.ctx
        self.picker = ServerTarget(self.ctx, "This machine", "Server {}", page)
        self.picker.setToolTip("Whose models: this machine's engine or a connected server's")
        ev = self.own_admin(self.ctx).events
        ev.subscribe("target", lambda _url: self._target_changed())
        ev.subscribe("view", self._show_view)
        ev.subscribe("read_failed", self._show_failure)
        ev.subscribe("job", self._show_job)

        self.card = card()
        lay = QVBoxLayout(self.card)
        lay.setContentsMargins(14, 10, 14, 10)
        head = QHBoxLayout()
        self.title = QLabel("Model folders on the server")
        self.title.setObjectName("CardTitle")
        head.addWidget(self.title)
        head.addStretch(1)
        self.refresh_btn = QPushButton("Refresh")
        self.refresh_btn.clicked.connect(self.refresh)
        head.addWidget(self.refresh_btn)
        lay.addLayout(head)
        self.notice = muted("")
        self.notice.setWordWrap(True)
        lay.addWidget(self.notice)
        self.folders = QTableWidget(0, len(FOLDER_HEADERS))
        self.folders.setHorizontalHeaderLabels(FOLDER_HEADERS)
        self.folders.verticalHeader().setVisible(False)
        self.folders.setSelectionBehavior(QAbstractItemView.SelectRows)
        self.folders.setSelectionMode(QAbstractItemView.SingleSelection)
        self.folders.setEditTriggers(QAbstractItemView.NoEditTriggers)
        hh = self.folders.horizontalHeader()
        hh.setSectionResizeMode(QHeaderView.ResizeToContents)
        hh.setSectionResizeMode(3, QHeaderView.Stretch)
        self.folders.itemSelectionChanged.connect(self._folder_picked)
        lay.addWidget(self.folders, 1)
        self.card.hide()

    # ------------------------------------------------------------------ target
    def _target_changed(self) -> None:
        p = self.page
        remote = self.active()
        for w in (p.open_btn, p.open_gguf_btn, p.recent, p.info_card, p.estimate, p.mem_bar):
            w.setVisible(not remote)
        p.weights_box.setEnabled(not remote)  # a server's admin API loads float weights
        self.card.setVisible(remote)
        self.show_focus()
        if not remote:
            p.load_card.setVisible(True)
            p.unload_btn.setVisible(True)
            for box in (p.dtype_box, p.device_box):  # no estimate from half-filled boxes
                box.blockSignals(True)
                box.clear()
            for d in LOCAL_DTYPES:
                p.dtype_box.addItem(d, d)
            p.device_box.addItem("cpu", "cpu")
            for box in (p.dtype_box, p.device_box):
                box.blockSignals(False)
            p._fill_devices()
            p.update_estimate()
            p.load_btn.setEnabled(p.report is not None and p.job is None)
            p.status.setText("")
            p.show_models(self.ctx.engine_host.models())
            return
        self.title.setText(f"Model folders on {self.picker.label()}")
        p.device_box.clear()
        p.device_box.addItem("auto (the server's default)", "auto")
        p.device_box.addItem("cpu", "cpu")
        p.dtype_box.clear()
        for d in DTYPES:
            p.dtype_box.addItem(d, d)
        p.load_btn.setEnabled(False)
        p.status.setText("")
        self.folders.setRowCount(0)  # another server's folders are not this one's
        self._show_loaded([])
        self.notice.setText("Reading the server's model folders…")  # the model reads it now

    # ------------------------------------------------------------------ reading the server

    def refresh(self) -> None:
        """The Refresh button: the model reads the server's listing again."""
        if self.admin.refresh() is not None:
            self.notice.setText("Reading the server's model folders…")

    def _show_view(self, view) -> None:
        p = self.page
        allowed = view.allowed
        self.folders.setVisible(allowed)
        p.load_card.setVisible(allowed)
        p.unload_btn.setVisible(allowed)
        if not allowed:
            self.notice.setText(NO_ADMIN + " Its models are listed below; chat and benchmarks "
                                "can use them.")
            conn = self.ctx.engines.get(view.url)
            self._show_loaded([{"name": m.name, "architecture": m.architecture,
                                "dtype": m.dtype, "quantization": m.quantization,
                                "device": m.device} for m in (conn.models if conn else [])])
            return
        listing = view.listing
        self.notice.setText(f"Roots: {', '.join(listing.roots)} · quantized models are written "
                            f"to {listing.output_root}/. Pick a folder, then Load.")
        selected = self.selected_path()
        self.folders.setRowCount(len(listing.models))
        for r, m in enumerate(listing.models):
            cells = (m.path, m.format, fmt_bytes(m.size_bytes),
                     m.summary if m.ok else "⚠ " + "; ".join(m.problems),
                     ", ".join(m.loaded_as) or "–")
            for c, text in enumerate(cells):
                item = QTableWidgetItem(text)
                item.setToolTip(m.summary)
                self.folders.setItem(r, c, item)
            if m.path == selected:
                self.folders.selectRow(r)
        self._show_loaded(list(listing.loaded))
        self._folder_picked()

    def _show_failure(self, message: str) -> None:
        self.notice.setText(f"⚠ Cannot read the server: {message}")
        self.folders.setRowCount(0)
        self.page.load_card.setVisible(False)
        self.page.unload_btn.setVisible(False)

    def _show_loaded(self, served: list[dict]) -> None:
        t = self.page.table
        t.setRowCount(len(served))
        for r, m in enumerate(served):
            params, weights, kv = (m.get(k) for k in ("num_parameters", "weight_bytes",
                                                        "kv_bytes"))
            cells = (m.get("name", ""), m.get("architecture") or "–", m.get("dtype") or "–",
                     m.get("quantization") or "float", m.get("device") or "–",
                     f"{params / 1e6:,.2f} M" if params else "–",
                     fmt_bytes(weights) if weights else "–",
                     (fmt_bytes(kv) + (f" ({m['kv_dtype']})" if m.get("kv_dtype") else ""))
                     if kv else "–")
            for c, text in enumerate(cells):
                item = QTableWidgetItem(str(text))
                item.setToolTip(m.get("path") or "")
                t.setItem(r, c, item)
        self.page.empty_loaded.setText("No model served yet." if not served else "")
        self.page.empty_loaded.setVisible(not served)

    def models(self) -> list:
        """The folders listed (AdminModel), [] before a read or without admin."""
        return self.admin.models()

    def selected_path(self) -> str | None:
        rows = {i.row() for i in self.folders.selectedItems()}
        if not rows:
            return None
        item = self.folders.item(min(rows), 0)
        return item.text() if item else None

    def select_folder(self, path: str) -> None:
        for r in range(self.folders.rowCount()):
            if self.folders.item(r, 0).text() == path:
                self.folders.selectRow(r)
                return
        raise ValueError(f"{path} is not listed by the server")

    def _folder_picked(self) -> None:
        path = self.selected_path()
        model = next((m for m in self.models() if m.path == path), None)
        p = self.page
        if model is not None:
            served = {p.table.item(r, 0).text() for r in range(p.table.rowCount())}
            name, base, i = model.name, model.name, 2
            while name in served:
                name, i = f"{base}-{i}", i + 1
            p.name_edit.setText(name)
        p.load_btn.setEnabled(model is not None and model.ok and not self.busy())

    # ------------------------------------------------------------------ load / unload
    @property
    def job(self) -> AdminJob | None:
        """The model's load or unload on the server (its latest snapshot)."""
        return self.admin.job

    def busy(self) -> bool:
        return self.admin.busy()

    def start_load(self) -> AdminJob | None:
        p = self.page
        path = self.selected_path()
        if path is None:
            return None
        return self.admin.start_load(path, p.name_edit.text().strip() or None,
                                     p.device_box.currentData(), p.dtype_box.currentData())

    def cancel(self) -> None:
        self.admin.cancel()

    def unload_selected(self) -> AdminJob | None:
        t = self.page.table
        rows = sorted({i.row() for i in t.selectedItems()})
        return self.admin.start_unload(t.item(rows[0], 0).text()) if rows else None

    def _show_job(self, job: AdminJob) -> None:
        """The model's job moved: the Load card's bar, the status line, the buttons."""
        p = self.page
        load = job.kind == "load"
        if job.running:
            self._running(True, progress=load)
            if job.cancelling:
                p.status.setText("Cancelling on the server…")
                p.cancel_btn.setEnabled(False)
            elif load:
                p.progress.setValue(int(job.fraction * 100))
                p.status.setText(f"Loading {job.what} on the server: {job.message}")
            else:
                p.status.setText(f"Unloading {job.what} on the server…")
            return
        self._running(False)
        name = (job.result.result or {}).get("name", job.what) if load and job.result else \
            job.what
        p.status.setText({
            ("load", "done"): f"Loaded {name} on the server.",
            ("load", "cancelled"): "Loading cancelled; the server freed what it had allocated.",
            ("load", "failed"): f"Loading failed: {job.error}",
            ("unload", "done"): f"Unloaded {job.what} on the server.",
            ("unload", "failed"): f"Unloading failed: {job.error}",
        }.get((job.kind, job.state), f"{job.kind}: {job.state}"))

    def _running(self, on: bool, progress: bool = True) -> None:
        p = self.page
        self.picker.setEnabled(not on)
        p.cancel_btn.setEnabled(on and progress)
        p.progress.setVisible(on and progress)
        p.unload_btn.setEnabled(False)
        if on:
            p.load_btn.setEnabled(False)
