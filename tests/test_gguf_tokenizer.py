"""A GGUF's tokenizer is built from the file once and read back from the cache after that
(engine.models.gguf_tokenizer): the INT8 load and the float conversion both use the kept copy,
which tokenizes exactly as the one built from the file; a changed file gets a new one."""

from __future__ import annotations

import os

import pytest
from support.gguf import count_gguf_reads, write_model_gguf
from support.models import tiny


@pytest.fixture()
def builds(monkeypatch):
    """Counts the tokenizers transformers builds from a GGUF file (the slow path)."""
    from transformers import AutoTokenizer

    return count_gguf_reads(monkeypatch, AutoTokenizer)


def test_the_tokenizer_is_built_once_and_read_back_the_same(tmp_path, monkeypatch, builds):
    from npu_console.engine.models import gguf
    from npu_console.engine.models.gguf_tokenizer import load_tokenizer

    monkeypatch.setenv("NPU_CONSOLE_CACHE", str(tmp_path / "cache"))
    path = write_model_gguf(tiny("llama").model, tmp_path / "m.gguf", "Q8_0")
    first = load_tokenizer(path)
    assert builds == ["m.gguf"] and (gguf.tokenizer_dir(path) / gguf.BUILT_MARKER).is_file()
    again = load_tokenizer(path)
    assert builds == ["m.gguf"]  # read back, not built
    # (the tiny file's vocabulary has no byte tokens: compare the table and the decoding)
    assert again.get_vocab() == first.get_vocab() and len(first.get_vocab()) > 200
    assert again.decode([5, 17, 99, 3]) == first.decode([5, 17, 99, 3]) != ""
    assert (again.bos_token_id, again.eos_token_id) == (first.bos_token_id, first.eos_token_id)
    # the key follows the file: touched, it is a new file and its tokenizer is built again
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    load_tokenizer(path)
    assert builds == ["m.gguf", "m.gguf"]


def test_the_int8_load_and_the_float_conversion_share_it(tmp_path, monkeypatch, builds):
    from npu_console.engine.models import gguf, load_model

    monkeypatch.setenv("NPU_CONSOLE_CACHE", str(tmp_path / "cache"))
    path = write_model_gguf(tiny("qwen2").model, tmp_path / "q.gguf", "Q8_0")
    int8 = load_model(path, load_as="int8")
    assert builds == ["q.gguf"]
    # the conversion child reads the kept copy (its own process: its builds are not counted
    # here, so the folder it wrote is compared instead)
    floated = load_model(path)
    assert (gguf.entry_dir(path) / "tokenizer_config.json").is_file()
    assert floated.tokenizer.get_vocab() == int8.tokenizer.get_vocab()
    assert floated.tokenizer.decode([1, 2, 40, 7]) == int8.tokenizer.decode([1, 2, 40, 7])
    load_model(path, load_as="int8")  # now from the converted folder or the kept copy
    assert builds == ["q.gguf"]


def test_a_kept_tokenizer_others_can_write_is_built_again(tmp_path, monkeypatch, builds):
    from npu_console.engine.models import gguf
    from npu_console.engine.models.gguf_tokenizer import load_tokenizer

    monkeypatch.setenv("NPU_CONSOLE_CACHE", str(tmp_path / "cache"))
    path = write_model_gguf(tiny("llama").model, tmp_path / "m.gguf", "Q8_0")
    load_tokenizer(path)
    kept = gguf.tokenizer_dir(path)
    kept.chmod(0o777)  # someone else could have swapped its files: not read
    load_tokenizer(path)
    assert builds == ["m.gguf", "m.gguf"]
    assert kept.stat().st_mode & 0o022 == 0  # replaced by a private one
    load_tokenizer(path)
    assert builds == ["m.gguf", "m.gguf"]
