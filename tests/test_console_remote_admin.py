"""Models and Quantize driving a connected server's /v1/admin (issue 25): from the Models page,
load a model from the server's roots with progress, see it served, unload it; a server
without --allow-admin says so and offers nothing; from the wizard, a quantization on the
server shows progress and, cancelled, leaves no output there, while one run to the end writes an
output the server lists. The status bar names the server's model while a page works on it.

Real servers: `npu-console serve` child processes on loopback with --api-key; one with
--allow-admin over a temporary root holding a copy of the demo model, one without. The window's
own engine serves the demo model as "local"."""

from __future__ import annotations

import shutil

import pytest

pytest.importorskip("PySide6")
pytest.importorskip("pytestqt")

from npu_console.console.engines import host_label
from npu_console.console.remote_jobs import NO_ADMIN
from npu_console.console.widgets.basic import fmt_bytes
from npu_console.engine.remote.admin import RemoteAdmin
from PySide6.QtCore import Qt
from support.gui import console_window
from support.serve import Serve
from support.shared import SMOLLM2_GGUF

KEY = "sk-admin-0123456789abcdef"
SMOLLM2 = SMOLLM2_GGUF
WAIT_MS = 120_000
pytestmark = [pytest.mark.slow, pytest.mark.gui]


@pytest.fixture(scope="module")
def roots(tmp_path_factory, demo_model_dir):
    base = tmp_path_factory.mktemp("admin-roots")
    shutil.copytree(demo_model_dir, base / "models" / "demo")
    if SMOLLM2.exists():  # a real GGUF: converting it takes long enough to cancel the load
        shutil.copyfile(SMOLLM2, base / "models" / SMOLLM2.name)
    return {"models": base / "models", "out": base / "quantized"}


@pytest.fixture(scope="module")
def servers(roots, demo_model_dir):
    """{"admin": url, "plain": url}: one with --allow-admin, one without."""
    common = ("--api-key", KEY, "--telemetry-source", "off", "--grace", "2")
    started = []
    try:
        started.append(Serve("--model", str(roots["models"] / "demo"), "--name", "base",
                             "--allow-admin", "--model-root", str(roots["models"]),
                             "--output-root", str(roots["out"]), *common))
        started.append(Serve("--model", str(demo_model_dir), "--name", "demo", *common))
        yield {"admin": started[0].url, "plain": started[1].url}
    finally:
        for srv in started:
            srv.stop()


@pytest.fixture(scope="module")
def window(qapp, demo_model_dir, servers, tmp_path_factory):
    home = tmp_path_factory.mktemp("admin-home")
    with console_window(qapp, home, "models", ((demo_model_dir, "local"),), wait_ms=WAIT_MS) as win:
        yield win


def _attach(window, qtbot, url: str):
    remote = window.ctx.remote
    if not remote.is_connected(url):
        remote.connect_server(url, KEY, remember=False)
    qtbot.waitUntil(lambda: (c := remote.engines.get(url)) is not None and bool(c.models),
                    timeout=30_000)
    return remote.engines.get(url)


def _listing(url: str):
    with RemoteAdmin(url, KEY) as admin:
        return admin.models()


def _models_page(window, qtbot, url: str):
    _attach(window, qtbot, url)
    page = window.page("models")
    window.show_page("models")
    qtbot.waitUntil(lambda: page.remote.picker.findData(url) >= 0, timeout=10_000)
    page.remote.select(url)
    qtbot.waitUntil(lambda: page.remote.view is not None and not page.remote.reading(),
                    timeout=30_000)
    return page


def test_models_page_loads_and_unloads_on_the_server(window, servers, demo_model_dir, qtbot):
    url = servers["admin"]
    assert window.page("models").open_folder(str(demo_model_dir))  # this machine's folder
    page = _models_page(window, qtbot, url)
    remote = page.remote
    assert remote.view.allowed and not page.info_card.isVisible() and remote.card.isVisible()
    assert "models/demo" in [remote.folders.item(r, 0).text()
                             for r in range(remote.folders.rowCount())]
    assert [page.table.item(r, 0).text() for r in range(page.table.rowCount())] == ["base"]
    # the status bar: the server's engine and model, not this console's "local"
    assert window.engine_label.text().startswith(f"engine: {host_label(url)}")
    assert window.model_label.text().startswith(f"model: base @ {host_label(url)}")

    remote.select_folder("models/demo")
    page.name_edit.setText("demo")
    page.dtype_box.setCurrentIndex(page.dtype_box.findData("float32"))
    assert page.load_btn.isEnabled()
    values = []
    page.progress.valueChanged.connect(values.append)
    qtbot.mouseClick(page.load_btn, Qt.LeftButton)
    job = remote.job
    assert job is not None and page.cancel_btn.isEnabled() and not remote.picker.isEnabled()
    qtbot.waitUntil(lambda: not remote.busy(), timeout=WAIT_MS)
    assert page.status.text() == "Loaded demo on the server.", page.status.text()
    assert values and max(values) > 0  # the server's progress events reached the bar
    assert not page.progress.isVisible() and remote.picker.isEnabled()
    served = {m["name"]: m for m in _listing(url).loaded}
    assert served["demo"]["path"] == "models/demo" and served["demo"]["dtype"] == "float32"
    # the page reads the listing again: demo is served, loaded from models/demo
    qtbot.waitUntil(lambda: page.table.rowCount() == 2 and not remote.reading(), timeout=30_000)
    assert {page.table.item(r, 0).text() for r in range(2)} == {"base", "demo"}
    row = next(r for r in range(remote.folders.rowCount())
               if remote.folders.item(r, 0).text() == "models/demo")
    assert remote.folders.item(row, 4).text() == "base, demo"

    row = next(r for r in range(2) if page.table.item(r, 0).text() == "demo")
    # the server's own figures for what it serves: parameters, weight bytes, KV cache
    params = served["demo"]["num_parameters"]
    assert params > 0 and page.table.item(row, 5).text() == f"{params / 1e6:,.2f} M"
    assert page.table.item(row, 6).text() == fmt_bytes(served["demo"]["weight_bytes"])
    assert page.table.item(row, 7).text() not in ("", "–")
    page.table.selectRow(row)
    assert page.unload_btn.isEnabled()
    qtbot.mouseClick(page.unload_btn, Qt.LeftButton)
    qtbot.waitUntil(lambda: not remote.busy(), timeout=WAIT_MS)
    assert page.status.text() == "Unloaded demo on the server."
    assert [m["name"] for m in _listing(url).loaded] == ["base"]
    qtbot.waitUntil(lambda: page.table.rowCount() == 1 and not remote.reading(), timeout=30_000)

    # back to this machine: its own folder view, its model in the status bar
    remote.select(None)
    assert page.info_card.isVisible() and not remote.card.isVisible()
    assert page.table.item(0, 0).text() == "local"
    assert page.dtype_box.currentData() == "float32" and page.load_btn.isEnabled()
    assert "Needs about" in page.estimate.text()
    assert window.model_label.text().startswith("model: local · ")


def test_models_page_cancels_a_load_on_the_server(window, servers, qtbot, smollm2_gguf):
    url = servers["admin"]
    page = _models_page(window, qtbot, url)
    remote = page.remote
    remote.select_folder(f"models/{SMOLLM2.name}")
    page.name_edit.setText("smollm2")
    values = []
    page.progress.valueChanged.connect(values.append)
    qtbot.mouseClick(page.load_btn, Qt.LeftButton)
    qtbot.waitUntil(lambda: any(v > 0 for v in values) or not remote.busy(), timeout=WAIT_MS)
    assert remote.busy(), page.status.text()  # still loading: the cancel has work to stop
    qtbot.mouseClick(page.cancel_btn, Qt.LeftButton)
    assert page.status.text() == "Cancelling on the server…"
    qtbot.waitUntil(lambda: not remote.busy(), timeout=60_000)
    assert page.status.text().startswith("Loading cancelled"), page.status.text()
    with RemoteAdmin(url, KEY) as admin:
        last = [j for j in admin.jobs() if j.kind == "load"][-1]
    assert last.state == "cancelled" and last.params["name"] == "smollm2"
    assert "smollm2" not in [m["name"] for m in _listing(url).loaded]
    remote.select(None)


def test_a_server_without_admin_says_so_and_offers_nothing(window, servers, qtbot):
    url = servers["plain"]
    page = _models_page(window, qtbot, url)
    remote = page.remote
    assert not remote.view.allowed
    assert remote.notice.text().startswith(NO_ADMIN)
    assert "--allow-admin" in NO_ADMIN
    for hidden in (page.load_card, page.unload_btn, remote.folders, page.open_btn):
        assert not hidden.isVisible()
    assert page.table.item(0, 0).text() == "demo"  # what it serves, read-only
    assert remote.unload_selected() is None and remote.start_load() is None

    quant = window.page("quantize")
    window.show_page("quantize")
    quant.remote.select(url)
    qtbot.waitUntil(lambda: quant.remote.view is not None and not quant.remote.reading(),
                    timeout=30_000)
    with pytest.raises(ValueError, match="does not allow admin"):
        quant.plan()
    assert not quant.run_step.run_btn.isEnabled()
    assert quant.model_step.model_box.count() == 0
    assert quant.start_run() is None
    quant.remote.select(None)
    page.remote.select(None)


def _wizard(window, qtbot, url: str):
    _attach(window, qtbot, url)
    page = window.page("quantize")
    window.show_page("quantize")
    qtbot.waitUntil(lambda: page.remote.picker.findData(url) >= 0, timeout=10_000)
    page.remote.select(url)
    qtbot.waitUntil(lambda: page.remote.view is not None and not page.remote.reading(),
                    timeout=30_000)
    assert page.model_step.folder_btn.isHidden()
    box = page.model_step.model_box
    paths = [tuple(box.itemData(i))[1] for i in range(box.count())]
    assert "models/demo" in paths  # the server's float models
    box.setCurrentIndex(paths.index("models/demo"))
    assert page.model_step.choice() == ("demo", "models/demo")
    assert window.engine_label.text().startswith(f"engine: {host_label(url)}")
    return page


def _outputs(url: str) -> list[str]:
    listing = _listing(url)
    return [m.path for m in listing.models if m.path.startswith(listing.output_root + "/")]


def test_wizard_quantization_on_the_server_can_be_cancelled(window, servers, roots, qtbot):
    url = servers["admin"]
    page = _wizard(window, qtbot, url)
    page.set_method("w8a8-dynamic")
    # many long self-written calibration samples: far longer than the cancel takes
    page.set_calibration(None, 2048, 512)
    page.go(4)
    panel = page.run_step.run_progress
    messages = []
    qtbot.mouseClick(page.run_step.run_btn, Qt.LeftButton)
    job = page.job
    assert job is not None and page.busy() and panel.cancel_btn.isEnabled()
    job.progress.connect(lambda f, msg: messages.append((f, msg)))
    qtbot.waitUntil(lambda: any(f > 0 for f, _ in messages), timeout=WAIT_MS)
    qtbot.mouseClick(panel.cancel_btn, Qt.LeftButton)
    qtbot.waitUntil(lambda: not page.busy(), timeout=60_000)
    assert panel.stage.text().startswith("Cancelled. The server wrote nothing"), \
        panel.stage.text()
    with RemoteAdmin(url, KEY) as admin:
        last = [j for j in admin.jobs() if j.kind == "quantize"][-1]
    assert last.state == "cancelled" and last.cancel_requested
    assert _outputs(url) == []
    assert not roots["out"].exists() or list(roots["out"].iterdir()) == []


def test_wizard_quantization_on_the_server_writes_an_output_it_lists(window, servers, qtbot):
    url = servers["admin"]
    page = _wizard(window, qtbot, url)
    page.set_method("w8a16")
    page.set_calibration(None, 4, 32)
    page.go(4)
    page.auto_load.setChecked(False)
    assert page.remote.evaluate.isVisible() and page.remote.evaluate.isChecked()
    before = _outputs(url)
    job = page.start_run()
    assert job is not None
    qtbot.waitUntil(lambda: not page.busy(), timeout=WAIT_MS)
    result = page.remote.result
    assert result is not None, page.run_step.run_progress.stage.text()
    out = result["path"]
    assert out.startswith("quantized/demo-w8a16") and out not in before
    assert out in _outputs(url)
    rs = page.run_step
    assert out in rs.save_status.text() and out in rs.run_progress.stage.text()
    # the report fields the server measured, in the wizard's float-vs-INT8 table
    assert page.run is not None and page.run.out_dir == out
    ppl = rs.table.item(4, 1).text()
    assert ppl and float(ppl) > 0
    assert rs.verdict.text().startswith("Perplexity")
    assert not rs.save_btn.isEnabled() and rs.load_btn.isEnabled()
    # "Earlier runs" lists it, with the server it ran on, and keeps it across restarts
    host = host_label(url)
    row = next(r for r in range(rs.history.rowCount())
               if rs.history.item(r, 1).text().startswith(f"demo @ {host} · "))
    assert rs.history.item(row, 1).toolTip() == f"{out} on {host}"
    stored = page.store.load()[row]
    assert stored.server == url and stored.out_dir == out and stored.ppl_delta_pct == \
        page.run.ppl_delta_pct
    page.remote.select(None)
    assert not page.model_step.folder_btn.isHidden()
    # picked from the list on this machine: its numbers, and where its checkpoint is
    rs.history.cellClicked.emit(row, 0)
    assert page.run.server == url and rs.table.item(4, 1).text() == ppl
    assert rs.save_status.text().startswith(f"Made on {host}: {out}")
    assert not rs.save_btn.isEnabled() and not rs.load_btn.isEnabled()


def test_a_run_on_the_server_without_measures_is_listed_too(window, servers, qtbot):
    """With "measure float vs INT8 on the server" off the server compares nothing: the run is
    still one of the wizard's Earlier runs, marked as not measured."""
    url = servers["admin"]
    page = _wizard(window, qtbot, url)
    page.set_method("w8a16")
    page.set_calibration(None, 4, 32)
    page.go(4)
    page.auto_load.setChecked(False)
    page.remote.evaluate.setChecked(False)
    rs = page.run_step
    assert rs.run_btn.text() == "Quantize"  # nothing measured: the button says so
    before = rs.history.rowCount()
    try:
        assert page.start_run() is not None
        qtbot.waitUntil(lambda: not page.busy(), timeout=WAIT_MS)
    finally:
        page.remote.evaluate.setChecked(True)
    out = page.remote.result["path"]
    host = host_label(url)
    assert rs.history.rowCount() == before + 1
    row = next(r for r in range(rs.history.rowCount())
               if rs.history.item(r, 1).toolTip() == f"{out} on {host}")
    assert rs.history.item(row, 1).text().startswith(f"demo @ {host} · ")
    assert [rs.history.item(row, c).text() for c in (2, 3)] == ["not measured", "—"]
    assert page.run.out_dir == out and not page.run.measured
    assert rs.verdict_badge.text() == "NOT MEASURED" and "not compared" in rs.verdict.text()
    assert rs.table.item(4, 1).text() == "—"
    stored = next(r for r in page.store.load() if r.out_dir == out)
    assert stored.server == url and stored.float is None and stored.quant is None
    assert rs.run_btn.text() == "Quantize and measure"
    page.remote.select(None)


def test_a_read_that_fails_after_the_page_went_back_to_this_machine_is_ignored(window, servers,
                                                                                qtbot):
    """The server read answers on the GUI thread later; if the page was aimed back at this
    machine meanwhile, its failure must not be shown (nor empty the local lists)."""
    url = servers["admin"]
    page = _models_page(window, qtbot, url)
    admin = page.remote.admin
    conn = window.ctx.remote.engines.get(url)
    failures, views = [], []
    admin.events.subscribe("read_failed", failures.append)
    admin.events.subscribe("view", views.append)
    key = conn.engine.api_key
    conn.engine.api_key = "not-the-key"  # the read is refused: 401
    try:
        reader = admin.refresh()
        page.remote.select(None)  # before the GUI thread can see the answer
        reader.join(30)
        qtbot.wait(200)
        assert failures == [] and views == [] and admin.error == ""
        assert page.info_card.isVisible() and page.table.item(0, 0).text() == "local"
        page.remote.select(url)  # aimed at the server, the same failure is shown
        qtbot.waitUntil(lambda: bool(failures), timeout=30_000)
        assert views == [] and not page.remote.reading()
        assert page.remote.notice.text().startswith("⚠ Cannot read the server:")
    finally:
        conn.engine.api_key = key
        page.remote.select(None)
