"""Step 5 of the Quantize wizard as a view: the plan, Run / progress / Cancel, the verdict, the
float-vs-INT8 table (with the int8 weight share, the layers kept float and the calibration
used), save / load, and the earlier runs. It shows QuantRuns (console/quant_runs.py); the page
starts the jobs."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QAbstractItemView,
    QCheckBox,
    QComboBox,
    QGridLayout,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPushButton,
    QScrollArea,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from ..engines import host_label
from ..quant_runs import QuantPlan, QuantRun, recipe_rows, verdict
from ..widgets.basic import Badge, card, card_title, fmt_bytes, muted
from ..widgets.job_progress import JobProgress

FORMAT_LABELS = {"native": "Native (this console)", "compressed-tensors": "compressed-tensors (vLLM)",
                 "msmodelslim": "msModelSlim (vllm-ascend)"}
ROWS = ["Size on disk", "Memory (weights)", "TTFT", "Decode tok/s (batch 1)", "Perplexity",
        "Greedy agreement", "Top-1 agreement", "Linear weights in int8", "Layers kept float",
        "Calibration", "lm_head + embedding"]
KEPT_ROW = ROWS.index("Layers kept float")
HEAD_ROW = ROWS.index("lm_head + embedding")


class RunStep(QWidget):
    """Run and compare, then save or load; earlier runs beside."""

    history_picked = Signal(object)  # a QuantRun of the history table

    def __init__(self, parent=None):
        super().__init__(parent)
        self.run: QuantRun | None = None
        self._history_runs: list[QuantRun] = []
        lay = QGridLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.setSpacing(10)
        # scrolls rather than squeezing the verdict and progress lines in a short window
        scroll = QScrollArea()
        scroll.setWidgetResizable(True)
        scroll.setFrameShape(QScrollArea.NoFrame)
        scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarAlwaysOff)
        scroll.setWidget(self._build_run_card())
        lay.addWidget(scroll, 0, 0)
        lay.addWidget(self._build_history_card(), 0, 1)
        lay.setColumnStretch(0, 3)
        lay.setColumnStretch(1, 2)

    def _build_run_card(self) -> QWidget:
        runc = card()
        rv = QVBoxLayout(runc)
        rv.setContentsMargins(16, 12, 16, 12)
        rv.addWidget(card_title("5 · Run and compare"))
        self.plan_summary = QLabel("")
        self.plan_summary.setWordWrap(True)
        rv.addWidget(self.plan_summary)
        self.known_label = QLabel("")
        self.known_label.setWordWrap(True)
        self.known_label.setProperty("muted", True)
        rv.addWidget(self.known_label)
        brow = QHBoxLayout()
        self.run_btn = QPushButton("Quantize and measure")
        self.run_btn.setProperty("primary", True)
        self.auto_load = QCheckBox("Load the result into the engine")
        self.auto_load.setChecked(True)
        brow.addWidget(self.run_btn)
        brow.addWidget(self.auto_load)
        brow.addStretch(1)
        rv.addLayout(brow)
        self.run_progress = JobProgress("Nothing running.")
        rv.addWidget(self.run_progress)
        vrow = QHBoxLayout()
        self.verdict_badge = Badge("", "none")
        self.verdict = QLabel("")
        self.verdict.setWordWrap(True)
        vrow.addWidget(self.verdict_badge)
        vrow.addWidget(self.verdict, 1)
        rv.addLayout(vrow)
        rv.addWidget(self._build_compare_table())
        rv.addLayout(self._build_save_row())
        self.save_status = muted("")
        self.save_status.setWordWrap(True)
        self.save_status.setTextInteractionFlags(Qt.TextSelectableByMouse)
        rv.addWidget(self.save_status)
        rv.addStretch(1)
        return runc

    def _build_compare_table(self) -> QTableWidget:
        """Float vs INT8, a row per measure, sized to show every row."""
        self.table = QTableWidget(len(ROWS), 3)
        self.table.setHorizontalHeaderLabels(["Float", "INT8", "Change"])
        self.table.setVerticalHeaderLabels(ROWS)
        self.table.verticalHeaderItem(5).setToolTip(
            "Share of greedy tokens identical to the float model's, position by position, when "
            "each model continues on its own: one early flip of a near-tie changes the rest")
        self.table.verticalHeaderItem(6).setToolTip(
            "Share of positions where the INT8 model's most likely next token is the float "
            "model's, both reading the float model's continuation (teacher-forced)")
        self.table.horizontalHeader().setSectionResizeMode(QHeaderView.Stretch)
        self.table.setEditTriggers(QAbstractItemView.NoEditTriggers)
        self.table.setSelectionMode(QAbstractItemView.NoSelection)
        self.table.verticalHeader().setDefaultSectionSize(28)
        self.table.setFixedHeight(32 + len(ROWS) * 28 + 6)
        return self.table

    def _build_save_row(self) -> QHBoxLayout:
        """Save in a format, Load into the engine."""
        srow = QHBoxLayout()
        self.fmt_box = QComboBox()
        for key, label in FORMAT_LABELS.items():
            self.fmt_box.addItem(label, key)
        self.save_btn = QPushButton("Save as…")
        self.load_btn = QPushButton("Load into engine")
        for b in (self.save_btn, self.load_btn):
            b.setEnabled(False)
        srow.addWidget(muted("Save"))
        srow.addWidget(self.fmt_box)
        srow.addWidget(self.save_btn)
        srow.addStretch(1)
        srow.addWidget(self.load_btn)
        return srow

    def _build_history_card(self) -> QWidget:
        hist = card()
        hv = QVBoxLayout(hist)
        hv.setContentsMargins(16, 12, 16, 12)
        hv.addWidget(card_title("Earlier runs"))
        self.history = QTableWidget(0, 4)
        self.history.setHorizontalHeaderLabels(["When", "Model · recipe", "Δ ppl", "Size"])
        hh = self.history.horizontalHeader()
        hh.setSectionResizeMode(QHeaderView.ResizeToContents)
        hh.setSectionResizeMode(1, QHeaderView.Stretch)
        self.history.verticalHeader().setVisible(False)
        self.history.setEditTriggers(QAbstractItemView.NoEditTriggers)
        self.history.setSelectionBehavior(QAbstractItemView.SelectRows)
        self.history.setSelectionMode(QAbstractItemView.SingleSelection)
        self.history.setWordWrap(True)
        self.history.cellClicked.connect(lambda r, _c: self._pick(r))
        hv.addWidget(self.history, 1)
        self.history_empty = muted("No runs yet: results are kept here, so a combination is "
                                   "measured once.")
        self.history_empty.setWordWrap(True)
        hv.addWidget(self.history_empty)
        return hist

    def show_plan(self, plan: QuantPlan | None, problem: str = "") -> None:
        if plan is None:
            self.plan_summary.setText(problem)
            return
        self.plan_summary.setText(
            f"<b>{plan.model_name}</b> · {plan.describe()}<br>"
            + (f"calibration: {plan.samples} × {plan.seq_len} tokens from "
               f"{Path(plan.calib_file).name}" if plan.calib_file
               else "calibration: text the model writes itself")
            + f" · quality budget {plan.budget_pct:g}% perplexity")

    def show_run(self, run: QuantRun, budget_pct: float) -> None:
        self.run = run
        rows = measure_rows(run) + recipe_rows(run)
        for r, cells in enumerate(rows):
            for c, text in enumerate(cells):
                item = QTableWidgetItem(text)
                item.setTextAlignment(Qt.AlignCenter)
                if r == KEPT_ROW and c == 1 and run.kept_float:
                    item.setToolTip("\n".join(f"{n}: {why}" for n, why in run.kept_float.items()))
                if r == HEAD_ROW and c and run.head_reason:
                    item.setToolTip(head_tip(run))
                self.table.setItem(r, c, item)
        if run.measured:
            ok, text = verdict(run, budget_pct)
            self.verdict_badge.set("WITHIN BUDGET" if ok else "OVER BUDGET",
                                   "ok" if ok else "bad")
        else:
            self.verdict_badge.set("NOT MEASURED", "none")
            text = ("Float and INT8 were not compared: the run had \"measure float vs INT8 on "
                    "the server\" off.")
        self.verdict.setText(text)
        if run.server:  # its checkpoint is on the server: loaded there, not saved from here
            self.save_btn.setEnabled(False)
            self.load_btn.setEnabled(False)
            self.save_status.setText(f"Made on {host_label(run.server)}: {run.out_dir} (aim the "
                                     "wizard or the Models page at that server to load it).")
            return
        exists = Path(run.out_dir).is_dir()
        self.save_btn.setEnabled(exists)
        self.load_btn.setEnabled(exists)
        if not exists:
            self.save_status.setText(f"The checkpoint {run.out_dir} was deleted; run again to "
                                     "save or load it.")

    def clear_verdict(self) -> None:
        self.verdict_badge.set("", "none")
        self.verdict.setText("")

    def show_history(self, runs: list[QuantRun]) -> None:
        self._history_runs = runs
        self.history.setRowCount(len(runs))
        for r, run in enumerate(runs):
            plan = QuantPlan(**{**run.plan, "skip": tuple(run.plan.get("skip", ()))})
            where = f" @ {host_label(run.server)}" if run.server else ""
            measured = run.measured
            cells = (run.created[5:16].replace("T", " "),
                     f"{plan.model_name}{where} · {plan.describe()}",
                     f"{run.ppl_delta_pct:+.2f}%" if measured else "not measured",
                     f"{run.quant.disk_bytes / max(run.float.disk_bytes, 1):.0%}" if measured
                     else "—")
            for c, text in enumerate(cells):
                item = QTableWidgetItem(text)
                item.setToolTip(f"{run.out_dir} on {host_label(run.server)}" if run.server
                                else run.out_dir)
                self.history.setItem(r, c, item)
        self.history.resizeRowsToContents()
        self.history_empty.setVisible(not runs)

    def _pick(self, row: int) -> None:
        if 0 <= row < len(self._history_runs):
            self.history_picked.emit(self._history_runs[row])


def measure_rows(run: QuantRun) -> list[tuple[str, str, str]]:
    """The float-vs-INT8 table's measured rows (dashes for a run that measured nothing)."""
    f, q = run.float, run.quant
    if f is None or q is None:
        return [("—", "—", "")] * 7

    def ratio(a, b, fmt="{:+.0f}%"):
        return fmt.format(100.0 * (b / a - 1.0)) if a else "—"

    return [
        (fmt_bytes(f.disk_bytes), fmt_bytes(q.disk_bytes), ratio(f.disk_bytes, q.disk_bytes)),
        (fmt_bytes(f.memory_bytes), fmt_bytes(q.memory_bytes),
         ratio(f.memory_bytes, q.memory_bytes)),
        (f"{f.ttft_ms:.1f} ms", f"{q.ttft_ms:.1f} ms", ratio(f.ttft_ms, q.ttft_ms)),
        (f"{f.tok_s:.1f}", f"{q.tok_s:.1f}", ratio(f.tok_s, q.tok_s)),
        (f"{f.perplexity:.3f}", f"{q.perplexity:.3f}", f"{run.ppl_delta_pct:+.2f}%"),
        ("reference", f"{100 * (q.greedy_agreement or 0):.0f}% of tokens", ""),
        ("reference", "—" if q.top1_agreement is None  # runs saved before it existed
         else f"{100 * q.top1_agreement:.0f}% of tokens", ""),
    ]


def head_tip(run: QuantRun) -> str:
    """Why the head is int8 or float, and what the int8 head alone changes."""
    tip = run.head_reason
    cost = run.head_cost
    if cost:
        tip += (f"\nThe int8 head alone, on the INT8 model ({cost['tokens']} tokens): perplexity "
                f"{cost['perplexity_float_head']:.3f} -> {cost['perplexity_int8_head']:.3f}, "
                f"same next token at {100 * cost['top1_agreement']:.1f}% of positions")
    return tip
