"""The Quantize wizard's first four steps' cards, built in named parts; each step view
(quantize_steps.py) owns the controls these put on it and says what changed."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QButtonGroup,
    QCheckBox,
    QComboBox,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QRadioButton,
    QVBoxLayout,
    QWidget,
)

from ...engine.quant.head import HEAD_MODES
from ..quant_runs import METHOD_LABELS, PRESET_LABELS
from ..widgets.bars import BarChart
from ..widgets.basic import card, card_title, muted, spin
from ..widgets.job_progress import JobProgress

METHOD_NOTES = {"w8a16": "int8 weights, 16-bit activations: the safest; memory-bound decode "
                         "gets faster",
                "w8a8-dynamic": "int8 weights and per-token int8 activations, no calibration",
                "w8a8-static": "per-tensor int8 activation scales from calibration data"}


def padded(widget: QWidget) -> QVBoxLayout:
    lay = QVBoxLayout(widget)
    lay.setContentsMargins(16, 12, 16, 12)
    return lay


def single_card(step) -> QVBoxLayout:
    """A step that is one card filling the view: the card's layout."""
    outer = QVBoxLayout(step)
    outer.setContentsMargins(0, 0, 0, 0)
    w = card()
    outer.addWidget(w)
    return padded(w)


def model_form(step) -> QFormLayout:
    """1 · the model picker, Folder… and the chosen path."""
    form = QFormLayout()
    step.model_box = QComboBox()
    step.model_box.setMinimumWidth(360)
    step.model_box.currentIndexChanged.connect(step._model_changed)
    row = QHBoxLayout()
    row.addWidget(step.model_box, 1)
    step.folder_btn = QPushButton("Folder…")
    step.folder_btn.clicked.connect(step.choose_folder)
    row.addWidget(step.folder_btn)
    form.addRow("Model", row)
    step.model_info = muted("")
    step.model_info.setWordWrap(True)
    form.addRow("", step.model_info)
    return form


def method_card(step) -> QWidget:
    """2 · the methods, each with a note, and SmoothQuant's α."""
    mcard = card()
    m = padded(mcard)
    m.addWidget(card_title("2 · Method"))
    step.method_group = QButtonGroup(step)
    step.method_buttons: dict[str, QRadioButton] = {}
    for key, label in METHOD_LABELS.items():
        b = QRadioButton(label)
        step.method_group.addButton(b)
        step.method_buttons[key] = b
        m.addWidget(b)
        note = muted(METHOD_NOTES[key])
        note.setWordWrap(True)
        note.setContentsMargins(22, 0, 0, 4)
        m.addWidget(note)
    step.method_buttons["w8a8-dynamic"].setChecked(True)
    sq = QHBoxLayout()
    step.sq_check = QCheckBox("SmoothQuant, α")
    step.sq_alpha = spin(0.0, 1.0, 0.5, step=0.05)
    sq.addWidget(step.sq_check)
    sq.addWidget(step.sq_alpha)
    sq.addStretch(1)
    m.addLayout(sq)
    m.addStretch(1)
    return mcard


def layers_card(step) -> QWidget:
    """2 · which layers: the presets, the custom skip list, the int8 head."""
    pcard = card()
    p = padded(pcard)
    p.addWidget(card_title("Layers"))
    step.preset_group = QButtonGroup(step)
    step.preset_buttons: dict[str, QRadioButton] = {}
    for key, label in PRESET_LABELS.items():
        b = QRadioButton(label)
        step.preset_group.addButton(b)
        step.preset_buttons[key] = b
        p.addWidget(b)
    step.preset_buttons["all"].setChecked(True)
    step.skip_edit = QLineEdit()
    step.skip_edit.setPlaceholderText("*.down_proj, model.layers.0.*, re:layers\\.1\\.")
    p.addWidget(step.skip_edit)
    p.addWidget(QLabel("lm_head and embeddings in int8"))
    p.addWidget(head_box(step))
    head_note = muted("auto: int8 when the head is at least 15 % of the weights (small "
                      "models with large vocabularies: a fifth to a half less memory, "
                      "faster decode), float for w8a8-static; the result table shows "
                      "what the int8 head alone costs. Saved in the console's own format "
                      "only.")
    head_note.setWordWrap(True)
    p.addWidget(head_note)
    p.addStretch(1)
    return pcard


def head_box(step) -> QComboBox:
    step.head_box = QComboBox()
    # the auto entry's text is long: the card's width decides, not the text
    step.head_box.setSizeAdjustPolicy(QComboBox.AdjustToMinimumContentsLengthWithIcon)
    step.head_box.setMinimumContentsLength(24)
    for mode in HEAD_MODES:
        step.head_box.addItem(mode, mode)
    step.head_box.setToolTip(
        "Stores the vocabulary matrix in int8 too (weight-only). On Qwen2.5-0.5B (a "
        "136M-entry vocabulary matrix in a 494M model) that is 0.50x bf16's memory instead "
        "of 0.64x, and CPU decode ~1.5x faster (docs/benchmarks.md). Kept in the console's "
        "own format: vLLM and vllm-ascend read lm_head and embeddings in float.")
    return step.head_box


def calib_card(step) -> None:
    """3 · the model's own text or a file, how much of a file, and its summary."""
    lay = single_card(step)
    lay.addWidget(card_title("3 · Calibration data"))
    step.calib_note = muted("Activation ranges, per-layer SmoothQuant and error-compensating "
                            "rounding are chosen on this text.")
    step.calib_note.setWordWrap(True)
    lay.addWidget(step.calib_note)
    step.calib_builtin = QRadioButton("Text the model writes itself (sampled once, then cached)")
    step.calib_file_radio = QRadioButton("A file (.txt paragraphs or .jsonl {\"text\": …})")
    step.calib_builtin.setChecked(True)
    lay.addWidget(step.calib_builtin)
    frow = QHBoxLayout()
    frow.addWidget(step.calib_file_radio)
    step.calib_path = QLineEdit()
    step.calib_path.setPlaceholderText("path to a calibration file")
    step.calib_browse = QPushButton("Browse…")
    step.calib_browse.clicked.connect(step.choose_file)
    frow.addWidget(step.calib_path, 1)
    frow.addWidget(step.calib_browse)
    lay.addLayout(frow)
    # how much of a file is cut into samples; the model's own text has a fixed size
    step.file_sizes = QFormLayout()
    step.samples = spin(1, 4096, 64)
    step.seq_len = spin(8, 8192, 256)
    step.file_sizes.addRow("Samples", step.samples)
    step.file_sizes.addRow("Tokens per sample", step.seq_len)
    lay.addLayout(step.file_sizes)
    step._show_file_sizes(False)
    step.calib_info = QLabel("")
    step.calib_info.setWordWrap(True)
    lay.addWidget(step.calib_info)
    lay.addStretch(1)


def sensitivity_card(step) -> QWidget:
    """4 · the quality budget, fit-to-budget, Analyse, its progress and recommendation."""
    left = card()
    lv = padded(left)
    lv.addWidget(card_title("4 · Sensitivity (optional)"))
    text = muted("Quantizes one layer at a time and measures how far the output "
                 "distribution moves (KL). Then skips the most sensitive layers until the "
                 "perplexity stays within the quality budget.")
    text.setWordWrap(True)
    lv.addWidget(text)
    form = QFormLayout()
    step.budget = spin(0.0, 100.0, 2.0, " % perplexity", decimals=1)
    step.budget.valueChanged.connect(step.changed)
    form.addRow("Quality budget", step.budget)
    step.fit_check = QCheckBox("Keep sensitive layers float to meet the budget")
    step.fit_check.setToolTip(
        "While quantizing, measure perplexity and put the layers with the largest output "
        "error back to float until the loss is within the budget (at least 85% of linear "
        "weights stay int8), as `npu-console quantize --budget`")
    step.fit_check.toggled.connect(step.changed)
    form.addRow("", step.fit_check)
    lv.addLayout(form)
    step.sens_btn = QPushButton("Analyse sensitivity")
    lv.addWidget(step.sens_btn)
    step.sens_progress = JobProgress("Skip this step if you already know what to keep float.")
    lv.addWidget(step.sens_progress)
    step.rec_label = QLabel("")
    step.rec_label.setWordWrap(True)
    step.rec_label.setTextInteractionFlags(Qt.TextSelectableByMouse)
    lv.addWidget(step.rec_label)
    step.use_rec_btn = QPushButton("Use this skip list")
    step.use_rec_btn.setEnabled(False)
    lv.addWidget(step.use_rec_btn)
    lv.addStretch(1)
    return left


def sensitivity_chart(step) -> QWidget:
    """4 · the per-layer chart, empty until an analysis."""
    right = card()
    rv = QVBoxLayout(right)
    rv.setContentsMargins(8, 8, 8, 8)
    step.sens_chart = BarChart("Per-layer sensitivity, most sensitive first", "KL")
    rv.addWidget(step.sens_chart)
    step.sens_empty = muted("The chart appears after an analysis.")
    step.sens_empty.setAlignment(Qt.AlignCenter)
    rv.addWidget(step.sens_empty)
    return right
