"""Models: open a folder, see what it is and what it needs, load / unload variants."""

from __future__ import annotations

from pathlib import Path

from npu_console.console.pages import models_weights as weights
from npu_console.console.pages.base import Page
from npu_console.console.pages.models_remote import RemoteModels
from npu_console.console.widgets.basic import (
    card,
    card_title,
    fmt_bytes,
    muted,
    page_title,
    titled_card,
)
from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QFileDialog,
    QFormLayout,
    QGridLayout,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QMessageBox,
    QProgressBar,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
)


class ModelsPage(Page):
    page_id = "models"
    title = "Models"
    icon = "▣"

    def __init__(self, ctx, parent=None):
        super().__init__(ctx, parent)
        self.report = None
        self.job = None
        self.error_box: QMessageBox | None = None
        root = QVBoxLayout(self)
        root.setContentsMargins(16, 12, 16, 12)
        root.setSpacing(10)
        head = QHBoxLayout()
        head.addWidget(page_title("Models"))
        head.addStretch(1)
        self.remote = RemoteModels(self)  # a connected server as the target (its own card)
        head.addWidget(self.remote.picker)
        self.open_btn = QPushButton("Open folder…")
        self.open_btn.setProperty("primary", True)
        self.open_gguf_btn = QPushButton("Open GGUF…")
        self.open_gguf_btn.setToolTip("A .gguf file (llama.cpp, LM Studio, Ollama): converted to "
                                      "float once, then cached")
        self.recent = QComboBox()
        self.recent.setMinimumWidth(320)
        self.recent.setPlaceholderText("Recent model folders")
        head.addWidget(self.recent)
        head.addWidget(self.open_gguf_btn)
        head.addWidget(self.open_btn)
        root.addLayout(head)

        top = QHBoxLayout()
        top.setSpacing(10)
        # folder summary
        self.info_card = card()
        info = QVBoxLayout(self.info_card)
        info.setContentsMargins(14, 10, 14, 10)
        self.folder_title = card_title("No folder selected")
        self.folder_path = muted("Open a Hugging Face model folder (config.json, *.safetensors, "
                                 "tokenizer) or pick a recent one.")
        self.folder_path.setWordWrap(True)
        self.folder_path.setTextInteractionFlags(Qt.TextSelectableByMouse)
        info.addWidget(self.folder_title)
        info.addWidget(self.folder_path)
        self.summary = QGridLayout()
        self.summary.setHorizontalSpacing(16)
        self.fields: dict[str, QLabel] = {}
        names = (("arch", "Architecture"), ("params", "Parameters"), ("layers", "Layers"),
                 ("hidden", "Hidden size"), ("heads", "Heads (KV)"), ("vocab", "Vocabulary"),
                 ("ctx", "Context"), ("ckpt", "Checkpoint"), ("template", "Chat template"),
                 ("path_kind", "Runner"))
        for i, (key, label) in enumerate(names):
            r, c = divmod(i, 2)
            self.summary.addWidget(muted(label), r, 2 * c)
            value = QLabel("–")
            self.fields[key] = value
            self.summary.addWidget(value, r, 2 * c + 1)
        self.summary.setColumnStretch(1, 1)
        self.summary.setColumnStretch(3, 1)
        info.addLayout(self.summary)
        self.warnings = QLabel("")
        self.warnings.setWordWrap(True)
        self.warnings.setProperty("muted", True)
        info.addWidget(self.warnings)
        info.addStretch(1)
        top.addWidget(self.info_card, 3)
        top.addWidget(self.remote.card, 3)

        # load options
        self.load_card, form_box = titled_card("Load", (14, 10, 14, 10))
        form = QFormLayout()
        self.name_edit = QLineEdit()
        self.name_edit.setPlaceholderText("variant name used by chat and the API")
        self.device_box = QComboBox()
        self.device_box.addItem("cpu", "cpu")
        self.dtype_box, self.weights_box = weights.dtype_box(), weights.weights_box()
        for label, box in (("Name", self.name_edit), ("Device", self.device_box),
                           ("Dtype", self.dtype_box), ("Weights", self.weights_box)):
            form.addRow(label, box)
        form_box.addLayout(form)
        self.estimate = QLabel("Memory estimate appears here once a folder is open.")
        self.estimate.setWordWrap(True)
        self.estimate.setProperty("muted", True)
        form_box.addWidget(self.estimate)
        self.mem_bar = QProgressBar()
        self.mem_bar.setRange(0, 1000)
        self.mem_bar.setTextVisible(False)
        self.mem_bar.setFixedHeight(8)
        form_box.addWidget(self.mem_bar)
        row = QHBoxLayout()
        self.load_btn = QPushButton("Load")
        self.load_btn.setProperty("primary", True)
        self.load_btn.setEnabled(False)
        self.cancel_btn = QPushButton("Cancel")
        self.cancel_btn.setEnabled(False)
        row.addWidget(self.load_btn)
        row.addWidget(self.cancel_btn)
        form_box.addLayout(row)
        self.progress = QProgressBar()
        self.progress.setRange(0, 100)
        self.progress.setVisible(False)
        form_box.addWidget(self.progress)
        self.status = muted("")
        self.status.setWordWrap(True)
        form_box.addWidget(self.status)
        form_box.addStretch(1)
        top.addWidget(self.load_card, 2)
        root.addLayout(top)

        # loaded variants
        loaded_head = QHBoxLayout()
        loaded_head.addWidget(card_title("Loaded variants"))
        loaded_head.addStretch(1)
        self.unload_btn = QPushButton("Unload selected")
        self.unload_btn.setProperty("danger", True)
        self.unload_btn.setEnabled(False)
        loaded_head.addWidget(self.unload_btn)
        root.addLayout(loaded_head)
        self.table = QTableWidget(0, 8)
        self.table.setHorizontalHeaderLabels(["Name", "Architecture", "Dtype", "Quantization",
                                              "Device", "Parameters", "Weights", "KV cache"])
        self.table.verticalHeader().setVisible(False)
        self.table.setSelectionBehavior(QAbstractItemView.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SingleSelection)
        self.table.setEditTriggers(QAbstractItemView.NoEditTriggers)
        self.table.horizontalHeader().setSectionResizeMode(QHeaderView.Stretch)
        root.addWidget(self.table, 1)
        self.empty_loaded = muted("No model loaded yet.")
        root.addWidget(self.empty_loaded)

        host = ctx.engine_host
        self.open_btn.clicked.connect(self.choose_folder)
        self.open_gguf_btn.clicked.connect(self.choose_gguf)
        self.recent.activated.connect(lambda i: self.open_folder(self.recent.itemData(i)))
        self.load_btn.clicked.connect(self.start_load)
        self.cancel_btn.clicked.connect(self.cancel_load)
        self.unload_btn.clicked.connect(self.unload_selected)
        self.table.itemSelectionChanged.connect(
            lambda: self.unload_btn.setEnabled(bool(self.table.selectedItems())))
        for box in (self.dtype_box, self.device_box, self.weights_box):
            box.currentIndexChanged.connect(lambda _i: self.update_estimate())
        host.load_started.connect(self.on_load_started)
        host.load_progress.connect(self.on_progress)
        host.load_finished.connect(self.on_finished)
        host.models_changed.connect(self.show_models)
        host.engine_ready.connect(lambda _e: self._fill_devices())
        host.engine_failed.connect(lambda msg: self.status.setText(f"Engine failed: {msg}"))
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
        from npu_console.engine.models import recent_models

        self.recent.clear()
        for path in recent_models():
            self.recent.addItem(path, path)
        self.recent.setCurrentIndex(-1)

    def open_folder(self, path) -> bool:
        """Inspect (no torch; milliseconds) and show; a broken folder opens an error dialog."""
        from npu_console.engine.models import inspect_model_folder

        if not path:
            return False
        report = inspect_model_folder(path)
        if not report.ok:
            self.show_error("This folder cannot be loaded", report)
            return False
        self.report = report
        self.folder_title.setText(Path(report.path).name)
        self.folder_path.setText(str(report.path))
        f = self.fields
        f["arch"].setText(report.architecture or "unknown")
        f["params"].setText(f"{report.num_parameters / 1e6:,.2f} M" if report.num_parameters else "–")
        f["layers"].setText(str(report.num_layers or "–"))
        f["hidden"].setText(str(report.hidden_size or "–"))
        f["heads"].setText(f"{report.num_heads or '–'} ({report.num_kv_heads or '–'})")
        f["vocab"].setText(f"{report.vocab_size:,}" if report.vocab_size else "–")
        f["ctx"].setText(f"{report.max_context:,}" if report.max_context else "–")
        f["ckpt"].setText(f"{fmt_bytes(report.checkpoint_bytes)} {report.checkpoint_dtype or ''}"
                          + (f" · {report.quantization}" if report.quantization else "")
                          + (" · GGUF" if report.source_format == "gguf" else ""))
        f["template"].setText("yes" if report.has_chat_template else "no (plain prompt)")
        f["path_kind"].setText("batched" if report.batched else report.unbatched_reason)
        self.warnings.setText("\n".join(f"⚠ {w}" for w in report.warnings))
        existing = {m.name for m in self.ctx.engine_host.models()}
        name = Path(report.path).stem if report.source_format == "gguf" else Path(report.path).name
        base, i = name, 2
        while name in existing:
            name, i = f"{base}-{i}", i + 1
        self.name_edit.setText(name)
        self.load_btn.setEnabled(self.job is None)
        weights.sync_weights(self.weights_box, report)
        self.update_estimate()
        return True

    def show_error(self, title: str, report_or_text) -> QMessageBox:
        """Non-modal (open(), not exec()) so the app keeps running and tests can close it."""
        box = QMessageBox(self)
        box.setObjectName("ModelErrorDialog")
        box.setIcon(QMessageBox.Critical)
        box.setWindowTitle("Model folder problem")
        box.setText(title)
        if isinstance(report_or_text, str):
            box.setInformativeText(report_or_text)
        else:
            fatal = [p for p in report_or_text.problems if p.fatal]
            box.setInformativeText(f"{report_or_text.path}\n\n" + "\n".join(f"• {p}" for p in fatal))
            if len(report_or_text.problems) > len(fatal):
                box.setDetailedText("\n".join(str(p) for p in report_or_text.problems))
        box.setStandardButtons(QMessageBox.Ok)
        box.open()
        self.error_box = box
        return box

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
        from npu_console.engine.models import estimate_memory, fits_message

        if self.report is None or self.remote.active():  # a server's folder: no estimate
            return
        dtype = self.dtype_box.currentData()
        est = estimate_memory(self.report, dtype=dtype,
                              quantization=weights.weights_quantization(self.weights_box, self.report))
        dev = self._device_info()
        text = (f"Needs about <b>{fmt_bytes(est.total_bytes)}</b>: weights "
                f"{fmt_bytes(est.weight_bytes)}, KV cache {fmt_bytes(est.kv_bytes)} "
                f"({est.kv_tokens:,} tokens), overhead {fmt_bytes(est.overhead_bytes)}.")
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
            from npu_console.engine.models import add_recent_model

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
                      fmt_bytes(m.kv_bytes))
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


def kernels_tip(m) -> str:
    """What runs a loaded variant's decode steps and int8 products, for its row's tooltip."""
    if m.decode_step == "native":
        tip = f"{m.path_kind} runner; decode steps: one native call for all layers"
    else:
        kernels = "the native AVX2 kernel" if m.linear_kernels == "native" else "PyTorch"
        tip = f"{m.path_kind} runner; float decode products on {kernels}"
    if m.int8_kernels:
        tip += f"; int8 products on {m.int8_kernels}"
    if getattr(m, "unbatched_reason", ""):
        tip = f"{m.unbatched_reason}; {tip}"
    return tip
