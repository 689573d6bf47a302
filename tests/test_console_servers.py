"""Remembered servers without Qt (console/servers.py): most recent first, a limit, each key kept
out of the settings (a 0600 file here, or the keyring), forgetting drops the key too; and the
Connect dialog's probe (engine/remote/probe.py) on addresses that cannot answer."""

from __future__ import annotations

import os
import socket

from npu_console.console.servers import ServerStore
from npu_console.engine.remote.probe import probe_server


class DictSettings:
    """The three calls ServerStore makes on a QSettings."""

    def __init__(self):
        self.values: dict[str, object] = {}

    def value(self, key, default=None):
        return self.values.get(key, default)

    def setValue(self, key, value):
        self.values[key] = value

    def sync(self):
        pass


def _store(limit: int = 10) -> tuple[ServerStore, DictSettings]:
    settings = DictSettings()
    return ServerStore(settings, limit=limit), settings


def test_servers_are_remembered_most_recent_first_with_keys_outside_the_settings(monkeypatch):
    # no keyring: the private file is what this test can look at
    monkeypatch.setattr("npu_console.console.api_key_store.usable_keyring", lambda: None)
    store, settings = _store(limit=2)
    store.remember("http://10.0.0.5:8000/v1/", "gpu-a", "key-a")
    store.remember("http://10.0.0.6:8000", "", "key-b")
    assert [(s.url, s.name) for s in store.list()] == [("http://10.0.0.6:8000", ""),
                                                      ("http://10.0.0.5:8000", "gpu-a")]
    assert store.key("http://10.0.0.5:8000") == "key-a"
    assert "key-a" not in repr(settings.values) and "key-b" not in repr(settings.values)
    path = store.where("http://10.0.0.5:8000").split(" (mode")[0]
    assert os.stat(path).st_mode & 0o777 == 0o600
    # again: first, with its new key; a third server pushes the oldest out, key and all
    store.remember("http://10.0.0.5:8000", "gpu-a", "key-a2")
    assert store.list()[0].url == "http://10.0.0.5:8000" and store.key(
        "http://10.0.0.5:8000") == "key-a2"
    store.remember("http://10.0.0.7:8000", "", None)
    assert [s.url for s in store.list()] == ["http://10.0.0.7:8000", "http://10.0.0.5:8000"]
    assert store.key("http://10.0.0.6:8000") == "" and store.key("http://10.0.0.7:8000") == ""
    assert store.forget("http://10.0.0.5:8000") and not store.forget("http://10.0.0.5:8000")
    assert store.key("http://10.0.0.5:8000") == "" and not os.path.exists(path)


def test_unreadable_remembered_servers_start_afresh():
    store, settings = _store()
    settings.values["servers/recent"] = "{not json"
    assert store.list() == []


def test_probe_says_in_one_line_why_a_server_cannot_be_used():
    bad = probe_server("10.0.0.5:8000")
    assert not bad.ok and "http://" in bad.error
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    down = probe_server(f"http://127.0.0.1:{port}", "k", timeout_s=2.0)
    assert not down.ok and down.summary().startswith("cannot reach") and "\n" not in down.error
