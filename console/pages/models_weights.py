"""The Load card's Dtype and Weights choices. Weights: the float weights in the Dtype box's type, or a GGUF file
straight into INT8 (Q8_0 blocks as they are, other types rounded per 32; no float copy). INT8
is offered for a GGUF only: a Hugging Face folder goes through the Quantize page."""

from __future__ import annotations

from PySide6.QtWidgets import QComboBox

from ...engine.models import GGUF_INT8

FLOAT, INT8 = "float", "int8"
DTYPES = ("float32", "bfloat16", "float16")


def dtype_box() -> QComboBox:
    box = QComboBox()
    for d in DTYPES:
        box.addItem(d, d)
    return box


def weights_box() -> QComboBox:
    box = QComboBox()
    box.addItem("Float (in Dtype)", FLOAT)
    box.addItem("INT8 · W8A16 from the GGUF", INT8)
    box.setToolTip("INT8 reads a GGUF straight into int8 weights with a scale per 32 values "
                   "(Q8_0 exactly): about a quarter of float32's memory and 3x its speed at "
                   "batch 1 on CPUs; a Hugging Face folder is quantized on the Quantize page")
    return box


def sync_weights(box: QComboBox, report, want: str | None = None) -> None:
    """INT8 only for a GGUF; `want` picks it (launch option), else the choice stays."""
    gguf = report is not None and report.source_format == "gguf"
    box.model().item(1).setEnabled(gguf)
    if not gguf:
        box.setCurrentIndex(0)
    elif want is not None:
        box.setCurrentIndex(1 if want == INT8 else 0)


def weights_quantization(box: QComboBox, report) -> str | None:
    """What the memory estimate counts: the GGUF's INT8 plan, or the folder's own format."""
    return GGUF_INT8 if box.currentData() == INT8 else report.quantization
