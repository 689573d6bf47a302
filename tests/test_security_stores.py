"""Every store the console reads survives any file (issue 35): random bytes, JSON of the wrong
shape and a file cut in half are set aside as `<name>.corrupt-<time>` (or skipped record by
record where a history keeps older layouts), nothing raises, and the GUI starts and says so
in its status bar. Chats are saved with the settings' atomic UTF-8 writer."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import pytest
from npu_console.engine import atomic_files

rng = random.Random(35)
RANDOM = [bytes(rng.getrandbits(8) for _ in range(n)) for n in (1, 17, 300)]
SHAPES = [b"[]", b'"x"', b"1", b"null", b"{}", b"[" * 5000, b"\xff\xfe{}", b"{\"a\": NaN}"]


def kept_aside(path: Path) -> list[Path]:
    return sorted(path.parent.glob(f"{path.name}.corrupt-*"))


def cases(good: bytes, shapes: list[bytes]) -> list[bytes]:
    return [*RANDOM, *SHAPES, *shapes, good[:len(good) // 2]]


# ----------------------------------------------------------------------------- chats

CHAT_SHAPES = [b'{"id": "a", "updated": "x"}', b'{"id": 1}', b'{"id": "a", "title": []}',
               b'{"id": "a", "panes": {}}', b'{"id": "a", "panes": [[]]}',
               b'{"id": "a", "panes": [{"messages": [{"role": "user", "content": 5}]}]}',
               b'{"id": "a", "panes": [{"messages": [{"role": "user"}]}]}',
               b'{"id": "a", "params": [], "created": true}']


def test_the_chat_store_survives_any_file(tmp_path):
    from npu_console.console.chat_store import ChatStore, Conversation, Message, Pane

    store = ChatStore(tmp_path / "conversations")
    good = Conversation(title="kept \u00e9\u4e2d",
                        panes=[Pane("m", [Message("user", "hi \u2603")])])
    raw = store.save(good).read_bytes()
    assert json.loads(raw.decode("utf-8"))["title"] == good.title
    assert not list(store.root.glob("*.tmp")) and not list(store.root.glob(".*.tmp"))
    for i, data in enumerate(cases(raw, CHAT_SHAPES)):
        bad = store.root / f"bad{i}.json"
        bad.write_bytes(data)
        listed = store.list()
        assert [c.title for c in listed] == [good.title], data[:60]
        assert not bad.exists() and len(kept_aside(bad)) == 1, data[:60]
        for c in listed:  # what the chat page then reads of them
            assert isinstance(c.updated, float) and isinstance(c.title, str)


def test_chats_are_saved_with_the_atomic_fsynced_writer(tmp_path, monkeypatch):
    from npu_console.console.chat_store import ChatStore, Conversation

    synced = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real_fsync(fd)))
    store = ChatStore(tmp_path)
    path = store.save(Conversation(title="x"))
    assert synced and json.loads(path.read_text(encoding="utf-8"))["title"] == "x"


# ----------------------------------------------------------------------------- presets


def test_presets_survive_any_file(tmp_path):
    from npu_console.console import presets

    good = presets.save_preset("Mine", {"temperature": 0.3, "stop": ["x"]})
    raw = good.read_bytes()
    shapes = [b'{"name": [], "values": {}}', b'{"values": {"temperature": "hot"}}',
              b'{"values": {"stop": "x"}}', b'{"values": {"seed": 1.5}}', b'{"values": []}']
    for i, data in enumerate(cases(raw, shapes)):
        bad = good.with_name(f"Bad{i}.json")
        bad.write_bytes(data)
        names = presets.list_presets()
        assert names["Mine"]["temperature"] == 0.3 and f"Bad{i}" not in names, data[:60]
        assert not bad.exists() and len(kept_aside(bad)) == 1, data[:60]
        for values in names.values():
            assert isinstance(values["temperature"], (int, float))
            assert isinstance(values["stop"], list)


# ----------------------------------------------------------------------------- histories


def test_the_bench_history_survives_any_file(tmp_path):
    from npu_console.console.bench_history import BenchHistory
    from npu_console.console.bench_store import BenchRecord, BenchStore

    path = tmp_path / "bench_runs.json"
    store = BenchStore(path)
    store.add(BenchRecord("offline", "2026-01-01", "t", {"results": []}, [{"a": 1}]))
    raw = path.read_bytes()
    shapes = [b'{"runs": "x"}', b'{"runs": [1]}', b'{"runs": [{"kind": []}]}',
              (b'{"runs": [{"kind": "offline", "created": "x", "title": "t", "document": [], '
               b'"rows": []}]}'),
              (b'{"runs": [{"kind": "offline", "created": "x", "title": "t", "document": {}, '
               b'"rows": [1]}]}')]
    # {} (or an object without "runs"): an empty history, kept
    bad = [d for d in cases(raw, shapes) if d not in (b"{}", b'{"a": NaN}')]
    for data in bad:
        path.write_bytes(data)
        assert BenchHistory(BenchStore(path)).reload() == [], data[:60]
        assert not path.exists(), data[:60]
    assert len(kept_aside(path)) == len(bad)


def test_the_quantize_history_survives_any_file(tmp_path):
    from npu_console.console.quant_runs import QuantRunStore, verdict

    path = tmp_path / "quant_runs.json"
    measure = {"name": "f", "method": "float", "disk_bytes": 1, "memory_bytes": 1,
               "ttft_ms": 1.0, "tok_s": 1.0, "perplexity": 2.0}
    run = {"key": "k", "plan": {}, "created": "x", "out_dir": "o", "fmt": "hf", "seconds": 1.0,
           "quantized_layers": 1, "skipped_layers": 0, "calib_samples": 0,
           "float": measure, "quant": {**measure, "perplexity": 2.1}, "eval_source": "e"}
    path.write_text(json.dumps({"runs": [run]}))
    [loaded] = QuantRunStore(path).load()
    verdict(loaded, 5.0)
    raw = path.read_bytes()
    shapes = [b'{"runs": "x"}', b'{"runs": [1]}', b'{"runs": [[]]}',
              json.dumps({"runs": [{**run, "float": []}]}).encode(),
              json.dumps({"runs": [{**run, "quant": {**measure, "perplexity": "x"}}]}).encode(),
              json.dumps({"runs": [{**run, "seconds": "slow"}]}).encode()]
    for data in cases(raw, shapes):
        path.write_bytes(data)
        for r in QuantRunStore(path).load():  # nothing raises, and what loads can be shown
            verdict(r, 5.0)


def test_the_remembered_servers_survive_any_setting():
    from npu_console.console.servers import ServerStore

    class Settings(dict):
        def value(self, key, default=None):
            return self.get(key, default)

    for value in [*(b.decode("latin-1") for b in RANDOM + SHAPES), '[{"url": 1}]',
                  '[{"url": "http://a:1", "name": []}]', '{"url": "x"}', 5, None, ["x"]]:
        listed = ServerStore(Settings({"servers/recent": value})).list()
        assert all(isinstance(s.url, str) and isinstance(s.name, str) for s in listed)


# ----------------------------------------------------------------------------- the GUI


@pytest.mark.slow
def test_the_console_starts_over_a_bad_conversation_and_says_so(qapp, qtbot, tmp_path):
    from npu_console.console.testing import make_window
    from npu_console.engine.paths import state_dir

    folder = state_dir() / "conversations"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "wrong.json").write_text('{"id": "w", "updated": "x"}')
    (folder / "list.json").write_text("[]")
    before = len(atomic_files.corrupt_files())
    win = make_window(tmp_path, start_engine=False)
    try:
        qtbot.waitUntil(lambda: "was damaged" in win.statusBar().currentMessage(),
                        timeout=10_000)
        message = win.statusBar().currentMessage()
        assert "wrong.json" in message or "list.json" in message
        assert len(atomic_files.corrupt_files()) - before == 2
        assert win.report_corrupt_files() == ""  # said once
    finally:
        win.close()
