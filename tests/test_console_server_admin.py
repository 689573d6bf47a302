"""console.remote_jobs.ServerAdmin, the Qt-free model behind the Models page and the Quantize
wizard aimed at a connected server (issue 37: models own state and emit events; pages render).

No Qt here: the model's `post` is a queue this test drains on its own thread, standing in for
the GUI thread, and every event must arrive there. Real `npu-console serve` processes on
loopback: one with --allow-admin over a temporary root holding a copy of the demo model, one
without."""

from __future__ import annotations

import queue
import shutil
import subprocess
import sys
import threading
import time

import pytest
from npu_console.console.quant_runs import QuantPlan, QuantRunStore
from npu_console.console.remote_jobs import (
    NO_ADMIN,
    ServerAdmin,
    quantize_problem,
    run_from_result,
)
from support.serve import Serve

KEY = "sk-admin-model-0123456789abcdef"
pytestmark = pytest.mark.slow


class Loop:
    """The GUI thread's stand-in: post() queues a call, run_until() runs them on this thread."""

    def __init__(self):
        self.calls: queue.Queue = queue.Queue()
        self.thread = threading.current_thread()

    def post(self, fn, *args) -> None:
        self.calls.put((fn, args))

    def run_until(self, done, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while not done():
            left = deadline - time.monotonic()
            assert left > 0, "timed out"
            try:
                fn, args = self.calls.get(timeout=min(left, 0.2))
            except queue.Empty:
                continue
            fn(*args)

    def run_for(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        self.run_until(lambda: time.monotonic() >= end, seconds + 5)


class Recorder:
    """Every event of a ServerAdmin, in order, each checked to arrive on the loop's thread."""

    def __init__(self, admin: ServerAdmin, loop: Loop):
        self.seen: list[tuple[str, object]] = []
        self.off_thread: list[str] = []
        for name in ("target", "view", "read_failed", "job"):
            admin.events.subscribe(name, lambda arg, name=name: self._on(name, arg, loop))

    def _on(self, name: str, arg, loop: Loop) -> None:
        self.seen.append((name, arg))
        if threading.current_thread() is not loop.thread:
            self.off_thread.append(name)

    def names(self) -> list[str]:
        return [n for n, _ in self.seen]

    def jobs(self) -> list:
        return [a for n, a in self.seen if n == "job"]


@pytest.fixture(scope="module")
def servers(tmp_path_factory, demo_model_dir):
    base = tmp_path_factory.mktemp("admin-model")
    shutil.copytree(demo_model_dir, base / "models" / "demo")
    common = ("--api-key", KEY, "--telemetry-source", "off", "--grace", "2")
    started = []
    try:
        started.append(Serve("--model", str(base / "models" / "demo"), "--name", "base",
                             "--allow-admin", "--model-root", str(base / "models"),
                             "--output-root", str(base / "quantized"), *common))
        started.append(Serve("--model", str(demo_model_dir), "--name", "demo", *common))
        yield {"admin": started[0].url, "plain": started[1].url}
    finally:
        for srv in started:
            srv.stop()


def _model(servers, key: str = KEY, **kw):
    loop = Loop()
    known = set(servers.values())
    admin = ServerAdmin(lambda url: (url, key) if url in known else None, loop.post, **kw)
    return admin, loop, Recorder(admin, loop)


def test_the_model_imports_without_qt():
    code = ("import sys, npu_console.console.remote_jobs;"
            "bad=[m for m in sys.modules if m.split('.')[0] in ('PySide6','pyqtgraph','qasync')];"
            "print(bad); sys.exit(1 if bad else 0)")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=300, check=False)
    assert res.returncode == 0, res.stdout + res.stderr[-2000:]


def test_aimed_at_a_server_it_reads_what_the_server_offers_and_drops_stale_answers(servers):
    url = servers["admin"]
    admin, loop, rec = _model(servers)
    assert quantize_problem(admin) == "" and admin.refresh() is None  # this machine: no read
    admin.aim(url)
    assert rec.names() == ["target"] and admin.reading  # the read starts at once
    assert quantize_problem(admin) == "Reading the server's models…"
    loop.run_until(lambda: not admin.reading)
    assert rec.names() == ["target", "view"] and not rec.off_thread
    assert admin.view.allowed and "models/demo" in [m.path for m in admin.models()]
    assert quantize_problem(admin) == ""

    # a read overtaken by a later one: only the later one answers
    first, second = admin.refresh(), admin.refresh()
    first.join(30)
    second.join(30)
    loop.run_for(0.3)
    assert rec.names() == ["target", "view", "view"]

    # aimed back at this machine before a read answers: the answer is dropped
    reader = admin.refresh()
    admin.aim(None)
    reader.join(30)
    loop.run_for(0.3)
    assert rec.names() == ["target", "view", "view", "target"]
    assert admin.view is None and admin.models() == [] and not admin.reading
    assert admin.start_load("models/demo", "x") is None  # nothing to work on here

    # its views gone (the page closed): a read still on its way announces nothing
    admin.aim(url)
    admin.close()
    loop.run_for(1.0)
    assert rec.names() == ["target", "view", "view", "target", "target"] and not rec.off_thread


def test_a_refused_key_and_a_server_without_admin_say_why(servers):
    admin, loop, rec = _model(servers, key="not-the-key")
    admin.aim(servers["admin"])
    loop.run_until(lambda: not admin.reading)
    assert rec.names() == ["target", "read_failed"] and admin.view is None
    assert admin.error and quantize_problem(admin) == f"⚠ Cannot read the server: {admin.error}"

    admin, loop, rec = _model(servers)
    admin.aim(servers["plain"])
    loop.run_until(lambda: not admin.reading)
    assert rec.names() == ["target", "view"] and not admin.view.allowed
    assert quantize_problem(admin) == NO_ADMIN
    assert admin.start_load("models/demo", "x") is None and admin.start_unload("demo") is None
    assert not admin.busy() and admin.job is None


def test_a_load_and_an_unload_are_announced_and_the_listing_follows(servers):
    url = servers["admin"]
    changed: list[str] = []
    admin, loop, rec = _model(servers, served_changed=changed.append)
    admin.aim(url)
    loop.run_until(lambda: admin.view is not None)

    job = admin.start_load("models/demo", "demo2", "auto", "float32")
    assert job is not None and job.running and job.kind == "load" and job.url == url
    assert admin.busy() and admin.start_unload("base") is None  # one job at a time
    loop.run_until(lambda: not admin.busy(), 240)
    jobs = [j for j in rec.jobs() if j.seq == job.seq]
    assert jobs[-1].state == "done", jobs[-1]
    assert jobs[-1].result.result["name"] == "demo2"
    fractions = [j.fraction for j in jobs]
    assert fractions == sorted(fractions) and fractions[-1] == 1.0
    assert changed == [url] and not rec.off_thread
    # the model reads the server again: demo2 is served, from models/demo
    loop.run_until(lambda: not admin.reading and admin.view is not None)
    assert "demo2" in [m["name"] for m in admin.view.listing.loaded]

    job = admin.start_unload("demo2")
    loop.run_until(lambda: not admin.busy(), 60)
    assert admin.job.seq == job.seq and admin.job.state == "done" and admin.job.result == "demo2"
    loop.run_until(lambda: not admin.reading)
    assert [m["name"] for m in admin.view.listing.loaded] == ["base"]
    assert changed == [url, url]

    # a failure is one line, and the model stays usable
    job = admin.start_unload("no-such-model")
    loop.run_until(lambda: not admin.busy(), 60)
    assert admin.job.state == "failed" and admin.job.error and "\n" not in admin.job.error


def test_a_quantization_ends_with_its_result_or_is_cancelled(servers):
    url = servers["admin"]
    admin, loop, rec = _model(servers)
    admin.aim(url)
    loop.run_until(lambda: admin.view is not None)
    plan = QuantPlan(model_dir="models/demo", model_name="demo", method="w8a8-dynamic",
                     samples=2048, seq_len=512)
    job = admin.start_quantize(plan, evaluate=False)
    assert job.what == "demo-w8a8-dynamic" and admin.result is None
    loop.run_until(lambda: admin.job.fraction > 0 or not admin.busy(), 240)
    assert admin.busy(), admin.job
    assert admin.cancel() and admin.job.cancelling
    loop.run_until(lambda: not admin.busy(), 120)
    assert admin.job.state == "cancelled" and admin.result is None
    assert not admin.cancel()

    plan = QuantPlan(model_dir="models/demo", model_name="demo", method="w8a16",
                     samples=4, seq_len=32)
    job = admin.start_quantize(plan, evaluate=False)
    loop.run_until(lambda: not admin.busy(), 240)
    assert admin.job.state == "done", admin.job.error
    assert admin.result["path"] == "quantized/demo-w8a16"
    loop.run_until(lambda: not admin.reading)
    assert "quantized/demo-w8a16" in [m.path for m in admin.models()]
    # the next run of the same plan is numbered past the one the server now lists
    assert admin.start_quantize(plan, evaluate=False).what == "demo-w8a16-2"
    admin.cancel()
    loop.run_until(lambda: not admin.busy(), 120)
    assert not rec.off_thread


def test_a_result_without_measures_is_still_a_run_the_history_keeps(tmp_path):
    """A quantization on a server with evaluate off compared nothing; it is an Earlier run all
    the same, stored and read back without float and INT8 measures."""
    plan = QuantPlan(model_dir="models/demo", model_name="demo", method="w8a16")
    run = run_from_result(plan, {"path": "quantized/demo-w8a16", "seconds": 3.0,
                                 "quantized": ["a", "b"], "skipped": []},
                          server="http://127.0.0.1:9")
    assert not run.measured and run.ppl_delta_pct is None and not run.within(100.0)
    store = QuantRunStore(tmp_path / "runs.json")
    seen = []
    store.events.subscribe("runs", seen.append)
    store.add(run)
    (back,) = store.load()
    assert back.out_dir == "quantized/demo-w8a16" and back.server == "http://127.0.0.1:9"
    assert back.float is None and back.quant is None and back.quantized_layers == 2
    assert [[r.key for r in runs] for runs in seen] == [[run.key]]
