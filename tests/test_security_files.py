"""Hostile files (issue 35): pickle weights are refused, the kernel .so is loaded through the
descriptor that was checked, and GGUF conversion is checked before it starts, limited in time
and address space, evicted beyond a size and kept in a private cache."""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from npu_console.engine.models import gguf
from npu_console.engine.models import gguf_convert as conv
from support.gguf import write_gguf

# ----------------------------------------------------------------------------- pickles


def test_pytorch_bin_folders_are_refused_with_one_line(demo_model_dir, tmp_path):
    import torch
    from npu_console.engine.models import load_model
    from safetensors.torch import load_file

    folder = tmp_path / "pickled"
    shutil.copytree(demo_model_dir, folder)
    weights = {}
    for st in folder.glob("*.safetensors"):
        weights.update(load_file(st))
        st.unlink()
    for index in folder.glob("*.safetensors.index.json"):
        index.unlink()
    torch.save(weights, folder / "pytorch_model.bin")  # a well-formed pickle checkpoint
    with pytest.raises(Exception) as refused:
        load_model(folder)
    message = str(refused.value)
    assert "\n" not in message
    assert "pytorch_model.bin" in message and "convert" in message and "safetensors" in message


# ----------------------------------------------------------------------------- kernel .so


def _tiny_lib(path: Path, value: int) -> Path:
    src = path.with_suffix(".c")
    src.write_text(f"int which(void) {{ return {value}; }}\n")
    cc = shutil.which("cc") or shutil.which("gcc")
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(path), str(src)], check=True)
    os.chmod(path, 0o700)
    return path


@pytest.mark.skipif(not (shutil.which("cc") or shutil.which("gcc")), reason="no C compiler")
def test_the_kernel_library_cannot_be_swapped_between_the_check_and_the_load(tmp_path,
                                                                             monkeypatch):
    from npu_console.engine.kernels import native

    folder = tmp_path / "kernels"
    folder.mkdir(mode=0o700)
    checked = _tiny_lib(folder / "cpu_gemm-x.so", 1)
    planted = _tiny_lib(tmp_path / "planted.so", 2)
    real_cdll = ctypes.CDLL

    def swap_then_load(name, *args, **kwargs):
        # the moment between the trust check and dlopen: another process renames its own
        # file over the checked one
        if os.path.exists(planted):
            os.replace(planted, checked)
        return real_cdll(name, *args, **kwargs)

    monkeypatch.setattr(native, "build", lambda: native.BuildInfo(checked, "cached"))
    monkeypatch.setattr(native, "declare", lambda lib: None)
    monkeypatch.setattr(ctypes, "CDLL", swap_then_load)
    native.library.cache_clear()
    try:
        lib = native.library()
        assert lib is not None
        lib.which.restype = ctypes.c_int
        assert lib.which() == 1  # the file that was checked, not the one swapped in
    finally:
        native.library.cache_clear()


def test_a_symlinked_kernel_library_is_refused(tmp_path):
    from npu_console.engine.kernels.trust import load_trusted

    target = tmp_path / "real.so"
    target.write_bytes(b"\x7fELF")
    link = tmp_path / "link.so"
    link.symlink_to(target)
    with pytest.raises(OSError):
        load_trusted(link)


# ----------------------------------------------------------------------------- GGUF


@pytest.fixture
def tiny_gguf(tmp_path) -> Path:
    return write_gguf(tmp_path / "tiny.gguf")


def test_gguf_conversion_is_refused_from_the_header_when_memory_is_short(tiny_gguf,
                                                                         monkeypatch):
    from npu_console.engine.models import load_model
    from npu_console.engine.models.loader import ModelLoadError

    real = gguf.cached_header(tiny_gguf)
    huge = {**real, "num_parameters": 10**13}  # 40 TB of float32 weights
    monkeypatch.setattr(gguf, "cached_header", lambda path: huge)
    started = []
    monkeypatch.setattr(conv, "ensure_converted", lambda *a, **k: started.append(a))
    with pytest.raises(ModelLoadError) as refused:
        load_model(tiny_gguf)
    message = str(refused.value)
    assert "converting needs about" in message and "memory" in message
    assert "\n" not in message and not started


def test_the_gguf_child_has_a_timeout(tiny_gguf, monkeypatch, tmp_path):
    # a cache of its own: in the session's, another xdist worker's conversion in progress
    # would be a temporary folder this test did not leave
    monkeypatch.setenv("NPU_CONSOLE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv(conv.TIMEOUT_ENV, "0.2")
    with pytest.raises(conv.ConvertError, match="did not finish within 0.2 s"):
        conv.ensure_converted(tiny_gguf)
    assert conv.converted_folder(tiny_gguf) is None
    assert not [p for p in gguf.cache_root().iterdir() if p.name.endswith(".tmp")]


def test_the_gguf_child_has_an_address_space_limit(tiny_gguf, monkeypatch):
    monkeypatch.setenv(conv.AS_ENV, "0.25")  # far below what torch needs to start
    with pytest.raises(conv.ConvertError) as failed:
        conv.ensure_converted(tiny_gguf)
    assert conv.converted_folder(tiny_gguf) is None
    assert "cannot convert" in str(failed.value)


def test_the_conversion_cache_is_evicted_beyond_its_size_and_shown_in_doctor(monkeypatch,
                                                                            tmp_path):
    from npu_console.engine.doctor import check_gguf_cache

    # a cache of its own: the session's holds the models other tests converted
    monkeypatch.setenv("NPU_CONSOLE_CACHE", str(tmp_path / "cache"))
    root = gguf.cache_root()
    entries = []
    for i in range(4):
        entry = root / f"model{i}-key"
        entry.mkdir(parents=True)
        (entry / "model.safetensors").write_bytes(b"\0" * 1_000_000)
        (entry / conv.DONE).write_text("{}")
        os.utime(entry / conv.DONE, (1000 + i, 1000 + i))  # model0 used longest ago
        entries.append(entry)
    removed = conv.evict(limit=2_100_000, keep=entries[0])
    assert removed == [entries[1], entries[2]]
    assert entries[0].exists() and entries[3].exists()
    monkeypatch.setenv(conv.CACHE_ENV, "3")
    check = check_gguf_cache()
    assert "2 converted model(s)" in check.detail and "3 GiB" in check.detail
    assert conv.CACHE_ENV in check.detail


def test_the_conversion_cache_must_be_private(tiny_gguf, monkeypatch, tmp_path):
    # a cache of its own: this opens the folder to everyone for a moment
    monkeypatch.setenv("NPU_CONSOLE_CACHE", str(tmp_path / "cache"))
    root = gguf.cache_root()
    root.mkdir(parents=True, exist_ok=True)
    os.chmod(root, 0o777)
    assert gguf.cache_problem() is None and (root.stat().st_mode & 0o777) == 0o700
    # a finished entry that others can write is not loaded
    entry = gguf.entry_dir(tiny_gguf)
    entry.mkdir(parents=True)
    (entry / conv.DONE).write_text("{}")
    os.chmod(entry, 0o777)
    assert conv.converted_folder(tiny_gguf) is None
    if os.getuid() == 0:  # only root can hand the folder to another user here
        os.chown(root, 12345, 12345)
        try:
            assert "another user" in (gguf.cache_problem() or "")
            with pytest.raises(conv.ConvertError, match="cache is refused"):
                conv.ensure_converted(tiny_gguf)
        finally:
            os.chown(root, 0, 0)
