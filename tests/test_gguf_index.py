"""engine.models.gguf_index reads a GGUF's metadata and tensor table as llama.cpp's own `gguf`
reader does (every value type, every tensor's place and layout), without its per-element cost,
and says when a file is cut short; engine.models.gguf_config keeps transformers' config of a
GGUF so that later INT8 loads do not parse the file's metadata again."""

from __future__ import annotations

import os

import numpy as np
import pytest
from support.gguf import count_gguf_reads, write_model_gguf
from support.models import tiny


def _every_kind_of_value(path):
    """A file with each GGUF value type, nested arrays and several tensor types."""
    import gguf

    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(2)
    w.add_uint8("t.u8", 200)
    w.add_int8("t.i8", -7)
    w.add_uint16("t.u16", 60000)
    w.add_int16("t.i16", -30000)
    w.add_int32("t.i32", -123456)
    w.add_float32("t.f32", 0.25)
    w.add_uint64("t.u64", 2**40 + 3)
    w.add_int64("t.i64", -(2**40))
    w.add_float64("t.f64", 1e-300)
    w.add_bool("t.bool", True)
    w.add_string("t.str", "héllo ✓")
    w.add_array("t.ints", [3, 1, 4, 1, 5])
    w.add_array("t.floats", [0.5, -2.0])
    w.add_array("t.strs", ["a", "", "ü" * 40])
    w.add_array("t.nested", [[1, 2], [3]])
    rng = np.random.default_rng(0)
    w.add_tensor("f32.weight", rng.standard_normal((6, 32)).astype(np.float32))
    w.add_tensor("f16.weight", rng.standard_normal((4, 64)).astype(np.float16))
    q8 = gguf.quants.quantize(rng.standard_normal((3, 64)).astype(np.float32),
                              gguf.GGMLQuantizationType.Q8_0)
    w.add_tensor("q8.weight", q8, raw_shape=q8.shape,
                 raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    w.add_tensor("norm.weight", rng.standard_normal(32).astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def _plain(value):
    return value.tolist() if isinstance(value, np.ndarray) else value


def test_the_index_reads_what_the_gguf_package_reads(tmp_path):
    import gguf
    from npu_console.engine.models.gguf_index import read_index
    from npu_console.engine.quant.gguf_load import _Tensors

    path = _every_kind_of_value(tmp_path / "all.gguf")
    ref = gguf.GGUFReader(str(path))
    index = read_index(path)
    assert list(index.fields) == [k for k in ref.fields if not k.startswith("GGUF.")]
    for key, field in ref.fields.items():
        if not key.startswith("GGUF.") and key != "t.nested":  # which gguf's reader flattens
            assert _plain(index.fields[key]) == pytest.approx(field.contents()), key
    assert index.fields["t.str"] == "héllo ✓" and index.fields["t.nested"] == [[1, 2], [3]]
    assert [t.name for t in index.tensors] == [t.name for t in ref.tensors]
    src = _Tensors(path)
    try:
        for mine, theirs in zip(index.tensors, ref.tensors, strict=True):
            assert mine.shape == tuple(int(d) for d in theirs.shape)
            assert mine.tensor_type == theirs.tensor_type
            assert (mine.data_offset, mine.n_bytes, mine.n_elements) == (
                int(theirs.data_offset), int(theirs.n_bytes), int(theirs.n_elements))
            assert mine.numpy_layout() == (theirs.data.dtype, tuple(theirs.data.shape))
            expected = gguf.quants.dequantize(np.asarray(theirs.data), theirs.tensor_type)
            np.testing.assert_array_equal(src.floats(mine), expected)
    finally:
        src.close()


def test_a_cut_file_is_refused_with_where_it_ends(tmp_path):
    from npu_console.engine.models.gguf import GgufError, read_header
    from npu_console.engine.models.gguf_index import GgufIndexError, read_index

    whole = _every_kind_of_value(tmp_path / "all.gguf").read_bytes()
    header_end = whole.index(b"norm.weight") + 40  # inside the tensor table's last record
    for cut in (3, 23, 40, 90, 200, header_end - 30):
        part = tmp_path / f"cut{cut}.gguf"
        part.write_bytes(whole[:cut])
        with pytest.raises(GgufIndexError):
            read_index(part)
        with pytest.raises(GgufError, match="(truncated|not a GGUF)"):
            read_header(part)
    # counts the rest of the file cannot hold are refused before anything is allocated
    huge = tmp_path / "huge.gguf"
    huge.write_bytes(whole[:8] + (2**40).to_bytes(8, "little") + whole[16:])
    with pytest.raises(GgufIndexError, match="cannot fit"):
        read_index(huge)
    bad = tmp_path / "v9.gguf"
    bad.write_bytes(whole[:4] + (9).to_bytes(4, "little") + whole[8:])
    with pytest.raises(GgufIndexError, match="version 9"):
        read_index(bad)


def test_the_config_is_read_from_the_file_once(tmp_path, monkeypatch):
    from npu_console.engine.models import gguf
    from npu_console.engine.models.gguf_config import load_config
    from transformers import AutoConfig

    monkeypatch.setenv("NPU_CONSOLE_CACHE", str(tmp_path / "cache"))
    parses = count_gguf_reads(monkeypatch, AutoConfig)
    path = write_model_gguf(tiny("gemma3").model, tmp_path / "g.gguf", "Q8_0")
    first = load_config(path)
    assert parses == ["g.gguf"] and (gguf.config_dir(path) / gguf.BUILT_MARKER).is_file()
    again = load_config(path)
    assert parses == ["g.gguf"]  # read back, not parsed
    assert again.to_dict() == first.to_dict()
    assert again.model_type == "gemma3_text" and again.sliding_window == first.sliding_window
    st = path.stat()  # a changed file is a new file
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    load_config(path)
    assert parses == ["g.gguf", "g.gguf"]
    gguf.config_dir(path).chmod(0o777)  # a kept config others could rewrite is not trusted
    load_config(path)
    assert len(parses) == 3
