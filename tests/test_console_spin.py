"""widgets.basic.spin(): the one way the Quantize wizard and the Benchmark page make their number
boxes. Its kind follows its numbers, and the range is set before the value (a default QSpinBox
stops at 99, so a value set first would be cut)."""

from __future__ import annotations

import pytest

pytest.importorskip("PySide6")
pytest.importorskip("pytestqt")

pytestmark = pytest.mark.gui


def test_whole_numbers_give_a_spin_box_holding_a_value_past_the_default_range(qapp):
    from npu_console.console.widgets.basic import spin
    from PySide6.QtWidgets import QSpinBox

    box = spin(8, 8192, 256, " tokens", tip="per sample")
    assert type(box) is QSpinBox
    assert (box.minimum(), box.maximum(), box.value()) == (8, 8192, 256)
    assert box.suffix() == " tokens" and box.toolTip() == "per sample"
    assert box.text() == "256 tokens"


def test_any_float_gives_a_double_box_with_its_step_and_decimals(qapp):
    from npu_console.console.widgets.basic import spin
    from PySide6.QtWidgets import QDoubleSpinBox

    alpha = spin(0.0, 1.0, 0.5, step=0.05)
    assert type(alpha) is QDoubleSpinBox
    assert (alpha.value(), alpha.singleStep(), alpha.decimals()) == (0.5, 0.05, 2)
    alpha.stepBy(1)
    assert alpha.value() == pytest.approx(0.55)
    budget = spin(0.0, 100.0, 2.04, " % perplexity", decimals=1)
    assert budget.maximum() == 100.0 and budget.value() == 2.0
    assert budget.text() == "2.0 % perplexity"
    assert type(spin(1, 1000, 2.0)) is QDoubleSpinBox  # one float is enough


def test_values_outside_the_range_are_clamped_not_refused(qapp):
    from npu_console.console.widgets.basic import spin

    assert spin(1, 10, 50).value() == 10
    assert spin(0.1, 1.0, 0.0).value() == pytest.approx(0.1)
