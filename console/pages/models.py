"""Models: open a folder, see what it is and what it needs, load / unload variants."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtWidgets import QFileDialog, QMessageBox, QTableWidgetItem

from ..variants import kernels_tip, variant_name
from ..widgets.basic import fmt_bytes
from . import models_layout as layout
from . import models_weights as weights
from .base import Page

__all__ = ["ModelsPage", "kernels_tip"]  # kernels_tip: the loaded table's tooltips


class ModelsPage(Page):
    page_id = "models"
    title = "Models"
    icon = "▣"

    def __init__(self, ctx, parent=None):
        super().__init__(ctx, parent)
        self.report = None
        self.job = None
        self.error_box: QMessageBox | None = None
        layout.build(self)  # self.remote: a connected server as the target (its own card)
        layout.connect(self)
        self.refresh_recent()

    # ------------------------------------------------------------------ folder

    def choose_folder(self) -> None:
        dialog = QFileDialog(self, "Open a model folder")
        dialog.setFileMode(QFileDialog.Directory)
        dialog.setOption(QFileDialog.ShowDirsOnly, True)
        dialog.fileSelected.connect(self.open_folder)
        dialog.open()
        self._dialog = dialog

    def choose_gguf(self) -> None:
        dialog = QFileDialog(self, "Open a GGUF model")
        dialog.setFileMode(QFileDialog.ExistingFile)
        dialog.setNameFilter("GGUF models (*.gguf)")
        dialog.fileSelected.connect(self.open_folder)
        dialog.open()
        self._dialog = dialog

    def refresh_recent(self) -> None:
        from ...engine.models import recent_models

        self.recent.clear()
        for path in recent_models():
            self.recent.addItem(path, path)
        self.recent.setCurrentIndex(-1)

    def open_folder(self, path) -> bool:
        """Inspect (no torch; milliseconds) and show; a broken folder opens an error dialog."""
        from ...engine.models import inspect_model_folder

        if not path:
            return False
        report = inspect_model_folder(path)
        if not report.ok:
            self.show_error("This folder cannot be loaded", report)
            return False
        self.report = report
        layout.show_report(self, report)
        self.name_edit.setText(variant_name(report, (m.name for m in self.ctx.engine_host.models())))
        self.load_btn.setEnabled(self.job is None)
        weights.sync_weights(self.weights_box, report)
        self.update_estimate()
        return True

    def show_error(self, title: str, report_or_text) -> QMessageBox:
        """A non-modal error dialog (models_layout.error_box), kept for tests to close."""
        self.error_box = layout.error_box(self, title, report_or_text)
        return self.error_box

    def _fill_devices(self) -> None:
        devices = self.ctx.engine_host.devices
        if not devices or self.remote.active():
            return
        self.device_box.blockSignals(True)
        self.device_box.clear()
        for d in devices:
            self.device_box.addItem(d.label, d.torch_device)
        self.device_box.blockSignals(False)
        self.update_estimate()

    def _device_info(self):
        spec = self.device_box.currentData()
        return next((d for d in self.ctx.engine_host.devices if d.torch_device == spec), None)

    def update_estimate(self) -> None:
        from ...engine.models import estimate_memory, fits_message, planned_kv_dtype

        if self.report is None or self.remote.active():  # a server's folder: no estimate
            return
        dtype = self.dtype_box.currentData()
        dev = self._device_info()
        kv = planned_kv_dtype(dtype, dev.torch_device) if dev is not None else dtype
        est = estimate_memory(self.report, dtype=dtype,
                              quantization=weights.weights_quantization(self.weights_box, self.report),
                              kv_dtype=kv)
        text = (f"Needs about <b>{fmt_bytes(est.total_bytes)}</b>: weights "
                f"{fmt_bytes(est.weight_bytes)}, KV cache {fmt_bytes(est.kv_bytes)} "
                f"(one sequence of {est.kv_tokens:,} tokens, {kv}), overhead "
                f"{fmt_bytes(est.overhead_bytes)}. Once loaded, the engine sizes the cache "
                f"of all its sequences to the memory left (the table's KV column).")
        if dev is not None and dev.free_memory:
            problem = fits_message(est, dev.free_memory, dev.label)
            text += f"<br>{fmt_bytes(dev.free_memory)} free on {dev.label}."
            if problem:
                text += f"<br><b>{problem}</b>"
            self.mem_bar.setValue(int(min(1.0, est.total_bytes / dev.free_memory) * 1000))
        else:
            text += "<br>Free device memory: known once the engine has started."
            self.mem_bar.setValue(0)
        self.estimate.setText(text)

    # ------------------------------------------------------------------ load

    def start_load(self):
        if self.remote.active():
            return self.remote.start_load()
        if self.report is None or self.job is not None:
            return None
        name = self.name_edit.text().strip() or Path(self.report.path).name
        return self.ctx.engine_host.load(self.report.path, name=name,
                                         device=self.device_box.currentData() or "cpu",
                                         dtype=self.dtype_box.currentData(),
                                         load_as=self.weights_box.currentData())

    def on_load_started(self, job) -> None:
        self.job = job
        self.remote.picker.setEnabled(False)  # the Load card shows this load until it ends
        self.load_btn.setEnabled(False)
        self.cancel_btn.setEnabled(True)
        self.progress.setVisible(True)
        self.progress.setValue(0)
        self.status.setText(f"Loading {job.name} ({job.dtype} on {job.device})…")

    def on_progress(self, job_id: int, fraction: float, stage: str) -> None:
        if self.job is not None and job_id == self.job.job_id:
            self.progress.setValue(int(fraction * 100))
            self.status.setText(f"Loading {self.job.name}: {stage}")

    def cancel_load(self) -> None:
        if self.remote.active():
            self.remote.cancel()
        elif self.job is not None:
            self.ctx.engine_host.cancel(self.job.job_id)
            self.status.setText("Cancelling…")

    def on_finished(self, job_id: int, info, error: str) -> None:
        job, self.job = self.job, None
        self.remote.picker.setEnabled(True)
        self.cancel_btn.setEnabled(False)
        self.progress.setVisible(False)
        self.load_btn.setEnabled(self.report is not None)
        if job is None or job.job_id != job_id:
            return
        if info is not None:
            from ...engine.models import add_recent_model

            add_recent_model(job.path)
            self.refresh_recent()
            self.status.setText(f"Loaded {info.name}.")
        elif "cancel" in error.lower():
            self.status.setText("Loading cancelled.")
        else:
            self.status.setText(f"Loading failed: {error}")
            self.show_error(f"Could not load {job.name}", error)

    def show_models(self, models) -> None:
        if self.remote.active():  # the table shows the server's models
            return
        self.table.setRowCount(len(models))
        for row, m in enumerate(models):
            values = (m.name, m.architecture, m.dtype, m.quantization or "float", m.device,
                      f"{m.num_parameters / 1e6:,.2f} M", fmt_bytes(m.weight_bytes),
                      fmt_bytes(m.kv_bytes) + (f" ({m.kv_dtype})" if m.kv_dtype else ""))
            tip = kernels_tip(m)
            for col, v in enumerate(values):
                item = QTableWidgetItem(v)
                item.setToolTip(tip)
                self.table.setItem(row, col, item)
        self.empty_loaded.setVisible(not models)

    def unload_selected(self) -> None:
        if self.remote.active():
            self.remote.unload_selected()
            return
        rows = {i.row() for i in self.table.selectedItems()}
        for row in rows:
            self.ctx.engine_host.unload(self.table.item(row, 0).text())

    def activated(self) -> None:
        self.remote.show_focus()
        self.show_models(self.ctx.engine_host.models())

