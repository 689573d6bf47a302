"""Inspect a Hugging Face model folder without loading it: every problem in plain words.

A report lists each problem with the file it concerns ("model.safetensors: truncated: header
promises 1,044,992 bytes, file has 512,000"), plus what the UI shows before loading (architecture,
size, parameters, context, chat template). Nothing here imports torch, so the GUI can call it
on its own thread in milliseconds.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from pathlib import Path

# Architectures our batched runner implements (engine.runtime.families' modules, which a test
# holds this set to: this module may import neither torch nor the runtime); others load
# through the generic fallback, one sequence at a time.
BATCHED_ARCHITECTURES = {
    "LlamaForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM", "MistralForCausalLM",
    "Gemma2ForCausalLM", "Gemma3ForCausalLM", "Phi3ForCausalLM", "Qwen2MoeForCausalLM",
    "Qwen3MoeForCausalLM",
}

_DTYPE_BYTES = {
    "F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1,
    "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1,
}
_SAFETENSORS_NAME = {"F32": "float32", "F16": "float16", "BF16": "bfloat16", "I8": "int8"}


@dataclass(frozen=True)
class Problem:
    file: str  # the file (or folder) the problem concerns, relative to the model folder
    message: str
    fatal: bool = True

    def __str__(self) -> str:
        return self.message if self.file == "." else f"{self.file}: {self.message}"


@dataclass
class ModelFolderReport:
    path: Path
    problems: list[Problem] = field(default_factory=list)
    architecture: str | None = None
    model_type: str | None = None
    hidden_size: int | None = None
    num_layers: int | None = None
    num_heads: int | None = None
    num_kv_heads: int | None = None
    head_dim: int | None = None
    vocab_size: int | None = None
    max_context: int | None = None
    num_parameters: int | None = None
    checkpoint_bytes: int = 0
    checkpoint_dtype: str | None = None
    weight_files: list[str] = field(default_factory=list)
    tokenizer_files: list[str] = field(default_factory=list)
    has_chat_template: bool = False
    quantization: str | None = None  # e.g. "compressed-tensors", "msmodelslim", "npu-console"
    source_format: str = "hf"  # "hf" (a Hugging Face folder) or "gguf" (one GGUF file)
    gguf_type: str | None = None  # the GGUF's main tensor type, e.g. "Q4_1", "Q8_0", "F16"
    # a GGUF loaded as INT8: bytes of its int8 matrices and scales, and the values that stay
    # float (norms, a non-Q8_0 token table); None for a Hugging Face folder
    int8_bytes: int | None = None
    int8_float_elems: int = 0
    int8_half_scales: int = 0  # of those scales, the ones served as fp16 (memory.py)

    @property
    def ok(self) -> bool:
        return not any(p.fatal for p in self.problems)

    @property
    def warnings(self) -> list[Problem]:
        return [p for p in self.problems if not p.fatal]

    @property
    def batched(self) -> bool:
        return self.architecture in BATCHED_ARCHITECTURES

    @property
    def unbatched_reason(self) -> str:
        """"" for a batched architecture, else what the engine will say of it."""
        if self.batched:
            return ""
        return f"runs unbatched: no native support for {self.architecture or 'this architecture'}"

    def summary(self) -> str:
        """One line for lists and the status bar."""
        parts = [self.architecture or "unknown architecture"]
        if self.num_parameters:
            parts.append(f"{self.num_parameters / 1e6:,.1f}M params")
        if self.num_layers:
            parts.append(f"{self.num_layers} layers")
        if self.max_context:
            parts.append(f"ctx {self.max_context}")
        if self.quantization:
            parts.append(self.quantization)
        if self.source_format == "gguf":
            parts.append(f"GGUF {self.gguf_type}" if self.gguf_type else "GGUF")
        return ", ".join(parts)


class ModelFolderError(Exception):
    """A folder that cannot be loaded; str() is one line naming the first file and problem."""

    def __init__(self, report: ModelFolderReport):
        self.report = report
        fatal = [p for p in report.problems if p.fatal]
        first = str(fatal[0]) if fatal else "unknown problem"
        more = f" (and {len(fatal) - 1} more problem(s))" if len(fatal) > 1 else ""
        super().__init__(f"{report.path}: {first}{more}")


def _read_json(path: Path, report: ModelFolderReport, rel: str) -> dict | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        report.problems.append(Problem(rel, "is not UTF-8 text"))
        return None
    except json.JSONDecodeError as exc:
        report.problems.append(Problem(rel, f"is not valid JSON (line {exc.lineno}: {exc.msg})"))
        return None
    if not isinstance(data, dict):
        report.problems.append(Problem(rel, "must hold a JSON object"))
        return None
    return data


def read_safetensors_header(path: Path) -> tuple[dict, int]:
    """Return (header, data_start) of a safetensors file; ValueError with a plain reason if broken."""
    size = path.stat().st_size
    if size < 8:
        raise ValueError(f"truncated: {size} bytes, not even a header")
    with path.open("rb") as fh:
        (n,) = struct.unpack("<Q", fh.read(8))
        if n > 100_000_000:
            raise ValueError(f"corrupt: implausible header length {n:,}")
        if n > size - 8:
            raise ValueError(f"truncated: the header alone needs {n + 8:,} bytes, file has {size:,}")
        raw = fh.read(n)
    try:
        header = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise ValueError("corrupt: the header is not valid JSON") from None
    if not isinstance(header, dict):
        raise ValueError("corrupt: the header is not a JSON object")  # noqa: TRY004 - a file problem
    return header, 8 + n


def _check_safetensors(path: Path, rel: str, report: ModelFolderReport) -> tuple[int, int, str | None]:
    """Validate one shard; return (parameters, bytes, dominant dtype)."""
    try:
        header, start = read_safetensors_header(path)
    except ValueError as exc:
        report.problems.append(Problem(rel, str(exc)))
        return 0, 0, None
    size = path.stat().st_size
    end = 0
    params = 0
    by_dtype: dict[str, int] = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        try:
            begin, stop = meta["data_offsets"]
            shape = meta["shape"]
            dtype = meta["dtype"]
        except (KeyError, TypeError, ValueError):
            report.problems.append(Problem(rel, f"corrupt: tensor {name!r} has no valid entry"))
            return 0, 0, None
        numel = 1
        for d in shape:
            numel *= int(d)
        if numel * _DTYPE_BYTES.get(dtype, 1) != stop - begin:
            report.problems.append(Problem(rel, f"corrupt: tensor {name!r} size does not match its shape"))
            return 0, 0, None
        end = max(end, stop)
        params += numel
        by_dtype[dtype] = by_dtype.get(dtype, 0) + numel
    if start + end > size:
        report.problems.append(Problem(
            rel, f"truncated: header promises {start + end:,} bytes, file has {size:,} "
                 "(an interrupted download or copy?)"))
        return 0, 0, None
    dominant = max(by_dtype, key=by_dtype.get) if by_dtype else None
    return params, end, _SAFETENSORS_NAME.get(dominant or "", dominant)


def _check_weights(root: Path, report: ModelFolderReport) -> None:
    index_files = sorted(root.glob("*.safetensors.index.json"))
    shards = sorted(p for p in root.glob("*.safetensors"))
    bins = sorted(root.glob("pytorch_model*.bin"))
    if index_files:
        index = _read_json(index_files[0], report, index_files[0].name) or {}
        wanted = sorted(set((index.get("weight_map") or {}).values()))
        for name in wanted:
            if not (root / name).exists():
                report.problems.append(Problem(name, f"missing: listed in {index_files[0].name}"))
    if shards:
        total_params = total_bytes = 0
        dtype_votes: dict[str, int] = {}
        for shard in shards:
            params, nbytes, dtype = _check_safetensors(shard, shard.name, report)
            total_params += params
            total_bytes += nbytes
            if dtype:
                dtype_votes[dtype] = dtype_votes.get(dtype, 0) + params
            report.weight_files.append(shard.name)
        report.num_parameters = total_params or None
        report.checkpoint_bytes = total_bytes
        report.checkpoint_dtype = max(dtype_votes, key=dtype_votes.get) if dtype_votes else None
    elif bins:
        for b in bins:
            report.weight_files.append(b.name)
            report.checkpoint_bytes += b.stat().st_size
        # a pickle can run any code when torch.load reads it, and a model folder is not
        # trusted: such weights are refused, whatever the torch version (issue 35)
        report.problems.append(Problem(
            bins[0].name, "PyTorch pickle weights are not loaded (reading them can run code "
            "from the file): convert the folder to safetensors first, e.g. with "
            "transformers' save_pretrained(..., safe_serialization=True) on a trusted machine"))
    else:
        report.problems.append(Problem(
            ".", "no weights: expected model.safetensors (or *.safetensors shards, or pytorch_model.bin)"))


def _check_tokenizer(root: Path, report: ModelFolderReport) -> None:
    candidates = ["tokenizer.json", "tokenizer.model", "vocab.json", "merges.txt", "tokenizer_config.json"]
    report.tokenizer_files = [c for c in candidates if (root / c).exists()]
    has_vocab = any((root / c).exists() for c in ("tokenizer.json", "tokenizer.model", "vocab.json"))
    if not has_vocab:
        report.problems.append(Problem(
            ".", "no tokenizer: expected tokenizer.json (or tokenizer.model, or vocab.json + merges.txt)"))
    if (root / "tokenizer.json").exists():
        _read_json(root / "tokenizer.json", report, "tokenizer.json")
    if (root / "vocab.json").exists() and not (root / "tokenizer.json").exists() \
            and not (root / "merges.txt").exists():
        report.problems.append(Problem("merges.txt", "missing: vocab.json needs merges.txt beside it"))
    tcfg = {}
    if (root / "tokenizer_config.json").exists():
        tcfg = _read_json(root / "tokenizer_config.json", report, "tokenizer_config.json") or {}
    report.has_chat_template = bool(tcfg.get("chat_template")) or (root / "chat_template.jinja").exists() \
        or (root / "chat_template.json").exists()
    if not report.has_chat_template:
        report.problems.append(Problem(
            "tokenizer_config.json", "no chat template: chat requests will use a plain transcript",
            fatal=False))


def _check_config(root: Path, report: ModelFolderReport) -> dict | None:
    cfg_path = root / "config.json"
    if not cfg_path.exists():
        report.problems.append(Problem("config.json", "missing: every Hugging Face model folder needs one"))
        return None
    cfg = _read_json(cfg_path, report, "config.json")
    if cfg is None:
        return None
    report.model_type = cfg.get("model_type")
    archs = cfg.get("architectures") or []
    report.architecture = archs[0] if archs else None
    if not report.model_type:
        report.problems.append(Problem("config.json", "has no model_type"))
    else:
        try:
            from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES
        except ImportError:  # pragma: no cover - transformers is a hard dependency
            CONFIG_MAPPING_NAMES = {}
        if CONFIG_MAPPING_NAMES and report.model_type not in CONFIG_MAPPING_NAMES:
            report.problems.append(Problem(
                "config.json", f"unsupported architecture: model_type {report.model_type!r} is not "
                               "known to the installed transformers"))
    if report.architecture and not report.architecture.endswith(("ForCausalLM", "LMHeadModel",
                                                                 "ForConditionalGeneration")):
        report.problems.append(Problem(
            "config.json", f"unsupported architecture: {report.architecture} is not a causal language model"))
    text_cfg = cfg.get("text_config") if isinstance(cfg.get("text_config"), dict) else cfg
    report.hidden_size = text_cfg.get("hidden_size") or text_cfg.get("n_embd")
    report.num_layers = text_cfg.get("num_hidden_layers") or text_cfg.get("n_layer")
    report.num_heads = text_cfg.get("num_attention_heads") or text_cfg.get("n_head")
    report.num_kv_heads = text_cfg.get("num_key_value_heads") or report.num_heads
    report.head_dim = text_cfg.get("head_dim") or (
        report.hidden_size // report.num_heads if report.hidden_size and report.num_heads else None)
    report.vocab_size = text_cfg.get("vocab_size")
    report.max_context = text_cfg.get("max_position_embeddings") or text_cfg.get("n_positions")
    qcfg = cfg.get("quantization_config")
    if isinstance(qcfg, dict):
        report.quantization = qcfg.get("quant_method") or "quantized"
    return cfg


def inspect_model_folder(path: str | Path) -> ModelFolderReport:
    """Check a folder (or a GGUF file, or a folder holding one); never raises for a bad one
    (the report lists the problems)."""
    from .formats import lookup

    root = Path(path).expanduser()
    gguf_report = lookup("gguf", "inspect")(root)
    if gguf_report is not None:
        return gguf_report
    report = ModelFolderReport(path=root)
    if not root.exists():
        report.problems.append(Problem(".", "no such folder"))
        return report
    if not root.is_dir():
        report.problems.append(Problem(
            ".", "is a file; choose the folder that holds config.json, or a .gguf file"))
        return report
    _check_config(root, report)
    if (root / "quant_model_description.json").exists():
        report.quantization = "msmodelslim"
    _check_weights(root, report)
    _check_tokenizer(root, report)
    return report


def validate_model_folder(path: str | Path) -> ModelFolderReport:
    """inspect_model_folder, raising ModelFolderError when the folder cannot be loaded."""
    report = inspect_model_folder(path)
    if not report.ok:
        raise ModelFolderError(report)
    return report
