"""PySide6 6.12.0 drops a reference to None on every void Qt call (STACK_NOTES.md): a live plot
then dies with `none_dealloc` within seconds. This watches None's refcount across thousands of
such calls, so a bad PySide6 upgrade fails here instead of in a user's dashboard."""

from __future__ import annotations

import sys

import numpy as np
import pytest

pytest.importorskip("PySide6")

N = 3000


def _drift(fn) -> int:
    for i in range(50):  # warm-up: caches that legitimately keep a reference
        fn(i)
    before = sys.getrefcount(None)
    for i in range(N):
        fn(i)
    return sys.getrefcount(None) - before


def test_void_qt_calls_keep_none_refcount(qapp):
    from PySide6.QtWidgets import QLabel

    label = QLabel()

    def calls(i):
        label.setText(str(i))
        label.update()
        label.setVisible(bool(i % 2))

    drift = _drift(calls)
    assert abs(drift) < 50, f"None refcount drifted by {drift} over {N} void Qt calls"


def test_pyqtgraph_set_data_never_drops_none(qapp):
    import pyqtgraph as pg

    plot = pg.PlotWidget()
    curve = plot.plot(np.arange(10.0), np.arange(10.0))
    x = np.arange(200.0)
    drift = _drift(lambda i: curve.setData(x, np.sin(x + i)))
    # The crash mode is a net LOSS per call (6.12.0: -1 per call, None deallocated). With
    # 6.11.3 + pyqtgraph 0.14 setData nets +1 per call: an extra reference to None, which is
    # harmless (None can never be freed by an excess), so only a loss fails.
    assert drift > -50, f"None lost {-drift} references over {N} setData calls"
