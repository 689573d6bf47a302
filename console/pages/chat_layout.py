"""The Chat page's widgets, built in named parts (the page itself renders and forwards)."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QKeySequence, QShortcut
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QProgressBar,
    QPushButton,
    QScrollArea,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from ..widgets.basic import card, muted, page_title
from ..widgets.chat_view import ChatInput, Transcript
from ..widgets.sampling_panel import SamplingPanel


def build(page) -> None:
    """Conversations on the left, the transcript(s) and input in the middle, sampling right."""
    root = QHBoxLayout(page)
    root.setContentsMargins(16, 12, 16, 12)
    split = QSplitter(Qt.Horizontal)
    split.setChildrenCollapsible(False)
    root.addWidget(split)
    split.addWidget(conversations(page))
    split.addWidget(center(page))
    split.addWidget(settings(page))
    split.setStretchFactor(0, 1)
    split.setStretchFactor(1, 4)
    split.setStretchFactor(2, 1)
    connect(page)


def conversations(page) -> QWidget:
    left = QWidget()
    ll = QVBoxLayout(left)
    ll.setContentsMargins(0, 0, 8, 0)
    ll.addWidget(page_title("Chat"))
    page.new_btn = QPushButton("New chat")
    page.new_btn.setToolTip("Ctrl+L")
    ll.addWidget(page.new_btn)
    page.conv_list = QListWidget()
    ll.addWidget(page.conv_list, 1)
    erow = QHBoxLayout()
    page.export_md = QPushButton("Markdown")
    page.export_md.setToolTip("Export this conversation as Markdown")
    page.export_json = QPushButton("JSON")
    page.export_json.setToolTip("Export this conversation as JSON")
    erow.addWidget(muted("Export"))
    erow.addWidget(page.export_md)
    erow.addWidget(page.export_json)
    ll.addLayout(erow)
    left.setMinimumWidth(236)
    return left


def center(page) -> QWidget:
    """The model pickers, the transcript(s), the gauges and the input."""
    center = QWidget()
    cl = QVBoxLayout(center)
    cl.setContentsMargins(8, 0, 8, 0)
    mrow = QHBoxLayout()
    mrow.addWidget(muted("Model"))
    page.model_a = QComboBox()
    page.model_a.setMinimumWidth(160)
    mrow.addWidget(page.model_a)
    page.ab_check = QCheckBox("A/B compare with")
    page.ab_check.setToolTip("Send every prompt to two loaded variants side by side")
    mrow.addWidget(page.ab_check)
    page.model_b = QComboBox()
    page.model_b.setMinimumWidth(160)
    for box in (page.model_a, page.model_b):  # "smollm2 @ 10.0.0.5:8000" shown whole
        box.setSizeAdjustPolicy(QComboBox.AdjustToContents)
    page.model_b.setEnabled(False)
    mrow.addWidget(page.model_b)
    mrow.addStretch(1)
    cl.addLayout(mrow)
    page.panes_split = QSplitter(Qt.Horizontal)
    page.transcripts = [Transcript("No model loaded yet: load one on the Models page."),
                        Transcript("B side of the comparison.")]
    for i, t in enumerate(page.transcripts):
        page.panes_split.addWidget(t)
        t.edit_requested.connect(lambda idx, pane=i: page.edit_message(pane, idx))
    page.transcripts[1].setVisible(False)
    cl.addWidget(page.panes_split, 1)
    cl.addLayout(gauge_rows(page))
    cl.addWidget(load_row(page))
    page.input = ChatInput()
    page.input.setPlaceholderText("Message (Ctrl+Enter to send, Esc to stop)")
    page.input.setFixedHeight(84)
    cl.addWidget(page.input)
    brow = QHBoxLayout()
    page.error_label = QLabel("")
    page.error_label.setWordWrap(True)
    page.error_label.setStyleSheet("color: palette(highlight);")
    brow.addWidget(page.error_label, 1)
    page.regen_btn = QPushButton("Regenerate")
    page.stop_btn = QPushButton("Stop")
    page.stop_btn.setProperty("danger", True)
    page.send_btn = QPushButton("Send")
    page.send_btn.setProperty("primary", True)
    for b in (page.regen_btn, page.stop_btn, page.send_btn):
        brow.addWidget(b)
    cl.addLayout(brow)
    return center


def gauge_rows(page) -> QHBoxLayout:
    grow = QHBoxLayout()
    grow.addWidget(muted("Context"))
    page.ctx_gauge = QProgressBar()
    page.ctx_gauge.setFixedHeight(10)
    page.ctx_gauge.setTextVisible(False)
    grow.addWidget(page.ctx_gauge, 1)
    page.ctx_label = muted("0 / – tokens")
    page.ctx_label.setMinimumWidth(130)
    page.ctx_label.setAlignment(Qt.AlignRight | Qt.AlignVCenter)
    grow.addWidget(page.ctx_label)
    return grow


def load_row(page) -> QWidget:
    """A model loading: its stage and percent, and that a message sent now waits for it."""
    page.load_row = QWidget()
    lrow = QHBoxLayout(page.load_row)
    lrow.setContentsMargins(0, 0, 0, 0)
    page.load_label = muted("")
    lrow.addWidget(page.load_label)
    page.load_bar = QProgressBar()
    page.load_bar.setRange(0, 100)
    page.load_bar.setFixedHeight(10)
    page.load_bar.setTextVisible(False)
    lrow.addWidget(page.load_bar, 1)
    page.load_row.setVisible(False)
    return page.load_row


def settings(page) -> QWidget:
    right = card()
    rl = QVBoxLayout(right)
    rl.setContentsMargins(10, 8, 10, 8)
    page.sampling = SamplingPanel()
    scroll = QScrollArea()
    scroll.setWidgetResizable(True)
    scroll.setWidget(page.sampling)
    rl.addWidget(scroll)
    right.setMinimumWidth(270)
    return right


def connect(page) -> None:
    """The user's actions to the page's handlers."""
    page.send_btn.clicked.connect(lambda: page.send())
    page.input.submit.connect(lambda: page.send())
    page.stop_btn.clicked.connect(lambda: page.stop())
    page.regen_btn.clicked.connect(lambda: page.regenerate())
    page.new_btn.clicked.connect(lambda: page.new_chat())
    page.ab_check.toggled.connect(page.set_ab)
    page.conv_list.itemClicked.connect(lambda it: page.open_conversation(it.data(Qt.UserRole)))
    page.export_md.clicked.connect(lambda: page.choose_export(".md"))
    page.export_json.clicked.connect(lambda: page.choose_export(".json"))
    for seq, fn in (("Ctrl+Return", lambda: page.send()), ("Ctrl+Enter", lambda: page.send()),
                    ("Escape", page.stop), ("Ctrl+L", page.new_chat)):
        sc = QShortcut(QKeySequence(seq), page)
        sc.setContext(Qt.WidgetWithChildrenShortcut)
        sc.activated.connect(fn)


def listen(page) -> None:
    """The bridge's streams, the engine's models, the loads and the servers to the page."""
    ctx = page.ctx
    ctx.bridge.reasoning.connect(page.on_reasoning)
    ctx.bridge.tokens.connect(page.on_tokens)
    ctx.bridge.finished.connect(page.on_finished)
    ctx.engine_host.models_changed.connect(page.set_models)
    ctx.loads.subscribe("changed", lambda _loads: (page._show_load(), page._update_buttons()))
    ctx.loads.subscribe("ended", page._load_ended)
    ctx.remote.changed.connect(page._servers_changed)  # a server's models are offered too
    page.model_a.currentTextChanged.connect(lambda _name: page._update_context())
    page.model_a.currentIndexChanged.connect(lambda _i: page._show_source())


# ---------------------------------------------------------------------- rendering


def fill_model_boxes(page, choices) -> None:
    """Offer `choices` (ModelChoice, the item data) in both model boxes; each keeps its pick,
    else A takes the first and B the second."""
    names = [c.label for c in choices]
    for box, fallback in ((page.model_a, 0), (page.model_b, 1)):
        cur = box.currentText()
        box.blockSignals(True)
        box.clear()
        for c in choices:
            box.addItem(c.label, c)
        if cur in names:
            box.setCurrentText(cur)
        elif names:
            box.setCurrentIndex(min(fallback, len(names) - 1))
        box.blockSignals(False)
    page.transcripts[0].set_placeholder(
        "Send a message to start." if names else
        "No model loaded yet: load one on the Models page.")


def show_ab(page, on: bool) -> None:
    """Model B's box and the second transcript, for a chat of two panes."""
    page.model_b.setEnabled(on)
    page.transcripts[1].setVisible(on)


def fill_conversations(page, convs, current_id: str) -> None:
    """The saved chats, the open one selected."""
    page.conv_list.clear()
    for conv in convs:
        item = QListWidgetItem(conv.title)
        item.setData(Qt.UserRole, conv.id)
        item.setToolTip(conv.title)
        page.conv_list.addItem(item)
        if conv.id == current_id:
            item.setSelected(True)


def show_context(page, used: int, total: int) -> None:
    """The context gauge: tokens used of the model's context (0: not known)."""
    page.ctx_gauge.setRange(0, max(1, total))
    page.ctx_gauge.setValue(min(used, total) if total else 0)
    page.ctx_label.setText(f"{used:,} / {total:,} tokens" if total else f"{used:,} / – tokens")


def export_dialog(page, suffix: str, name: str, save) -> QFileDialog:
    """A non-modal Save dialog for a Markdown (.md) or JSON export; `save(path)` writes it."""
    dialog = QFileDialog(page, "Export conversation")
    dialog.setAcceptMode(QFileDialog.AcceptSave)
    dialog.setDefaultSuffix(suffix.lstrip("."))
    dialog.setNameFilters(["Markdown (*.md)"] if suffix == ".md" else ["JSON (*.json)"])
    dialog.selectFile(name)
    dialog.fileSelected.connect(save)
    dialog.open()
    return dialog


def show_load(page, load, held: bool) -> None:
    """The load in flight (stage, percent) above the input; hidden when none."""
    page.load_row.setVisible(load is not None)
    if load is None:
        return
    suffix = " · your message is sent when it is ready" if held else ""
    page.load_label.setText(load.text() + suffix)
    page.load_bar.setValue(load.percent)


def show_conversation(page, conv) -> None:
    """An opened chat: A/B as it was saved, its sampling values, its panes' messages."""
    ab = len(conv.panes) > 1
    page.ab_check.blockSignals(True)
    page.ab_check.setChecked(ab)
    page.ab_check.blockSignals(False)
    show_ab(page, ab)
    if conv.params or conv.system_prompt:
        page.sampling.apply_values({**conv.params, "system_prompt": conv.system_prompt})
    for i in range(2):
        render_pane(page, conv, i)


def render_pane(page, conv, i: int) -> None:
    """Transcript i drawn afresh from the conversation's pane i (empty when it has none)."""
    t = page.transcripts[i]
    t.clear()
    if i < len(conv.panes):
        for m in conv.panes[i].messages:
            t.add(m)
