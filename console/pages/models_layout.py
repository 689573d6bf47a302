"""The Models page's widgets, built in named parts (the page itself renders and forwards)."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
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
    QVBoxLayout,
    QWidget,
)

from ..widgets.basic import (
    card,
    card_title,
    fmt_bytes,
    muted,
    page_title,
    titled_card,
)
from . import models_weights as weights
from .models_remote import RemoteModels

# the folder summary's grid, two (label, value) pairs a row
SUMMARY = (("arch", "Architecture"), ("params", "Parameters"), ("layers", "Layers"),
           ("hidden", "Hidden size"), ("heads", "Heads (KV)"), ("vocab", "Vocabulary"),
           ("ctx", "Context"), ("ckpt", "Checkpoint"), ("template", "Chat template"),
           ("path_kind", "Runner"))
LOADED_HEADERS = ["Name", "Architecture", "Dtype", "Quantization", "Device", "Parameters",
                  "Weights", "KV cache"]


def build(page) -> None:
    """The title row, the folder / server / Load cards, and the loaded variants below."""
    root = QVBoxLayout(page)
    root.setContentsMargins(16, 12, 16, 12)
    root.setSpacing(10)
    root.addLayout(header(page))
    top = QHBoxLayout()
    top.setSpacing(10)
    top.addWidget(info_card(page), 3)
    top.addWidget(page.remote.card, 3)
    top.addWidget(load_card(page), 2)
    root.addLayout(top)
    root.addLayout(loaded_head(page))
    root.addWidget(loaded_table(page), 1)
    page.empty_loaded = muted("No model loaded yet.")
    root.addWidget(page.empty_loaded)


def header(page) -> QHBoxLayout:
    """The title, the target picker (a connected server has its own card), the recent folders
    and the Open buttons."""
    head = QHBoxLayout()
    head.addWidget(page_title("Models"))
    head.addStretch(1)
    page.remote = RemoteModels(page)
    head.addWidget(page.remote.picker)
    page.open_btn = QPushButton("Open folder…")
    page.open_btn.setProperty("primary", True)
    page.open_gguf_btn = QPushButton("Open GGUF…")
    page.open_gguf_btn.setToolTip("A .gguf file (llama.cpp, LM Studio, Ollama): converted to "
                                  "float once, then cached")
    page.recent = QComboBox()
    page.recent.setMinimumWidth(320)
    page.recent.setPlaceholderText("Recent model folders")
    head.addWidget(page.recent)
    head.addWidget(page.open_gguf_btn)
    head.addWidget(page.open_btn)
    return head


def info_card(page) -> QWidget:
    """The open folder: its name, path, a summary grid (page.fields) and its warnings."""
    page.info_card = card()
    info = QVBoxLayout(page.info_card)
    info.setContentsMargins(14, 10, 14, 10)
    page.folder_title = card_title("No folder selected")
    page.folder_path = muted("Open a Hugging Face model folder (config.json, *.safetensors, "
                             "tokenizer) or pick a recent one.")
    page.folder_path.setWordWrap(True)
    page.folder_path.setTextInteractionFlags(Qt.TextSelectableByMouse)
    info.addWidget(page.folder_title)
    info.addWidget(page.folder_path)
    page.summary = QGridLayout()
    page.summary.setHorizontalSpacing(16)
    page.fields = {}
    for i, (key, label) in enumerate(SUMMARY):
        r, c = divmod(i, 2)
        page.summary.addWidget(muted(label), r, 2 * c)
        value = QLabel("–")
        page.fields[key] = value
        page.summary.addWidget(value, r, 2 * c + 1)
    page.summary.setColumnStretch(1, 1)
    page.summary.setColumnStretch(3, 1)
    info.addLayout(page.summary)
    page.warnings = QLabel("")
    page.warnings.setWordWrap(True)
    page.warnings.setProperty("muted", True)
    info.addWidget(page.warnings)
    info.addStretch(1)
    return page.info_card


def load_card(page) -> QWidget:
    """Name, device, dtype and weights; the memory estimate; Load / Cancel and the progress."""
    page.load_card, form_box = titled_card("Load", (14, 10, 14, 10))
    form = QFormLayout()
    page.name_edit = QLineEdit()
    page.name_edit.setPlaceholderText("variant name used by chat and the API")
    page.device_box = QComboBox()
    page.device_box.addItem("cpu", "cpu")
    page.dtype_box, page.weights_box = weights.dtype_box(), weights.weights_box()
    for label, box in (("Name", page.name_edit), ("Device", page.device_box),
                       ("Dtype", page.dtype_box), ("Weights", page.weights_box)):
        form.addRow(label, box)
    form_box.addLayout(form)
    page.estimate = QLabel("Memory estimate appears here once a folder is open.")
    page.estimate.setWordWrap(True)
    page.estimate.setProperty("muted", True)
    form_box.addWidget(page.estimate)
    page.mem_bar = QProgressBar()
    page.mem_bar.setRange(0, 1000)
    page.mem_bar.setTextVisible(False)
    page.mem_bar.setFixedHeight(8)
    form_box.addWidget(page.mem_bar)
    row = QHBoxLayout()
    page.load_btn = QPushButton("Load")
    page.load_btn.setProperty("primary", True)
    page.load_btn.setEnabled(False)
    page.cancel_btn = QPushButton("Cancel")
    page.cancel_btn.setEnabled(False)
    row.addWidget(page.load_btn)
    row.addWidget(page.cancel_btn)
    form_box.addLayout(row)
    page.progress = QProgressBar()
    page.progress.setRange(0, 100)
    page.progress.setVisible(False)
    form_box.addWidget(page.progress)
    page.status = muted("")
    page.status.setWordWrap(True)
    form_box.addWidget(page.status)
    form_box.addStretch(1)
    return page.load_card


def loaded_head(page) -> QHBoxLayout:
    head = QHBoxLayout()
    head.addWidget(card_title("Loaded variants"))
    head.addStretch(1)
    page.unload_btn = QPushButton("Unload selected")
    page.unload_btn.setProperty("danger", True)
    page.unload_btn.setEnabled(False)
    head.addWidget(page.unload_btn)
    return head


def loaded_table(page) -> QTableWidget:
    page.table = QTableWidget(0, len(LOADED_HEADERS))
    page.table.setHorizontalHeaderLabels(LOADED_HEADERS)
    page.table.verticalHeader().setVisible(False)
    page.table.setSelectionBehavior(QAbstractItemView.SelectRows)
    page.table.setSelectionMode(QAbstractItemView.SingleSelection)
    page.table.setEditTriggers(QAbstractItemView.NoEditTriggers)
    page.table.horizontalHeader().setSectionResizeMode(QHeaderView.Stretch)
    return page.table


def connect(page) -> None:
    """The user's actions and the engine host's news to the page's handlers."""
    host = page.ctx.engine_host
    page.open_btn.clicked.connect(page.choose_folder)
    page.open_gguf_btn.clicked.connect(page.choose_gguf)
    page.recent.activated.connect(lambda i: page.open_folder(page.recent.itemData(i)))
    page.load_btn.clicked.connect(page.start_load)
    page.cancel_btn.clicked.connect(page.cancel_load)
    page.unload_btn.clicked.connect(page.unload_selected)
    page.table.itemSelectionChanged.connect(
        lambda: page.unload_btn.setEnabled(bool(page.table.selectedItems())))
    for box in (page.dtype_box, page.device_box, page.weights_box):
        box.currentIndexChanged.connect(lambda _i: page.update_estimate())
    host.load_started.connect(page.on_load_started)
    host.load_progress.connect(page.on_progress)
    host.load_finished.connect(page.on_finished)
    host.models_changed.connect(page.show_models)
    host.engine_ready.connect(lambda _e: page._fill_devices())
    host.engine_failed.connect(lambda msg: page.status.setText(f"Engine failed: {msg}"))


def summary_texts(report) -> dict[str, str]:
    """What the summary grid says of an inspected folder, by SUMMARY key."""
    r = report
    return {
        "arch": r.architecture or "unknown",
        "params": f"{r.num_parameters / 1e6:,.2f} M" if r.num_parameters else "–",
        "layers": str(r.num_layers or "–"),
        "hidden": str(r.hidden_size or "–"),
        "heads": f"{r.num_heads or '–'} ({r.num_kv_heads or '–'})",
        "vocab": f"{r.vocab_size:,}" if r.vocab_size else "–",
        "ctx": f"{r.max_context:,}" if r.max_context else "–",
        "ckpt": (f"{fmt_bytes(r.checkpoint_bytes)} {r.checkpoint_dtype or ''}"
                 + (f" · {r.quantization}" if r.quantization else "")
                 + (" · GGUF" if r.source_format == "gguf" else "")),
        "template": "yes" if r.has_chat_template else "no (plain prompt)",
        "path_kind": "batched" if r.batched else r.unbatched_reason,
    }


def show_report(page, report) -> None:
    """An inspected folder in the info card."""
    page.folder_title.setText(Path(report.path).name)
    page.folder_path.setText(str(report.path))
    for key, text in summary_texts(report).items():
        page.fields[key].setText(text)
    page.warnings.setText("\n".join(f"⚠ {w}" for w in report.warnings))


def error_box(parent, title: str, report_or_text) -> QMessageBox:
    """Non-modal (open(), not exec()) so the app keeps running and tests can close it."""
    box = QMessageBox(parent)
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
    return box
