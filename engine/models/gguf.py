"""GGUF files (llama.cpp, LM Studio, Ollama): find one, and check it from its header alone.

The header (key-value metadata and the tensor table) says everything the folder check and the
memory estimate need: architecture, layers, context, parameter count, quantization type, and
whether a tokenizer is embedded. It is read by gguf_index (never the tensors). Weights are
converted by transformers' GGUF support (gguf_convert.py).

Its summary is also cached beside the converted weights, keyed like them (cache_key).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import threading
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from .. import paths
from .folder import ModelFolderReport, Problem

MAGIC = b"GGUF"
# The cache key hashes the file's size, mtime and its first bytes (the metadata of any small
# model, and the start of it for large ones): cheap, and a changed file gets a new key.
_KEY_BYTES = 4 * 2**20
# bumped when what the converter writes changes, so old cache entries are not reused
FORMAT_VERSION = 1


class GgufError(Exception):
    """One line naming the file and the problem."""


def is_gguf(path: str | Path) -> bool:
    return Path(path).suffix.lower() == ".gguf"


def gguf_file_of(path: str | Path) -> Path | None:
    """The GGUF behind `path`: the file itself, or the one .gguf in a folder that has no
    config.json (a Hugging Face folder is loaded as such even if a .gguf lies beside it).
    None when `path` is not a GGUF model; GgufError when a folder holds several."""
    p = Path(path).expanduser()
    if p.is_file() or is_gguf(p):
        return p if is_gguf(p) else None
    if not p.is_dir() or (p / "config.json").exists():
        return None
    found = sorted(f for f in p.iterdir() if is_gguf(f) and f.is_file())
    if len(found) > 1:
        names = ", ".join(f.name for f in found[:4])
        raise GgufError(f"{p}: holds {len(found)} GGUF files ({names}); choose one of them")
    return found[0] if found else None


def cache_key(path: Path) -> str:
    st = path.stat()
    h = hashlib.sha256(f"v{FORMAT_VERSION}:{st.st_size}:{st.st_mtime_ns}:".encode())
    with open(path, "rb") as f:
        h.update(f.read(_KEY_BYTES))
    return h.hexdigest()[:20]


def cache_root() -> Path:
    return paths.cache_dir() / "gguf"


def entry_dir(path: Path) -> Path:
    """Where the converted Hugging Face folder of this GGUF lives (or will)."""
    return cache_root() / f"{path.stem}-{cache_key(path)}"


BUILT_MARKER = "built.done"  # written last into a kept tokenizer or config folder


def tokenizer_dir(path: Path) -> Path:
    """Where this GGUF's built tokenizer is kept (engine.models.gguf_tokenizer)."""
    return cache_root() / f"{path.stem}-{cache_key(path)}.tokenizer"


def config_dir(path: Path) -> Path:
    """Where this GGUF's transformers config is kept (engine.models.gguf_config)."""
    return cache_root() / f"{path.stem}-{cache_key(path)}.config"


def kept_folder(folder: Path) -> Path | None:
    """A cache folder an earlier load finished (its done-marker written), if it may be read."""
    if (folder / BUILT_MARKER).is_file() and not cache_problem() and not entry_untrusted(folder):
        return folder
    return None


def keep(final: Path, write: Callable[[Path], None], source: Path) -> None:
    """Write a cache folder whole or not at all: `write` fills a temporary folder, which then
    takes `final`'s name with a done-marker naming the GGUF it was built from."""
    if cache_problem():  # a cache this user does not own alone: build each time, keep nothing
        return
    tmp = final.with_name(f".{final.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        write(tmp)
        (tmp / BUILT_MARKER).write_text(str(source), encoding="utf-8")
        shutil.rmtree(final, ignore_errors=True)  # an untrusted or half-made one
        with contextlib.suppress(OSError):  # another process made it meanwhile: theirs stands
            os.rename(tmp, final)
    except OSError:
        pass  # a read-only or full cache: the result still works, it is just not kept
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def cache_problem() -> str | None:
    """Why the conversion cache must not be used: it holds folders whose weights get loaded,
    so, like the kernel cache, it must belong to this user and be private (0700)."""
    from ..kernels.trust import private_dir

    return private_dir(cache_root())


def entry_untrusted(entry: Path) -> str | None:
    """Why one cache entry must not be read (another user's, or writable by others), or None."""
    from ..kernels.trust import untrusted

    return untrusted(entry, folder=True)


def kept_tokenizer(path: Path) -> Path | None:
    """This GGUF's tokenizer folder as an earlier load built and kept it, if it may be read."""
    return kept_folder(tokenizer_dir(path))


def _causal_lm_class(model_type: str) -> str | None:
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    return MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.get(model_type)


def supported_architectures() -> list[str]:
    """GGUF architectures the installed transformers converts (its own table)."""
    from transformers.integrations.ggml import GGUF_CONFIG_MAPPING

    return sorted(a for a in GGUF_CONFIG_MAPPING if a not in ("general", "tokenizer")
                  and _causal_lm_class(a))


def read_header(path: Path) -> dict:
    """The header summary as plain data; GgufError for a file that is not a readable GGUF."""
    from .gguf_index import GgufIndexError, read_index

    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            magic = f.read(4)
    except OSError as exc:
        raise GgufError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if magic != MAGIC:
        raise GgufError(f"{path}: not a GGUF file (magic {magic!r}, expected {MAGIC!r})")
    try:
        index = read_index(path)
    except (GgufIndexError, OSError) as exc:
        raise GgufError(f"{path}: truncated or corrupt ({size:,} bytes): the header or tensor "
                        f"table does not fit the file ({exc})") from None
    end = max((t.data_offset + t.n_bytes for t in index.tensors), default=0)
    if end > size:
        raise GgufError(f"{path}: truncated: its tensors need {end:,} bytes, the file has "
                        f"{size:,}")
    arch = str(index.field("general.architecture") or "")

    def arch_field(name: str):
        return index.field(f"{arch}.{name}")

    types = Counter(t.tensor_type.name for t in index.tensors if len(t.shape) >= 2)
    heads = _widest(arch_field("attention.head_count"))
    kv_heads = _widest(arch_field("attention.head_count_kv"))
    hidden = arch_field("embedding_length")
    tokens = index.field("tokenizer.ggml.tokens")
    return {
        "format_version": FORMAT_VERSION,
        "architecture": arch,
        "name": index.field("general.name"),
        "num_layers": arch_field("block_count"),
        "context": arch_field("context_length"),
        "hidden_size": hidden,
        "num_heads": heads,
        "num_kv_heads": kv_heads or heads,
        "head_dim": arch_field("attention.key_length") or (
            hidden // heads if hidden and heads else None),
        "vocab_size": arch_field("vocab_size") or (len(tokens) if tokens is not None else None),
        "num_parameters": sum(t.n_elements for t in index.tensors),
        "tensor_types": dict(types),
        "quant_type": types.most_common(1)[0][0] if types else None,
        "tokenizer": index.field("tokenizer.ggml.model") if tokens is not None else None,
        "chat_template": bool(index.field("tokenizer.chat_template")),
        "file_bytes": size,
        **_int8_plan(index.tensors),
    }


def _widest(value):
    """A head count, or the largest of per-layer head counts (an array in some files)."""
    if value is None or isinstance(value, int):
        return value
    return max((int(v) for v in value), default=None)


def _int8_plan(tensors) -> dict:
    """What loading as INT8 keeps (engine.quant.gguf_load): every matrix as int8 plus an fp32
    scale per 32 values (per row where a row is not a multiple of 32), except a token table
    or output head that is not Q8_0 in the file, which stays float, as do norms and biases.
    A tied head is the token table itself, counted once. int8_half_scales: the scales of the
    linear layers with groups of 32 (a tied table is the head), which the CPU kernels' packed
    copy keeps in fp16 (memory.estimate_memory)."""
    int8_bytes = float_elems = half_scales = 0
    tied = not any(t.name == "output.weight" for t in tensors)
    for t in tensors:
        k, n = int(t.shape[0]), int(t.n_elements) // max(1, int(t.shape[0]))
        table = t.name in ("token_embd.weight", "output.weight")
        if len(t.shape) < 2 or (table and t.tensor_type.name != "Q8_0"):
            float_elems += int(t.n_elements)
        else:
            int8_bytes += n * k + 4 * (n * k // 32 if k % 32 == 0 else n)
            if k % 32 == 0 and (t.name != "token_embd.weight" or tied):
                half_scales += n * k // 32
    return {"int8_bytes": int8_bytes, "int8_float_elems": float_elems,
            "int8_half_scales": half_scales}


def _memo(path: Path) -> Path:
    return cache_root() / f"{path.stem}-{cache_key(path)}.header.json"


def cached_header(path: Path) -> dict:
    """read_header, or its remembered copy (a second check takes milliseconds)."""
    try:
        data = json.loads(_memo(path).read_text(encoding="utf-8"))
        if data.get("format_version") == FORMAT_VERSION and "int8_half_scales" in data:
            return data
    except (OSError, ValueError):
        pass
    return read_header(path)


def remember_header(path: Path, data: dict) -> None:
    """Keep the summary of a loadable file (never of a bad one: it leaves no cache entry)."""
    memo = _memo(path)
    try:
        memo.parent.mkdir(parents=True, exist_ok=True)
        tmp = memo.with_name(memo.name + f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data), encoding="utf-8")
        os.replace(tmp, memo)
    except OSError:
        pass  # a read-only cache only costs time


def inspect_path(root: Path) -> ModelFolderReport | None:
    """The report of a GGUF file (or of the one GGUF a folder holds), None for anything else
    (engine.models.formats: what the folder check calls)."""
    try:
        gguf = gguf_file_of(root)
    except GgufError as exc:
        report = ModelFolderReport(path=root)
        report.problems.append(Problem(".", str(exc).split(": ", 1)[-1]))
        return report
    return None if gguf is None else inspect_gguf(gguf)


def inspect_gguf(path: str | Path) -> ModelFolderReport:
    """A folder report for a GGUF file: never raises for a bad file (problems are listed)."""
    p = Path(path).expanduser()
    report = ModelFolderReport(path=p, source_format="gguf")
    rel = p.name
    if not p.is_file():
        report.problems.append(Problem(".", "no such file"))
        return report
    try:
        h = cached_header(p)
    except GgufError as exc:
        report.problems.append(Problem(".", str(exc).split(": ", 1)[-1]))
        return report
    arch = h["architecture"]
    report.model_type = arch or None
    report.architecture = _causal_lm_class(arch) if arch else None
    report.num_layers, report.max_context = h["num_layers"], h["context"]
    report.hidden_size, report.num_heads = h["hidden_size"], h["num_heads"]
    report.num_kv_heads, report.head_dim = h["num_kv_heads"], h["head_dim"]
    report.vocab_size, report.num_parameters = h["vocab_size"], h["num_parameters"]
    report.checkpoint_bytes = h["file_bytes"]
    report.checkpoint_dtype = h["quant_type"]
    report.gguf_type = h["quant_type"]
    report.int8_bytes, report.int8_float_elems = h["int8_bytes"], h["int8_float_elems"]
    report.int8_half_scales = h["int8_half_scales"]
    report.weight_files = [rel]
    report.has_chat_template = h["chat_template"]
    if arch not in supported_architectures():
        from transformers import __version__

        report.problems.append(Problem(".", (
            f"unsupported architecture {arch!r}: transformers {__version__} cannot load it from "
            f"GGUF (it loads {', '.join(supported_architectures())})")))
    if not h["tokenizer"]:
        report.problems.append(Problem(".", "no tokenizer: the file's metadata has no "
                                            "tokenizer.ggml.tokens (re-export it with one)"))
    else:
        report.tokenizer_files = [rel]
    if not report.has_chat_template:
        report.problems.append(Problem(
            rel, "no chat template: chat requests will use a plain transcript", fatal=False))
    if report.ok:
        remember_header(p, h)
    return report
