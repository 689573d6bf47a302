"""GGUF files: the header check, bad input in one line, the converted cache, and the real
SmolLM2-135M-Instruct answering through the CLI and the OpenAI-compatible server."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from support.cli import run_cli
from support.gguf import write_gguf

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def smollm_gguf(smollm2_gguf) -> Path:
    return smollm2_gguf


def _cli(*args, cache: Path | None = None, timeout: int = 600):
    return run_cli(*args, env={"NPU_CONSOLE_CACHE": str(cache)} if cache is not None else None,
                   timeout=timeout)


def _entries(cache: Path) -> list[str]:
    root = cache / "gguf"
    return sorted(p.name for p in root.iterdir()) if root.is_dir() else []


def test_header_check_reads_the_real_file(smollm_gguf):
    from npu_console.engine.models import estimate_memory, inspect_model_folder

    for path in (smollm_gguf, smollm_gguf.parent):  # the file, or a folder holding exactly one
        r = inspect_model_folder(path)
        assert r.ok, r.problems
        assert (r.source_format, r.architecture, r.model_type) == ("gguf", "LlamaForCausalLM",
                                                                   "llama")
        assert (r.num_layers, r.max_context, r.hidden_size) == (30, 8192, 576)
        assert (r.num_heads, r.num_kv_heads, r.head_dim, r.vocab_size) == (9, 3, 64, 49152)
        assert r.num_parameters == 134_515_008 and r.gguf_type == "Q4_1"
        assert r.has_chat_template and "GGUF Q4_1" in r.summary()
    est = estimate_memory(r, "float32", context=2048)
    assert est.weight_bytes == 4 * 134_515_008
    assert est.kv_bytes_per_token == 2 * 30 * 3 * 64 * 4


def test_a_folder_with_two_gguf_files_asks_to_choose(tmp_path):
    from npu_console.engine.models import inspect_model_folder

    write_gguf(tmp_path / "a.gguf")
    write_gguf(tmp_path / "b.gguf")
    r = inspect_model_folder(tmp_path)
    assert not r.ok and "holds 2 GGUF files (a.gguf, b.gguf)" in str(r.problems[0])


@pytest.mark.parametrize("kind,message", [
    ("truncated", "truncated"),
    ("magic", "not a GGUF file"),
    ("arch", "unsupported architecture 'rwkv6'"),
    ("notok", "no tokenizer"),
])
def test_bad_gguf_one_line_exit_1_no_cache_entry(smollm_gguf, tmp_path, kind, message):
    bad = tmp_path / f"{kind}.gguf"
    if kind == "truncated":
        with open(smollm_gguf, "rb") as src:
            bad.write_bytes(src.read(20_000_000))
    elif kind == "magic":
        with open(smollm_gguf, "rb") as src:
            bad.write_bytes(b"GGML" + src.read(4_000_000)[4:])
    else:
        write_gguf(bad, arch="rwkv6" if kind == "arch" else "llama", tokenizer=kind != "notok")
    cache = tmp_path / "cache"
    r = _cli("generate", "--model", bad, "--prompt", "hi", "--max-tokens", "2", cache=cache)
    assert r.returncode == 1, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert str(bad) in lines[0] and message in lines[0], lines[0]
    assert _entries(cache) == []


def test_cancelled_conversion_leaves_nothing(smollm_gguf, tmp_path, monkeypatch):
    from npu_console.engine.models import LoadCancelled, load_model

    monkeypatch.setenv("NPU_CONSOLE_CACHE", str(tmp_path))
    cancel = threading.Event()
    seen = []

    def progress(fraction, what):
        seen.append((fraction, what))
        if what == "reading the tokenizer":
            # the child's first line, once torch and transformers are imported: killed there,
            # mid-conversion (waiting for the weights' stage adds ~30 s of tokenizer building)
            cancel.set()

    with pytest.raises(LoadCancelled):
        load_model(smollm_gguf, progress=progress, cancel=cancel)
    assert any(w == "reading the tokenizer" for _, w in seen)
    assert [n for n in _entries(tmp_path) if not n.endswith(".header.json")] == []


@pytest.mark.slow
def test_generate_from_the_gguf_says_paris_then_loads_from_the_cache(smollm_gguf, tmp_path):
    cache = Path(os.environ["NPU_CONSOLE_CACHE"])  # the session's: the server test reuses it
    args = ("generate", "--model", smollm_gguf, "--prompt", "The capital of France is",
            "--max-tokens", "8", "--temperature", "0")
    first = _cli(*args, cache=cache)
    assert first.returncode == 0, first.stderr
    assert "Paris" in first.stdout
    # this file's entry (other tests, and other xdist workers, share the session's cache)
    entry = [cache / "gguf" / n for n in _entries(cache)
             if n.startswith(smollm_gguf.stem)
             and not n.endswith((".json", ".tokenizer", ".config"))]
    assert len(entry) == 1 and (entry[0] / "meta.json").is_file()
    meta = json.loads((entry[0] / "meta.json").read_text())
    assert meta["saved_dtype"] == "float32" and meta["header"]["quant_type"] == "Q4_1"
    cfg = json.loads((entry[0] / "config.json").read_text())
    assert cfg["architectures"] == ["LlamaForCausalLM"] and "quantization_config" not in cfg
    second = _cli(*args, cache=cache)
    assert second.returncode == 0 and second.stdout == first.stdout
    # the key follows the file: a copy with its mtime is the same entry, a touched file a new one
    from npu_console.engine.models.gguf import cache_key

    copy = tmp_path / smollm_gguf.name
    shutil.copy2(smollm_gguf, copy)
    assert cache_key(copy) == cache_key(smollm_gguf)
    st = copy.stat()
    os.utime(copy, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    assert cache_key(copy) != cache_key(smollm_gguf)


@pytest.mark.slow
def test_serve_the_gguf_and_the_openai_client_gets_paris(smollm_gguf):
    import re

    import openai

    proc = subprocess.Popen([sys.executable, "-m", "npu_console.cli.main", "serve", "--model",
                             str(smollm_gguf), "--port", "0", "--threads", "2", "--log-level",
                             "warning"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True, cwd=ROOT)
    try:
        url, seen = None, []
        for line in proc.stderr:
            seen.append(line)
            m = re.search(r"at (http://\S+)/v1", line)
            if m:
                url = m.group(1)
                break
        assert url, "".join(seen)[-2000:]
        with openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0,
                           timeout=120) as client:
            [model] = client.models.list().data
            # the real context (8,192) when memory allows, never the old fixed 2,048 cap
            assert model.id == smollm_gguf.stem and model.model_extra["max_model_len"] > 2048
            chat = client.chat.completions.create(
                model=model.id, temperature=0, max_tokens=32,
                messages=[{"role": "user", "content": "What is the capital of France?"}])
        choice = chat.choices[0]
        assert "Paris" in choice.message.content, choice.message.content
        assert choice.finish_reason == "stop"
        assert "<|im_end|>" not in choice.message.content
    finally:
        proc.terminate()
        proc.communicate(timeout=60)


@pytest.mark.slow
def test_quantize_takes_the_gguf_and_its_export_keeps_the_tokenizer(smollm_gguf, tmp_path):
    out = tmp_path / "smol-w8a16"
    # a small calibration from the shipped text: what is checked here is the GGUF going in and
    # the tokenizer coming out (the recipes' quality has its own lane)
    q = _cli("quantize", "--model", smollm_gguf, "--method", "w8a16", "--out", out, "--json",
             "--recipe", "plain", "--calib", ROOT / "assets" / "calib" / "calibration.txt",
             "--samples", "8", "--seq-len", "64")
    assert q.returncode == 0, q.stderr
    assert {"tokenizer.json", "tokenizer_config.json", "chat_template.jinja"} <= {
        p.name for p in out.iterdir()}
    g = _cli("generate", "--model", out, "--prompt", "The capital of France is",
             "--max-tokens", "8", "--temperature", "0")
    assert g.returncode == 0 and "Paris" in g.stdout, g.stderr
