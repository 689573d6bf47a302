"""Secrets and files on disk: the API key in the keyring or a 0600 file (never the INI), the
kernel cache trusted only when it is the user's own, --overwrite that cannot delete a folder
that is not a model, and settings/history files that are written atomically and kept aside
(not reset) when damaged."""

from __future__ import annotations

import json
import os
import stat
import time
from pathlib import Path

import pytest
from fakes.memory_keyring import memory_keyring
from npu_console.console.api_key_store import ApiKeyStore, key_file, usable_keyring
from npu_console.engine import atomic_files
from npu_console.engine.quant.outdir import OutputFolderError, restore_left_aside, write_folder


def mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


# ----------------------------------------------------------------------------- API key


@pytest.fixture
def settings(tmp_path):
    from npu_console.console.settings import open_settings

    return open_settings(tmp_path / "console.ini")


def test_without_a_keyring_the_key_is_a_0600_file_in_a_0700_folder(settings, tmp_path):
    assert usable_keyring() is None  # this machine has only keyring's fail backend
    store = ApiKeyStore(settings)
    assert store.load() == ""
    store.save("sk-test-0123456789abcdef")
    path = key_file()
    assert mode(path) == 0o600 and mode(path.parent) == 0o700
    assert ApiKeyStore(settings).load() == "sk-test-0123456789abcdef"
    settings.setValue("server/port", 8000)
    settings.sync()
    assert "sk-test" not in (tmp_path / "console.ini").read_text()
    os.chmod(path.parent, 0o755)  # loosened by hand: tightened again on the next use
    store.save("")
    assert not path.exists() and mode(path.parent) == 0o700


def test_a_key_left_in_the_ini_moves_to_the_store(settings, tmp_path):
    settings.setValue("server/api_key", "old-plain-text-key-123")
    settings.sync()
    assert ApiKeyStore(settings).load() == "old-plain-text-key-123"
    assert "old-plain-text" not in (tmp_path / "console.ini").read_text()
    assert key_file().read_text().strip() == "old-plain-text-key-123"
    assert mode(key_file()) == 0o600


def test_with_a_working_keyring_the_key_lives_there(settings):
    with memory_keyring() as ring:
        store = ApiKeyStore(settings)
        assert store.backend is ring and "keyring" in store.where()
        store.save("sk-ring-0123456789")
        assert ring.passwords == {("npu-console", "server-api-key"): "sk-ring-0123456789"}
        assert not key_file().exists()
        assert ApiKeyStore(settings).load() == "sk-ring-0123456789"
        store.save("")
        assert ring.passwords == {}


def test_the_server_page_keeps_its_key_out_of_the_ini(qapp, qtbot, tmp_path):
    from npu_console.console.testing import make_window

    win = make_window(tmp_path, start_engine=False)
    try:
        key = win.page("server").generate_key()
    finally:
        win.close()
    ini = (tmp_path / "console.ini").read_text()
    assert key not in ini and key_file().read_text().strip() == key
    win = make_window(tmp_path, start_engine=False)
    try:
        page = win.page("server")
        assert page.api_key.text() == key  # read back from the store
        assert key not in page.curl_text.toPlainText()
    finally:
        win.close()


# ----------------------------------------------------------------------------- kernel cache


@pytest.fixture
def kernel_cache(tmp_path, monkeypatch):
    from npu_console.engine.kernels import native

    monkeypatch.setenv("NPU_CONSOLE_CACHE", str(tmp_path / "cache"))
    first = native.build()
    if first.path is None:
        pytest.skip(f"native kernels unavailable here: {first.reason}")
    return native, first.path


def test_the_kernel_cache_is_private_and_a_build_is_reused(kernel_cache):
    native, path = kernel_cache
    assert mode(path.parent) == 0o700 and not mode(path) & 0o022
    assert native.build().reason == "cached"


def test_a_group_or_world_writable_kernel_is_refused_and_rebuilt(kernel_cache):
    native, path = kernel_cache
    os.chmod(path, 0o777)
    before = os.stat(path).st_ino
    info = native.build()
    assert info.reason == "built" and info.path == path
    assert os.stat(path).st_ino != before and not mode(path) & 0o022


@pytest.mark.skipif(os.getuid() != 0, reason="planting a file as another user needs root")
def test_a_kernel_planted_by_another_user_is_refused_and_rebuilt(kernel_cache):
    native, path = kernel_cache
    path.write_bytes(b"not a shared object")
    os.chown(path, 65534, 65534)
    os.chmod(path, 0o755)
    info = native.build()
    assert info.reason == "built" and os.stat(path).st_uid == os.getuid()
    assert path.read_bytes()[:4] == b"\x7fELF"
    # a cache folder that belongs to someone else is not used at all
    os.chown(path.parent, 65534, 65534)
    refused = native.build()
    assert refused.path is None and "another user" in refused.reason


# ----------------------------------------------------------------------------- --overwrite


def write_model(tmp: Path, tag: str = "new") -> None:
    (tmp / "config.json").write_text(json.dumps({"tag": tag}))
    (tmp / "model.safetensors").write_bytes(b"w")


def test_overwrite_replaces_only_model_or_empty_folders(tmp_path):
    precious = tmp_path / "notes"
    precious.mkdir()
    (precious / "thesis.txt").write_text("years of work")
    with pytest.raises(OutputFolderError, match="does not look like a model folder"):
        write_folder(precious, True, write_model)
    assert (precious / "thesis.txt").read_text() == "years of work"
    with pytest.raises(OutputFolderError, match="already exists"):
        write_folder(precious, False, write_model)
    empty = tmp_path / "empty"
    empty.mkdir()
    write_folder(empty, True, write_model)
    assert json.loads((empty / "config.json").read_text()) == {"tag": "new"}
    write_folder(empty, True, lambda t: write_model(t, "newer"))  # a model folder now
    assert json.loads((empty / "config.json").read_text()) == {"tag": "newer"}
    a_file = tmp_path / "file.txt"
    a_file.write_text("x")
    with pytest.raises(OutputFolderError, match="not a folder"):
        write_folder(a_file, True, write_model)
    assert not list(tmp_path.glob(".*partial-*"))


def test_quantize_refuses_to_overwrite_a_folder_that_is_not_a_model(tmp_path, demo_model_dir,
                                                                     capsys):
    from npu_console.cli.main import main

    precious = tmp_path / "home"
    precious.mkdir()
    (precious / ".bashrc").write_text("x")
    t0 = time.monotonic()
    code = main(["quantize", "--model", str(demo_model_dir), "--method", "w8a16",
                 "--out", str(precious), "--overwrite"])
    assert code != 0 and "does not look like a model folder" in capsys.readouterr().err
    assert (precious / ".bashrc").exists() and time.monotonic() - t0 < 60


def test_a_failed_swap_puts_the_old_folder_back(tmp_path, monkeypatch):
    out = tmp_path / "model"
    out.mkdir()
    write_model(out, "old")
    real_replace = os.replace

    def replace(src, dst):  # the second rename (new folder into place) fails
        if Path(src).name.startswith(".model.partial-") and Path(dst) == out:
            raise OSError("injected: rename failed")
        return real_replace(src, dst)
    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(OSError, match="injected"):
        write_folder(out, True, write_model)
    monkeypatch.undo()
    assert json.loads((out / "config.json").read_text()) == {"tag": "old"}
    assert not list(tmp_path.glob(".model.*"))


def test_an_old_folder_left_aside_by_a_crash_is_restored(tmp_path):
    out = tmp_path / "model"
    aside = tmp_path / ".model.old-abc123" / "x"
    aside.mkdir(parents=True)
    write_model(aside, "old")
    restore_left_aside(out)  # as the next write_folder does first
    assert json.loads((out / "config.json").read_text()) == {"tag": "old"}
    assert not aside.parent.exists()


# ----------------------------------------------------------------------------- damaged files


def kept_aside(path: Path) -> list[Path]:
    return sorted(path.parent.glob(f"{path.name}.corrupt-*"))


def test_a_damaged_quant_history_is_kept_aside_and_reported(tmp_path):
    from npu_console.console.quant_runs import QuantRunStore

    path = tmp_path / "quant_runs.json"
    path.write_text('{"runs": [{"key": "a", ')  # cut off mid-write by an older version
    before = len(atomic_files.corrupt_files())
    assert QuantRunStore(path).load() == []
    kept = kept_aside(path)
    assert len(kept) == 1 and kept[0].read_text() == '{"runs": [{"key": "a", '
    assert not path.exists()
    reported = atomic_files.corrupt_files()[before:]
    assert [(p, k) for p, k, _ in reported] == [(path, kept[0])]
    path.write_text('["not", "a", "history"]')
    assert QuantRunStore(path).load() == [] and len(kept_aside(path)) == 2


def test_recent_models_and_presets_survive_damage_and_write_atomically(tmp_path):
    from npu_console.console import presets
    from npu_console.engine.models import recent

    recent_file = recent._file()
    recent_file.write_text("{broken")
    assert recent.recent_models() == []
    assert len(kept_aside(recent_file)) == 1
    recent.add_recent_model(tmp_path)
    assert recent.recent_models() == [str(tmp_path.resolve())]
    assert not list(recent_file.parent.glob(".recent_models.json.*.tmp"))
    saved = presets.save_preset("Mine", {"temperature": 0.3})
    bad = saved.with_name("Bad.json")
    bad.write_text("\x00\x01")
    names = presets.list_presets()
    assert names["Mine"]["temperature"] == 0.3 and "Bad" not in names
    assert len(kept_aside(bad)) == 1


def test_a_damaged_conversation_is_kept_aside(tmp_path):
    from npu_console.console.chat_store import ChatStore, Conversation

    store = ChatStore(tmp_path / "conversations")
    good = Conversation(title="kept")
    store.save(good)
    (store.root / "broken.json").write_text('{"id": ')
    assert [c.title for c in store.list()] == ["kept"]
    assert len(kept_aside(store.root / "broken.json")) == 1


def test_a_damaged_settings_file_is_kept_aside_and_shown(qapp, qtbot, tmp_path):
    from npu_console.console.testing import make_window

    ini = tmp_path / "console.ini"
    ini.write_text('[ui]\ntheme=dark\n[[broken\nx="unterminated\n')
    win = make_window(tmp_path, start_engine=False)
    try:
        assert len(kept_aside(ini)) == 1
        qtbot.waitUntil(lambda: "console.ini was damaged" in win.statusBar().currentMessage(),
                        timeout=10_000)
        assert "kept as console.ini.corrupt-" in win.statusBar().currentMessage()
    finally:
        win.close()
