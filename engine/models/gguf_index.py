"""A GGUF file's metadata and tensor table, read in well under a second.

The `gguf` package's GGUFReader makes a numpy view per array element, so a 262,144-token
vocabulary (Gemma 3) costs it 9 to 17 s on a 2-core machine, and a Q8_0 load read the header
twice that way. The format itself is simple (GGUF v2/v3: magic, version, counts, typed
key-values, then one record per tensor; llama.cpp's gguf.h documents it), so this reads it
with struct and one numpy call per numeric array. The enums and block sizes still come from
the `gguf` package, so the two never disagree on what a type id means.

Nothing here reads tensor data: records say where each tensor lies; the callers read it.
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32

# GGUF value type id -> struct format of a scalar (8 = string, 9 = array: read apart)
_SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?",
           10: "<Q", 11: "<q", 12: "<d"}
_NUMPY = {0: np.uint8, 1: np.int8, 2: np.uint16, 3: np.int16, 4: np.uint32, 5: np.int32,
          6: np.float32, 7: np.bool_, 10: np.uint64, 11: np.int64, 12: np.float64}
_STRING, _ARRAY = 8, 9


class GgufIndexError(ValueError):
    """The file is not a GGUF this reader understands, or is cut short."""


@dataclass(frozen=True)
class GgufTensor:
    name: str
    shape: tuple[int, ...]  # GGUF order: the fastest-varying dimension first
    tensor_type: Any  # gguf.GGMLQuantizationType
    data_offset: int  # from the start of the file
    n_elements: int
    n_bytes: int

    def numpy_layout(self) -> tuple[Any, tuple[int, ...]]:
        """(dtype, shape) of the raw bytes as gguf.quants.dequantize takes them: float types
        as their own dtype in row-major (reversed) shape, block types as bytes per row."""
        from gguf.quants import quant_shape_to_byte_shape

        dims = tuple(reversed(self.shape))
        name = self.tensor_type.name
        if name in ("F32", "F16", "F64", "I8", "I16", "I32", "I64"):
            return np.dtype(name.replace("F", "float").replace("I", "int").lower()), dims
        return np.dtype(np.uint8), tuple(quant_shape_to_byte_shape(dims, self.tensor_type))


@dataclass(frozen=True)
class GgufIndex:
    version: int
    fields: dict[str, Any]  # numeric arrays as numpy arrays, string arrays as lists
    tensors: list[GgufTensor]
    file_bytes: int

    def field(self, key: str, default: Any = None) -> Any:
        return self.fields.get(key, default)


class _Cursor:
    def __init__(self, buf: Any):
        self.buf, self.pos = buf, 0

    def take(self, fmt: str) -> Any:
        try:
            (value,) = struct.unpack_from(fmt, self.buf, self.pos)
        except struct.error:
            raise GgufIndexError(f"cut short at byte {self.pos:,}") from None
        self.pos += struct.calcsize(fmt)
        return value

    def string(self) -> str:
        n = self.take("<Q")
        end = self.pos + n
        if end > len(self.buf):
            raise GgufIndexError(f"a {n:,}-byte string at byte {self.pos:,} runs past the end")
        raw = self.buf[self.pos:end]
        self.pos = end
        return raw.decode("utf-8", errors="replace")

    def value(self, vtype: int) -> Any:
        if vtype == _STRING:
            return self.string()
        if vtype == _ARRAY:
            return self.array()
        fmt = _SCALAR.get(vtype)
        if fmt is None:
            raise GgufIndexError(f"unknown value type {vtype} at byte {self.pos:,}")
        return self.take(fmt)

    def room_for(self, count: int, min_bytes: int, what: str) -> None:
        """Refuse a count the rest of the file cannot hold: a hostile header must not make
        the reader allocate for billions of entries before it reaches the file's end."""
        if count * min_bytes > len(self.buf) - self.pos:
            raise GgufIndexError(f"{count:,} {what} at byte {self.pos:,} cannot fit in the "
                                 "rest of the file")

    def array(self) -> Any:
        etype, count = self.take("<I"), self.take("<Q")
        self.room_for(count, 8 if etype == _STRING else 1, "array values")
        if etype in _NUMPY:
            dtype = np.dtype(_NUMPY[etype])
            end = self.pos + count * dtype.itemsize
            if end > len(self.buf):
                raise GgufIndexError(f"an array of {count:,} values at byte {self.pos:,} "
                                     "runs past the end")
            arr = np.frombuffer(self.buf, dtype=dtype, count=count, offset=self.pos).copy()
            self.pos = end
            return arr
        if etype == _STRING:
            return [self.string() for _ in range(count)]
        items = (self.value(etype) for _ in range(count))  # arrays of arrays: plain lists
        return [v.tolist() if isinstance(v, np.ndarray) else v for v in items]


def read_index(path: str | Path) -> GgufIndex:
    """The metadata and tensor table of GGUF `path`; GgufIndexError for a bad or cut file
    (OSError when it cannot be opened)."""
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

    path = Path(path)
    with open(path, "rb") as f:
        size = f.seek(0, 2)
        if size < 24:
            raise GgufIndexError(f"{size} bytes: too short for a GGUF header")
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            cur = _Cursor(buf)
            if bytes(buf[:4]) != MAGIC:
                raise GgufIndexError(f"not a GGUF file (magic {bytes(buf[:4])!r})")
            cur.pos = 4
            version = cur.take("<I")
            if version not in (2, 3):
                raise GgufIndexError(f"GGUF version {version} (this reader knows 2 and 3)")
            n_tensors, n_kv = cur.take("<Q"), cur.take("<Q")
            cur.room_for(n_kv, 12, "metadata values")  # a key's length and a type at least
            cur.room_for(n_tensors, 24, "tensor records")  # name length, dims, type, offset
            fields: dict[str, Any] = {}
            for _ in range(n_kv):
                key = cur.string()
                fields[key] = cur.value(cur.take("<I"))
            records = []
            for _ in range(n_tensors):
                name = cur.string()
                dims = tuple(cur.take("<Q") for _ in range(cur.take("<I")))
                type_id, offset = cur.take("<I"), cur.take("<Q")
                records.append((name, dims, type_id, offset))
            header_end = cur.pos
    align = int(fields.get("general.alignment", DEFAULT_ALIGNMENT)) or DEFAULT_ALIGNMENT
    data_start = -(-header_end // align) * align
    tensors = []
    for name, dims, type_id, offset in records:
        try:
            qtype = GGMLQuantizationType(type_id)
        except ValueError:
            raise GgufIndexError(f"tensor {name}: unknown type id {type_id}") from None
        block, type_size = GGML_QUANT_SIZES[qtype]
        n = int(np.prod(dims, dtype=np.int64)) if dims else 1
        tensors.append(GgufTensor(name=name, shape=dims, tensor_type=qtype,
                                  data_offset=data_start + offset, n_elements=n,
                                  n_bytes=n * type_size // block))
    return GgufIndex(version=version, fields=fields, tensors=tensors, file_bytes=size)
