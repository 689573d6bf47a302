"""The per-chip detail drawer of the dashboard: what npu-smi's `info -t` sub-commands tell about
one chip (DeviceSnapshot.detail): health in words with its error codes, AI CPU / control CPU and
bandwidth use, ECC counters, board serial and firmware, and where it all came from."""

from __future__ import annotations

import time

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QFrame,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QScrollArea,
    QVBoxLayout,
    QWidget,
)

from ...engine.telemetry.npu_health import explain_codes
from .basic import Badge, MetricBar, card_title, fmt_num, muted
from .device_card import health_kind

USAGE_ROWS = (("AI CPU", "aicpu_pct"), ("Control CPU", "ctrlcpu_pct"),
              ("HBM bandwidth", "hbm_bandwidth_pct"), ("DDR bandwidth", "ddr_bandwidth_pct"),
              ("AI Vector", "aivector_pct"), ("AI Cube", "aicube_pct"),
              ("NPU utilisation", "npu_util_pct"))
ECC_KINDS = (("errors", "Bit Error Count"), ("aggregate", "Bit Aggregate Total Err Cnt"),
             ("isolated pages", "Bit Isolated Pages Count"))
BOARD_ROWS = (("Product", "product_name"), ("Serial number", "serial_number"),
              ("Firmware", "firmware_version"), ("Software (driver)", "software_version"),
              ("Chip version", "chip_version"))


class ChipDrawer(QFrame):
    """Shows one chip; `show_device` again on every snapshot keeps it live."""

    closed = Signal()

    def __init__(self, parent=None):
        super().__init__(parent)
        self.key: str | None = None
        self.setObjectName("ChipDrawer")
        self.setProperty("card", True)
        self.setMinimumWidth(300)
        outer = QVBoxLayout(self)
        outer.setContentsMargins(12, 10, 8, 10)
        outer.addLayout(self._head())
        self.subtitle = muted("")
        self.subtitle.setWordWrap(True)
        outer.addWidget(self.subtitle)
        body = QWidget()
        body.setObjectName("DrawerBody")
        lay = QVBoxLayout(body)
        lay.setContentsMargins(0, 4, 4, 0)
        lay.setSpacing(6)
        scroll = QScrollArea()
        scroll.setWidgetResizable(True)
        scroll.setFrameShape(QFrame.NoFrame)
        scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarAlwaysOff)
        scroll.setWidget(body)
        scroll.viewport().setAutoFillBackground(False)
        outer.addWidget(scroll, 1)
        self._health_section(lay)
        self._usage_section(lay)
        self._ecc_section(lay)
        self._board_section(lay)
        lay.addStretch(1)
        self.footer = muted("")
        self.footer.setWordWrap(True)
        outer.addWidget(self.footer)
        self.errors = QLabel("")
        self.errors.setObjectName("DrawerErrors")
        self.errors.setWordWrap(True)
        outer.addWidget(self.errors)

    # ------------------------------------------------------------------ building

    def _head(self) -> QHBoxLayout:
        """The chip's name and Close."""
        head = QHBoxLayout()
        self.title = card_title("")
        self.title.setTextInteractionFlags(Qt.TextSelectableByMouse)
        self.close_btn = QPushButton("Close")
        self.close_btn.setFlat(True)
        self.close_btn.setToolTip("Close the chip details (Esc)")
        self.close_btn.clicked.connect(self.close_drawer)
        head.addWidget(self.title, 1)
        head.addWidget(self.close_btn)
        return head

    def _health_section(self, lay: QVBoxLayout) -> None:
        health_row = QHBoxLayout()
        health_row.addWidget(card_title("Health"))
        health_row.addStretch(1)
        self.health = Badge("", "none")
        health_row.addWidget(self.health)
        lay.addLayout(health_row)
        self.health_text = QLabel("")
        self.health_text.setWordWrap(True)
        lay.addWidget(self.health_text)
        self.codes = QLabel("")
        self.codes.setWordWrap(True)
        self.codes.setTextInteractionFlags(Qt.TextSelectableByMouse)
        lay.addWidget(self.codes)

    def _usage_section(self, lay: QVBoxLayout) -> None:
        lay.addWidget(card_title("Usage"))
        self.usage: dict[str, MetricBar] = {}
        for label, attr in USAGE_ROWS:
            bar = MetricBar(label, warn_at=90, bad_at=98)
            self.usage[attr] = bar
            lay.addWidget(bar)

    def _ecc_section(self, lay: QVBoxLayout) -> None:
        """A row per memory and counter, a column per bit count (1-bit, 2-bit)."""
        lay.addWidget(card_title("ECC"))
        self.ecc_grid = QGridLayout()
        self.ecc_grid.setHorizontalSpacing(10)
        self.ecc_cells: dict[tuple[str, str, str], QLabel] = {}
        for col, head_text in enumerate(("", "1-bit", "2-bit"), start=0):
            if head_text:
                self.ecc_grid.addWidget(muted(head_text), 0, col, Qt.AlignRight)
        row = 1
        for mem in ("HBM", "DDR"):
            for kind, suffix in ECC_KINDS:
                self.ecc_grid.addWidget(muted(f"{mem} {kind}"), row, 0)
                for col, bits in ((1, "Single"), (2, "Double")):
                    cell = QLabel("N/A")
                    cell.setAlignment(Qt.AlignRight | Qt.AlignVCenter)
                    self.ecc_cells[(mem, bits, suffix)] = cell
                    self.ecc_grid.addWidget(cell, row, col)
                row += 1
        self.ecc_grid.setColumnStretch(0, 1)
        lay.addLayout(self.ecc_grid)
        self.ecc_note = muted("")
        self.ecc_note.setWordWrap(True)
        lay.addWidget(self.ecc_note)

    def _board_section(self, lay: QVBoxLayout) -> None:
        lay.addWidget(card_title("Board"))
        board = QGridLayout()
        board.setHorizontalSpacing(10)
        self.board: dict[str, QLabel] = {}
        for r, (label, attr) in enumerate((*BOARD_ROWS, ("Bus", "bus_id"))):
            board.addWidget(muted(label), r, 0, Qt.AlignTop)
            value = QLabel("N/A")
            value.setWordWrap(True)
            value.setTextInteractionFlags(Qt.TextSelectableByMouse)
            self.board[attr] = value
            board.addWidget(value, r, 1)
        board.setColumnStretch(1, 1)
        lay.addLayout(board)

    # ------------------------------------------------------------------ filling

    def show_device(self, dev) -> None:
        self.key = dev.key
        det = dev.detail
        self.title.setText(f"{dev.name} · {dev.key}")
        self.board["bus_id"].setText(dev.bus_id or "N/A")
        if det is None:
            self.subtitle.setText(
                "npu-smi's sub-commands (`info -t usages|board|ecc|health`) have not answered "
                "for this chip yet" if dev.kind == "npu" else "no npu-smi details for this device")
        else:
            self.subtitle.setText(_when(det.updated_at))
        status = det.health_status if det is not None and det.health_status else None
        shown = status or dev.health
        self.health.set(shown or "N/A", health_kind(shown))
        if status:
            self.health_text.setText(det.health_meaning or "")
        else:
            self.health_text.setText("from the table only (no `info -t health` answer)"
                                     if dev.health else "not reported")
        pairs = explain_codes(det.error_codes, det.error_info) if det is not None else []
        self.codes.setText("\n".join(f"code {code}: {text}" for code, text in pairs)
                           if pairs else ("no error codes" if status else ""))
        self.codes.setVisible(bool(self.codes.text()))
        for attr, bar in self.usage.items():
            value = getattr(det, attr) if det is not None else None
            bar.set(value, fmt_num(value, "{:.0f}", " %"))
            bar.setVisible(value is not None or attr in ("aicpu_pct", "ctrlcpu_pct",
                                                         "hbm_bandwidth_pct"))
        counts = dict(det.ecc) if det is not None else {}
        for (mem, bits, suffix), cell in self.ecc_cells.items():
            value = counts.get(f"{mem} {bits} {suffix}")
            cell.setText("N/A" if value is None else f"{value:,}")
            cell.setProperty("muted", value is None)
        self.ecc_note.setText("" if counts else "not reported (`npu-smi info -t ecc`)")
        self.ecc_note.setVisible(not counts)
        for _label, attr in BOARD_ROWS:
            value = getattr(det, attr) if det is not None else None
            self.board[attr].setText(value or "N/A")
        sources = ", ".join(s.replace("-", "\u2011") for s in det.sources) if det else ""
        self.footer.setText(f"from: {sources}" if sources else "")  # no breaks inside a name
        errs = det.errors if det is not None else ()
        self.errors.setText("\n".join(f"failed: {e}" for e in errs))
        self.errors.setVisible(bool(errs))

    def close_drawer(self) -> None:
        self.key = None
        self.hide()
        self.closed.emit()

    def keyPressEvent(self, event) -> None:
        if event.key() == Qt.Key_Escape:
            self.close_drawer()
            return
        super().keyPressEvent(event)


def _when(updated_at: float | None) -> str:
    if updated_at is None:
        return "from saved captures (replay)"
    age = max(0.0, time.time() - updated_at)
    return f"sub-commands read {age:.0f} s ago (they refresh slower than the table)"
