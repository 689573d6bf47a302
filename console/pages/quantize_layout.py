"""The Quantize page's frame, built in named parts: the step header, the steps' stack and the
Back / Next bar, and the wiring of the steps' controls to the page (which renders and
forwards)."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QHBoxLayout, QLabel, QPushButton, QStackedWidget, QVBoxLayout

from ..widgets.bars import radio_style
from ..widgets.basic import muted, page_title
from .quantize_remote import RemoteQuant
from .quantize_results import RunStep
from .quantize_steps import (
    CalibStep,
    MethodStep,
    ModelStep,
    SensitivityStep,
)

STEPS = ("Model", "Method", "Calibration", "Sensitivity", "Run & compare")


def build(page) -> None:
    """The header with the step names, the current step, the plan line with Back / Next."""
    root = QVBoxLayout(page)
    root.setContentsMargins(16, 12, 16, 12)
    root.setSpacing(10)
    head = header(page)
    root.addLayout(head)
    root.addWidget(steps(page), 1)
    # the controls scripts and the README screenshots set directly
    page.budget = page.sens_step.budget
    page.auto_load = page.run_step.auto_load
    # a connected server with admin as where the run goes (quantize_remote.py)
    page.remote = RemoteQuant(page)
    head.addWidget(page.remote.picker)
    root.addLayout(nav(page))
    page.setStyleSheet(radio_style())
    connect(page)


def header(page) -> QHBoxLayout:
    """The title and the steps by name; a click on one goes there."""
    head = QHBoxLayout()
    head.addWidget(page_title("Quantize"))
    head.addSpacing(16)
    page.step_labels: list[QLabel] = []
    for i, name in enumerate(STEPS):
        lab = QLabel(f"{i + 1}  {name}")
        lab.setCursor(Qt.PointingHandCursor)
        lab.mousePressEvent = lambda _e, i=i: page.go(i)
        page.step_labels.append(lab)
        head.addWidget(lab)
        if i < len(STEPS) - 1:
            head.addWidget(muted("›"))
    head.addStretch(1)
    return head


def steps(page) -> QStackedWidget:
    """The five steps' views, one shown at a time."""
    page.model_step = ModelStep()
    page.method_step = MethodStep()
    page.calib_step = CalibStep()
    page.sens_step = SensitivityStep()
    page.run_step = RunStep()
    page.stack = QStackedWidget()
    for step in (page.model_step, page.method_step, page.calib_step, page.sens_step,
                 page.run_step):
        page.stack.addWidget(step)
    return page.stack


def nav(page) -> QHBoxLayout:
    """The plan in one line (or what is missing), Back and Next."""
    bar = QHBoxLayout()
    page.plan_label = muted("")
    page.plan_label.setWordWrap(True)
    bar.addWidget(page.plan_label, 1)
    page.back_btn = QPushButton("‹ Back")
    page.next_btn = QPushButton("Next ›")
    page.next_btn.setProperty("primary", True)
    page.back_btn.clicked.connect(lambda: page.go(page.stack.currentIndex() - 1))
    page.next_btn.clicked.connect(lambda: page.go(page.stack.currentIndex() + 1))
    bar.addWidget(page.back_btn)
    bar.addWidget(page.next_btn)
    return bar


def connect(page) -> None:
    """The steps' edits and buttons to the page's handlers."""
    for step in (page.model_step, page.method_step, page.calib_step, page.sens_step):
        step.changed.connect(page._options_changed)
    page.calib_step.file_edited.connect(page.update_calib_info)
    page.sens_step.sens_btn.clicked.connect(page.start_sensitivity)
    page.sens_step.use_rec_btn.clicked.connect(page.use_recommendation)
    page.run_step.run_btn.clicked.connect(page.start_run)
    page.run_step.save_btn.clicked.connect(page.outputs.choose_save_dir)
    page.run_step.load_btn.clicked.connect(lambda: page.load_variant(page.run))
    page.run_step.history_picked.connect(page.show_run)
