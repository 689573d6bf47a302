"""The console's Qt-free models (napari-style): ChatSession, ServerService and BenchHistory work,
and import, without Qt; pages are views bound to them."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
from types import SimpleNamespace

import pytest
from npu_console.console import demo_feed
from npu_console.console.bench_history import (
    BenchHistory,
    offline_options,
    offline_points,
    offline_rows,
    serving_rows,
    serving_summary,
)
from npu_console.console.bench_store import BenchRecord, BenchStore
from npu_console.console.chat_session import ChatSession, LiveReply, reply_stats
from npu_console.console.chat_store import ChatStore, Message
from npu_console.console.server_service import (
    AdvancedOptions,
    ServerService,
    ServerState,
    log_cells,
)
from npu_console.console.variants import variant_name
from support.api import own_engine


class _Keys:
    def __init__(self, key=""):
        self.saved = key

    def load(self):
        return self.saved

    def save(self, key):
        self.saved = key


class _Engine:
    def __init__(self):
        self.limit = None

    def set_max_waiting(self, n):
        self.limit = n


def test_the_models_import_without_qt():
    code = ("import sys, npu_console.console.server_service, npu_console.console.bench_history,"
            " npu_console.console.threads, npu_console.console.chat_session,"
            " npu_console.console.demo_feed, npu_console.console.variants;"
            "bad=[m for m in sys.modules if m.split('.')[0] in ('PySide6','pyqtgraph','qasync')];"
            "print(bad); sys.exit(1 if bad else 0)")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=False)
    assert res.returncode == 0, res.stdout + res.stderr


def test_server_service_owns_key_limit_and_refusals():
    engine = None
    keys = _Keys("stored")
    svc = ServerService(lambda: engine, keys)
    assert svc.key() == "stored" and not svc.running() and svc.url is None
    assert "engine is not running" in svc.start_problem("127.0.0.1")
    assert svc.start("127.0.0.1", 1, "") is not None  # nothing started
    engine = _Engine()
    svc.set_key("  ")
    assert svc.key() is None
    assert "needs an API key" in svc.start_problem("0.0.0.0")
    assert svc.start_problem("127.0.0.1") is None
    key = svc.generate_key()
    assert len(key) >= 24 and keys.saved == key and svc.start_problem("0.0.0.0") is None
    svc.set_queue_limit(7)
    assert engine.limit == 7
    assert svc.stop() is False  # not running
    assert svc.state.phase == "stopped"


def test_advanced_options_reach_the_server_as_serve_passes_them():
    """The Server page's Advanced group and `serve`'s command line give the API the same
    settings: the same defaults, the same parsing of the host list."""
    from npu_console.cli.main import build_parser
    from npu_console.cli.serve_cmd import _hardening

    def serve(*flags):
        return _hardening(build_parser().parse_args(["serve", "--model", "m", *flags]))

    assert AdvancedOptions().settings_kw() == serve()
    assert AdvancedOptions("api.example, [::1], Other.Example", 5.0, 2.5, 7.0, 64, True
                           ).settings_kw() == serve(
        "--allowed-hosts", "api.example, [::1], Other.Example", "--request-timeout", "5",
        "--header-timeout", "2.5", "--body-timeout", "7", "--limit-concurrency", "64",
        "--expose-paths")


def test_server_service_starts_and_stops_on_its_own_thread(stories_dir):
    """Start and stop announce their state as events: the transition on the caller's thread,
    the outcome on the worker's, each with what a view needs (the URL, the error)."""
    seen = []
    ended = threading.Event()

    def on_state(state):
        seen.append((state, threading.current_thread().name))
        if state.phase not in ("starting", "stopping"):
            ended.set()
    with own_engine(None) as eng:
        svc = ServerService(lambda: eng, _Keys())
        svc.events.subscribe("state", on_state)
        try:
            assert svc.start("127.0.0.1", 0, "") is None
            assert seen[0] == (ServerState("starting"), threading.current_thread().name)
            assert ended.wait(60)
            state, thread = seen[1]
            assert state.phase == "running" and thread == "server-start"
            assert svc.running() and svc.url == state.url and not svc.busy()
            assert svc.state == state
            ended.clear()
            assert svc.stop()
            assert seen[2][0] == ServerState("stopping", state.url)
            assert ended.wait(30) and seen[3] == (ServerState("stopped"), "server-stop")
            assert not svc.running() and svc.url is None
            # a start that cannot bind ends as "failed", with the reason
            with socket.socket() as taken:
                taken.bind(("127.0.0.1", 0))
                taken.listen()
                ended.clear()
                assert svc.start("127.0.0.1", taken.getsockname()[1], "") is None
                assert ended.wait(60)
            failed = seen[-1][0]
            assert failed.phase == "failed" and failed.op == "start" and failed.error
            assert not svc.running() and not svc.busy()
        finally:
            svc.shutdown()


def test_bench_history_keeps_runs_newest_first(tmp_path):
    hist = BenchHistory(BenchStore(tmp_path / "runs.json"))
    assert hist.reload() == [] and hist.current is None
    for i in range(3):
        hist.add(BenchRecord("serving", f"2026-01-0{i + 1}T00:00:00", f"run {i}", {}, []))
    assert [r.title for r in hist.records] == ["run 2", "run 1", "run 0"]
    assert hist.current.title == "run 2"
    assert [r.title for r in BenchHistory(BenchStore(tmp_path / "runs.json")).reload()] == \
        ["run 2", "run 1", "run 0"]


def test_bench_history_announces_what_changed(tmp_path):
    hist = BenchHistory(BenchStore(tmp_path / "runs.json"))
    seen = []
    hist.events.subscribe("records", lambda recs: seen.append(("records", len(recs))))
    hist.events.subscribe("current", lambda rec: seen.append(("current", rec.title)))
    hist.events.subscribe("current", lambda rec: 1 / 0)  # a broken listener stops no one
    hist.reload()
    hist.add(BenchRecord("offline", "2026-01-01T00:00:00", "a", {}, []))
    hist.add(BenchRecord("serving", "2026-01-02T00:00:00", "b", {}, []))
    assert seen == [("records", 0), ("records", 1), ("current", "a"), ("records", 2),
                    ("current", "b")]
    seen.clear()
    hist.pick(1)  # the history's second row: the older run
    hist.pick(7)  # past the end: nothing
    assert seen == [("current", "a")] and hist.current.title == "a"


def test_the_quantize_history_announces_what_changed(tmp_path):
    from npu_console.console.quant_runs import QuantRun, QuantRunStore

    measure = {"name": "f", "method": "float", "disk_bytes": 1, "memory_bytes": 1,
               "ttft_ms": 1.0, "tok_s": 1.0, "perplexity": 2.0}

    def run(key):
        return QuantRun.from_dict({
            "key": key, "plan": {}, "created": "x", "out_dir": "o", "fmt": "native",
            "seconds": 1.0, "quantized_layers": 1, "skipped_layers": 0, "calib_samples": 0,
            "float": measure, "quant": {**measure, "perplexity": 2.1}, "eval_source": "e"})

    store = QuantRunStore(tmp_path / "quant_runs.json")
    seen = []
    store.events.subscribe("runs", lambda runs: seen.append([r.key for r in runs]))
    assert store.reload() == []
    store.add(run("a"))
    store.add(run("b"))
    store.add(run("a"))  # measured again: one entry per combination, newest first
    assert seen == [[], ["a"], ["b", "a"], ["a", "b"]]
    assert [r.key for r in QuantRunStore(tmp_path / "quant_runs.json").load()] == ["a", "b"]


def test_result_tables_and_summary():
    doc = {"batches": [{"batch_size": 4, "output_tokens_per_s": 12.34, "ttft_ms_mean": None}]}
    assert offline_rows(doc)[0][:3] == ["4", "12.3", "—"]
    serving = {"metrics": {"ttft_ms": {"mean": 1.0, "p50": 2.0}, "completed": 3,
                           "request_goodput": None}}
    assert serving_rows(serving)[0] == ["TTFT", "1.0", "2.0", "—", "—"]
    assert "<b>3</b> requests ok" in serving_summary(serving) and "off (no SLO)" in \
        serving_summary(serving)


def test_sweep_options_and_plot_points():
    """What the Benchmark page asks of the form, and what its plots draw, without Qt."""
    with pytest.raises(ValueError, match="Load a model first"):
        offline_options(None, (1,), 8, 8)
    with pytest.raises(ValueError, match="at least one batch size"):
        offline_options("/m", (), 8, 8)
    assert offline_options("/m", (1, 4), 8, 16) == {
        "model": "/m", "batch_sizes": (1, 4), "input_len": 8, "output_len": 16, "num_threads": 1}
    doc = {"batches": [{"batch_size": 1, "output_tokens_per_s": 5.0, "ttft_ms_mean": 3.0},
                       {"batch_size": 4, "output_tokens_per_s": 9.0,
                        "decode_tokens_per_s": 11.0}]}
    labels, series, ttft = offline_points(doc)
    assert labels == ["1", "4"] and ttft == [(0, 3.0)]
    assert series == [("output tok/s", 0, False, [(0, 5.0), (1, 9.0)]),
                      ("decode tok/s", 1, False, [(1, 11.0)])]  # no roofline: no line


def test_quant_variant_names_and_export_checks():
    """The Quantize page's naming and Save as checks, without Qt."""
    from types import SimpleNamespace

    from npu_console.console.quant_runs import export_problem, variant_name

    run = SimpleNamespace(plan={"model_name": "demo", "method": "w8a16"}, int8_head=False)
    assert variant_name(run, set()) == "demo-w8a16"
    assert variant_name(run, {"demo-w8a16", "demo-w8a16-2"}) == "demo-w8a16-3"
    assert "W8A8 only" in export_problem(run, "compressed-tensors")
    assert export_problem(run, "msmodelslim") == "" and export_problem(run, "native") == ""
    head = SimpleNamespace(plan={"model_name": "demo", "method": "w8a8-dynamic"},
                           int8_head=True)
    assert "int8 lm_head" in export_problem(head, "msmodelslim")
    assert export_problem(head, "native") == ""


def test_chat_session_turns_ab_and_storage(tmp_path):
    from npu_console.engine.runtime.types import SamplingParams

    s = ChatSession(ChatStore(tmp_path))
    assert s.save() is False  # an empty chat is not kept
    s.add_user_turn("What is the capital of France? " * 3)
    assert s.conv.title.endswith("…") and len(s.conv.title) == 49
    s.set_ab(True, "b")
    assert [p.model for p in s.conv.panes][1] == "b" and len(s.conv.panes[1].messages) == 1
    params = SamplingParams(max_tokens=4)
    turns = s.turn_requests({"system_prompt": "Be brief.", "temperature": 0.5}, params,
                            ["a", "b"])
    assert [(i, r.model) for i, _reply, r in turns] == [(0, "a"), (1, "b")]
    assert turns[0][2].messages[0] == {"role": "system", "content": "Be brief."}
    assert s.conv.params == {"temperature": 0.5}
    for i, reply, _r in turns:
        reply.content = "Paris"
        s.conv.panes[i].messages.append(reply)
    assert s.drop_last_replies() is True
    assert all(p.messages[-1].role == "user" for p in s.conv.panes)
    assert s.save() is True
    again = ChatSession(ChatStore(tmp_path))
    again.open(s.conv.id)
    assert len(again.conv.panes) == 2 and again.conv.system_prompt == "Be brief."
    assert again.truncate(0).role == "user" and again.conv.empty
    again.new("b", ab=True)
    assert len(again.conv.panes) == 2 and again.conv.empty


def test_chat_session_announces_every_change(tmp_path):
    """What the Chat page draws from: every change to the panes comes as an event, in order."""
    s = ChatSession(ChatStore(tmp_path))
    seen = []
    for name in ("message", "truncated", "conversation", "panes", "saved"):
        s.events.subscribe(name, lambda *args, name=name: seen.append(
            (name,) + tuple(a.content if isinstance(a, Message) else
                            len(a.panes) if hasattr(a, "panes") else a for a in args)))
    s.add_user_turn("hi")
    s.set_ab(True, "b")
    s.set_ab(True, "b")  # already two panes: nothing changed, nothing said
    s.add_reply(0, Message("assistant", "A"))
    s.add_reply(1, Message("assistant", "B"), "gone")
    assert s.save()
    s.drop_last_replies()
    s.truncate(0)
    s.open(s.conv.id)
    s.set_ab(False, None)
    s.new()
    assert seen == [("message", 0, "hi"), ("panes", 2), ("message", 0, "A"),
                    ("message", 1, "B"), ("saved", 2), ("truncated", 0, 1),
                    ("truncated", 1, 1), ("truncated", 0, 0), ("truncated", 1, 0),
                    ("conversation", 2), ("panes", 1), ("conversation", 1)]


def test_reply_stats_from_a_finish_event():
    from npu_console.engine.runtime.types import FinishEvent, RequestTimings, Usage

    fin = FinishEvent("r", "stop", Usage(5, 11), RequestTimings(arrival=0.0, queue_s=0.0,
                      ttft_s=0.5, e2e_s=1.5, tpot_s=0.1, itl_s=()), "m")
    st = reply_stats(fin)
    assert st["tokens_per_s"] == 10.0 and st["finish"] == "stop" and "reasoning_tokens" not in st


def _fin(model="m", error=None, reasoning=None, first_answer_s=None):
    from npu_console.engine.runtime.types import FinishEvent, RequestTimings, Usage

    return FinishEvent("r", "error" if error else "stop", Usage(5, 11, reasoning_tokens=reasoning),
                       RequestTimings(arrival=0.0, queue_s=0.0, ttft_s=0.5, e2e_s=1.5,
                                      tpot_s=0.1, itl_s=(), first_answer_s=first_answer_s),
                       model, error)


def test_a_live_reply_keeps_its_thinking_time_and_what_answered():
    live = LiveReply(1, Message("assistant", "", model="smollm2 @ 10.0.0.5:8000"))
    assert live.add_reasoning("Hm", 1, now=10.0) == {"reasoning_tokens": 1, "reasoning_s": 0.0}
    assert live.add_reasoning(", so", 3, now=12.5)["reasoning_s"] == 2.5
    assert live.message.reasoning == "Hm, so"
    live.finish(_fin("smollm2"))
    assert live.message.model == "smollm2 @ 10.0.0.5:8000"  # the server's label stays
    assert live.message.stats["completion_tokens"] == 11
    local = LiveReply(0, Message("assistant", "", model=None))
    local.finish(_fin("stories"))
    assert local.message.model == "stories"


def test_a_refused_reply_joins_its_pane_with_the_error(tmp_path):
    s = ChatSession(ChatStore(tmp_path))
    s.add_user_turn("hi")
    s.add_reply(0, Message("assistant", ""), "server gone")
    assert s.conv.panes[0].messages[-1].stats == {"finish": "error", "error": "server gone"}


def test_a_new_variant_gets_a_name_no_loaded_one_has(tmp_path):
    folder = SimpleNamespace(path=str(tmp_path / "smollm2"), source_format="hf")
    gguf = SimpleNamespace(path=str(tmp_path / "qwen.Q8_0.gguf"), source_format="gguf")
    assert variant_name(folder, []) == "smollm2"
    assert variant_name(folder, ["smollm2", "smollm2-2"]) == "smollm2-3"
    assert variant_name(gguf, {"x"}) == "qwen.Q8_0"


def test_demo_tiles_from_chips_or_the_host():
    chip = SimpleNamespace(kind="npu", util_pct=40.0, mem_used_mb=2048, mem_total_mb=65536,
                           name="910B")
    snap = SimpleNamespace(devices=[chip, SimpleNamespace(**{**vars(chip), "util_pct": 60.0})],
                           source="replay", host=None)
    t = demo_feed.tiles(snap)
    assert (t.load_label, t.load, t.memory_label) == ("NPU LOAD", ("50", "% · 2 cards"), "HBM")
    assert t.memory == ("4", "of 128 GB") and t.device == "2 × 910B · replay"
    host = SimpleNamespace(cpu_pct=12.4, mem_used_mb=None, mem_total_mb=None)
    t = demo_feed.tiles(SimpleNamespace(devices=[], source="live", host=host))
    assert (t.load_label, t.load, t.memory) == ("CPU LOAD", ("12", "%"), None)
    assert demo_feed.tiles(SimpleNamespace(devices=[], source="live", host=None)) is None


def test_demo_requests_and_the_line_under_an_answer():
    plain = demo_feed.request("hi", "a", reasoner=False)
    chat = demo_feed.request("hi", "b", reasoner=True)
    assert plain.prompt == "hi" and plain.messages is None and plain.params.max_tokens == 96
    assert chat.messages == [{"role": "user", "content": "hi"}] and chat.prompt is None
    assert chat.params.max_tokens == 256 and chat.params.temperature == 0.0
    assert demo_feed.finish_lines(_fin()) == ["\n— 11 tokens · 10 tok/s · TTFT 500 ms"]
    lines = demo_feed.finish_lines(_fin(error="boom", reasoning=4, first_answer_s=0.25))
    assert lines == ["\n— thought for 4 tokens · first answer token 250 ms", "\n⚠ boom"]


def test_a_request_log_row_in_words():
    e = SimpleNamespace(time=0.0, method="POST", route="/v1/chat/completions", status=200,
                        model="m", prompt_tokens=None, completion_tokens=7, ttft_s=0.0123,
                        duration_s=0.5)
    cells = log_cells(e)
    assert cells[1:] == ("POST /v1/chat/completions", "200", "m", "0 → 7", "12 ms", "500 ms")
    assert log_cells(SimpleNamespace(**{**vars(e), "completion_tokens": None, "ttft_s": None,
                                        "model": None}))[3:6] == ("", "", "")
