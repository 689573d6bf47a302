"""Benchmark page: a short offline sweep of the loaded model and a short serving run against
the console's own server, both through the real engine.bench functions; history and exports."""

from __future__ import annotations

import csv
import json
import socket

import pytest

pytest.importorskip("PySide6")
pytest.importorskip("pytestqt")

from PySide6.QtCore import Qt
from PySide6.QtGui import QImage
from support.gui import console_window

WAIT_MS = 180_000
pytestmark = [pytest.mark.slow, pytest.mark.gui]


@pytest.fixture(scope="module")
def window(qapp, stories_dir, tmp_path_factory):
    home = tmp_path_factory.mktemp("benchmark-home")
    with console_window(qapp, home, "benchmark", ((stories_dir, "stories"),), wait_ms=WAIT_MS) as win:
        yield win


def _wait(qtbot, page):
    qtbot.waitUntil(lambda: not page.busy(), timeout=WAIT_MS)


def test_offline_sweep_plots_history_and_exports(window, qtbot, tmp_path):
    page = window.page("benchmark")
    page.tabs.setCurrentIndex(0)
    page.set_models(window.ctx.engine_host.models())
    assert page.model_box.currentText() == "stories"
    for b, check in page.batch_checks.items():
        check.setChecked(b in (1, 2))
    page.input_len.setValue(8)
    page.output_len.setValue(4)
    seen = []
    qtbot.mouseClick(page.run_btn, Qt.LeftButton)
    assert page.busy() and page.progress.cancel_btn.isEnabled()
    page.job.progress.connect(lambda f, m: seen.append((f, m)))
    _wait(qtbot, page)
    assert page.last_error == ""
    rec = page.record
    assert rec is not None and rec.kind == "offline"
    assert [r["batch_size"] for r in rec.rows] == [1, 2]
    assert all(r["output_tokens"] == r["batch_size"] * 4 for r in rec.rows)
    assert any("batch" in m for _f, m in seen)
    assert page.table.rowCount() == 2 and page.table.item(0, 0).text() == "1"
    # the decode rate as a share of the memory-bandwidth limit (measured on this host)
    assert "% </b>" not in page.roofline_label.text()
    assert "of the memory-bandwidth limit" in page.roofline_label.text()
    assert page.plots.currentWidget() is page.offline_plots
    assert page.history.rowCount() == 1 and "stories" in page.history.item(0, 1).text()
    # exports
    c = page.export_csv(str(tmp_path / "sweep.csv"))
    rows = list(csv.DictReader(c.open()))
    assert [int(r["batch_size"]) for r in rows] == [1, 2]
    j = json.loads(page.export_json(str(tmp_path / "sweep.json")).read_text())
    assert j["kind"] == "offline" and len(j["batches"]) == 2
    png = page.export_png(str(tmp_path / "sweep.png"))
    img = QImage(str(png))
    assert not img.isNull() and img.width() > 100


def test_serving_run_against_the_local_server(window, qtbot, tmp_path):
    server = window.page("server")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    page = window.page("benchmark")
    page.tabs.setCurrentIndex(1)
    page.target_local.setChecked(True)
    assert page.start() is None
    assert "server is not running" in page.last_error

    server.port.setValue(port)
    assert server.start()
    qtbot.waitUntil(lambda: server.running() and not server.busy(), timeout=WAIT_MS)
    try:
        page.num_prompts.setValue(4)
        page.mode_conc.setChecked(True)
        page.concurrency.setValue(2)
        page.s_input.setValue(8)
        page.s_output.setValue(4)
        page.slo_ttft.setValue(60_000)
        page.slo_tpot.setValue(0)  # off
        assert page.start() is not None
        _wait(qtbot, page)
        assert page.last_error == ""
        rec = page.record
        assert rec.kind == "serving"
        m = rec.document["metrics"]
        assert m["completed"] == 4 and m["failed"] == 0
        assert m["ttft_ms"]["p50"] > 0 and m["e2el_ms"]["p99"] >= m["e2el_ms"]["p50"]
        assert m["request_goodput"] is not None
        assert page.plots.currentWidget() is page.serving_chart
        assert "TTFT p50" in page.serving_chart.labels
        assert page.table.rowCount() == 4 and page.table.item(0, 0).text() == "TTFT"
        assert "goodput" in page.roofline_label.text()
        assert page.history.rowCount() == 2
        # the server page logged the benchmark's requests
        qtbot.waitUntil(lambda: sum("/v1/completions" in r[1] for r in server.log_rows()) >= 4,
                        timeout=10_000)

        # Cancel stops a long run; the requests that finished are kept
        page.num_prompts.setValue(200)
        page.concurrency.setValue(1)
        page.s_output.setValue(32)
        job = page.start()
        job.progress.connect(lambda _f, m: m.startswith("1/") and page.progress.cancel())
        _wait(qtbot, page)
        rec = page.record
        assert rec.kind == "serving" and rec.document["cancelled"] is True
        assert 1 <= rec.document["metrics"]["completed"] < 200
        assert "stopped" in rec.title and page.history.rowCount() == 3
        # an earlier run, clicked in the history, is drawn again: the offline sweep's plots
        # and table (the model announces it; the page only renders)
        row = next(r for r in range(3) if page.history.item(r, 1).text().startswith("offline"))
        page.history.cellClicked.emit(row, 1)
        assert page.record.kind == "offline" and page.plots.currentWidget() is page.offline_plots
        assert page.table.horizontalHeaderItem(0).text() == "Batch"
        assert page.result_title.text().startswith("Offline:")
        page.grab().save(str(tmp_path.parent / "benchmark_history_picked.png"))
    finally:
        server.stop()
        qtbot.waitUntil(lambda: not server.running() and not server.busy(), timeout=WAIT_MS)


def test_bad_serving_target_is_one_line(window, qtbot):
    page = window.page("benchmark")
    page.tabs.setCurrentIndex(1)
    page.target_url.setChecked(True)
    page.url_edit.setText("not a url")
    assert page.start() is None and "http://" in page.last_error
    # an unreachable endpoint fails with one sentence, not a traceback
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    page.url_edit.setText(f"http://127.0.0.1:{port}")
    assert page.start() is not None
    _wait(qtbot, page)
    assert "cannot reach" in page.last_error and "\n" not in page.last_error
