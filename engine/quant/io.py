"""Write quantized checkpoints (native, compressed-tensors, msModelSlim) and load them back.

Every export is written into a hidden temporary folder next to the target and renamed into
place at the end, so an interrupted export never leaves a half-written model folder.

Formats (design/ASCEND_INT8.md sections 3 and 4):
* native: model.safetensors (QuantLinear buffers: weight int8 (N,K), weight_scale fp32,
  input_scale, bias) + npu_quant.json. Loads back exactly.
* compressed-tensors: int8 weight (N,K), weight_scale (N,1), input_scale (1,) for static;
  config.json gets the `quantization_config` vLLM reads (quant_method "compressed-tensors",
  format "int-quantized"). W8A8 only: vllm-ascend has no compressed-tensors W8A16 mapping.
* msmodelslim: quant_model_description.json + quant_model_weights.safetensors, the AscendV1
  tensors and dtypes vllm-ascend's `--quantization ascend` expects.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from ..models.experts import unroll_experts
from .apply import QuantInfo, quant_modules, set_module
from .config import FORMATS, QuantError
from .qlinear import QuantLinear

NATIVE_META = "npu_quant.json"
MSMODELSLIM_DESC = "quant_model_description.json"
MSMODELSLIM_WEIGHTS = "quant_model_weights.safetensors"
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "tokenizer_config.json",
                    "special_tokens_map.json", "generation_config.json", "vocab.json",
                    "merges.txt", "chat_template.jinja", "added_tokens.json")
_MS_TYPES = {"w8a16": "W8A16", "w8a8-dynamic": "W8A8_DYNAMIC", "w8a8-static": "W8A8"}
_MS_METHODS = {v: k for k, v in _MS_TYPES.items()}


# ----------------------------------------------------------------------------- helpers


def _float_state(model: Any, skip_prefixes: set[str]) -> dict[str, torch.Tensor]:
    """Float tensors of the model, tied duplicates dropped, QuantLinear buffers excluded."""
    out, seen = {}, set()
    for name, t in model.state_dict().items():
        prefix = name.rsplit(".", 1)[0]
        if prefix in skip_prefixes:
            continue
        key = (t.data_ptr(), t.shape)
        if key in seen:
            continue  # tied (lm_head = embed_tokens): transformers re-ties on load
        seen.add(key)
        out[name] = t.detach().contiguous().cpu()
    return out


def _check_exportable(model: Any) -> tuple[QuantInfo, dict[str, QuantLinear]]:
    info = getattr(model, "npu_quant", None)
    mods = quant_modules(model)
    if info is None or not mods:
        raise QuantError("the model is not quantized")
    if any(m.weight.numel() == 0 for m in mods.values()):
        raise QuantError("int8 weights were released for serving; export before serving")
    return info, mods


def _copy_side_files(src: Path | None, dst: Path) -> None:
    if src is None:
        return
    from ..models.gguf import gguf_file_of

    gguf = gguf_file_of(src)
    if gguf is not None:  # a GGUF's tokenizer files are in its converted cache folder
        from ..models.gguf_convert import converted_folder

        src = converted_folder(gguf)
        if src is None:
            raise QuantError(f"{gguf}: load it once before exporting (it is not converted yet)")
    for name in _TOKENIZER_FILES:
        if (src / name).is_file():
            shutil.copy2(src / name, dst / name)


def _config_dict(model: Any) -> dict:
    cfg = model.config.to_dict()
    cfg.pop("quantization_config", None)
    return cfg


def _write_json(path: Path, obj: dict) -> None:
    path.write_text(json.dumps(obj, indent=2, sort_keys=False) + "\n", encoding="utf-8")


def _atomic_dir(out: Path, overwrite: bool, write: Callable[[Path], None]) -> Path:
    """npu_console.engine.quant.outdir.write_folder, its refusals as QuantError."""
    from .outdir import OutputFolderError, write_folder

    try:
        return write_folder(out, overwrite, write)
    except OutputFolderError as exc:
        raise QuantError(str(exc)) from None


# ----------------------------------------------------------------------------- exporters


def export(model: Any, out: str | Path, fmt: str = "native", source_dir: str | Path | None = None,
           overwrite: bool = False) -> Path:
    """Write `model` (quantized in place by quantize_model) in `fmt`; tokenizer files are
    copied from `source_dir` (the float model's folder)."""
    if fmt not in FORMATS:
        raise QuantError(f"unknown export format {fmt!r}; choose one of {', '.join(FORMATS)}")
    info, mods = _check_exportable(model)
    writer = {"native": _write_native, "compressed-tensors": _write_compressed_tensors,
              "msmodelslim": _write_msmodelslim}[fmt]
    if fmt == "compressed-tensors" and info.method == "w8a16":
        # written as int-quantized; vLLM (CPU included, `make peers`) reads int8 weight-only
        # only as pack-quantized, and vllm-ascend has no compressed-tensors W8A16 mapping
        raise QuantError("compressed-tensors export is for w8a8-dynamic / w8a8-static "
                         "(vLLM and vllm-ascend do not load int8 weight-only int-quantized "
                         "checkpoints); use --format native or msmodelslim for w8a16")
    if fmt != "native" and info.int8_head:
        raise QuantError(f"an int8 lm_head and embedding can only be written in the native "
                         f"format: {fmt} readers (vLLM, vllm-ascend) keep them in float; "
                         "quantize without --int8-head for this format")
    if fmt == "compressed-tensors" and any(m.group_size for m in mods.values()):
        raise QuantError("per-group scales cannot be written as compressed-tensors")
    if fmt != "native" and any(m.turn_signs is not None for m in mods.values()):
        raise QuantError(f"this model turns its down_proj inputs at run time (static W8A8's "
                         f"default), which {fmt} readers cannot do; quantize with --turn-down "
                         "off for this format")
    src = Path(source_dir) if source_dir else None

    def write(tmp: Path) -> None:
        writer(model, info, mods, tmp)
        _copy_side_files(src, tmp)

    return _atomic_dir(Path(out), overwrite, write)


def _write_native(model, info: QuantInfo, mods, tmp: Path) -> None:
    tensors = _float_state(model, set(mods))
    layers = {}
    for name, m in mods.items():
        tensors[f"{name}.weight"] = m.weight.cpu().contiguous()
        tensors[f"{name}.weight_scale"] = m.weight_scale.float().cpu().contiguous()
        if m.input_scale is not None:
            tensors[f"{name}.input_scale"] = m.input_scale.float().cpu()
        if m.bias is not None:
            tensors[f"{name}.bias"] = m.bias.cpu().contiguous()
        if m.turn_signs is not None:  # the input turn (engine.quant.turn)
            tensors[f"{name}.turn_signs"] = m.turn_signs.float().cpu().contiguous()
            tensors[f"{name}.turn_odd"] = m.turn_odd.float().cpu().contiguous()
        layers[name] = {"method": m.method, "group_size": m.group_size}
    save_file(tensors, str(tmp / "model.safetensors"), metadata={"format": "pt"})
    cfg = _config_dict(model)
    # marks the folder as quantized for the model-folder checks; our loader reads npu_quant.json
    cfg["quantization_config"] = {"quant_method": "npu-console", "method": info.method,
                                  "format_version": 1}
    _write_json(tmp / "config.json", cfg)
    _write_json(tmp / NATIVE_META, {"format": "npu-console-int8", "version": 1,
                                    "dtype": str(_float_dtype(model)).replace("torch.", ""),
                                    "layers": layers, **info.to_dict()})


def _float_dtype(model: Any) -> torch.dtype:
    for p in model.parameters():
        if p.is_floating_point():
            return p.dtype
    return torch.float32


def _write_compressed_tensors(model, info: QuantInfo, mods, tmp: Path) -> None:
    dtype = _float_dtype(model)
    tensors = _float_state(model, set(mods))
    static = info.method == "w8a8-static"
    for name, m in mods.items():
        tensors[f"{name}.weight"] = m.weight.cpu().contiguous()
        tensors[f"{name}.weight_scale"] = m.weight_scale.reshape(-1, 1).to(dtype).cpu()
        if static:
            tensors[f"{name}.input_scale"] = m.input_scale.reshape(1).to(dtype).cpu()
        if m.bias is not None:
            tensors[f"{name}.bias"] = m.bias.cpu().contiguous()
    save_file(tensors, str(tmp / "model.safetensors"), metadata={"format": "pt"})
    acts = {"num_bits": 8, "type": "int", "symmetric": True, "group_size": None,
            "strategy": "tensor" if static else "token", "dynamic": not static,
            "observer": "minmax" if static else None}
    ignore = ["lm_head"] + [n for n in info.skipped]
    qcfg = {
        "quant_method": "compressed-tensors",
        "format": "int-quantized",
        "quantization_status": "compressed",
        "config_groups": {"group_0": {
            "targets": ["Linear"],
            "weights": {"num_bits": 8, "type": "int", "symmetric": True, "strategy": "channel",
                        "dynamic": False, "group_size": None, "actorder": None,
                        "observer": "minmax"},
            "input_activations": acts,
            "output_activations": None}},
        "ignore": ignore,
        "kv_cache_scheme": None,
        "version": "0.11.0",
    }
    cfg = _config_dict(model)
    cfg["quantization_config"] = qcfg
    _write_json(tmp / "config.json", cfg)


def _write_msmodelslim(model, info: QuantInfo, mods, tmp: Path) -> None:
    dtype = _float_dtype(model)
    tensors = _float_state(model, set(mods))
    desc: dict[str, Any] = {"model_quant_type": _MS_TYPES[info.method], "version": "1.0.0"}
    for name in tensors:
        desc[name] = "FLOAT"
    group = 0
    for name, m in mods.items():
        qtype = _MS_TYPES[m.method]
        n = m.out_features
        t = {f"{name}.weight": m.weight.cpu().contiguous()}
        scale = m.weight_scale.float().cpu()
        t[f"{name}.weight_scale"] = scale if m.group_size else scale.reshape(n, 1)
        t[f"{name}.weight_offset"] = torch.zeros_like(t[f"{name}.weight_scale"])
        group = group or m.group_size
        if m.method == "w8a8-static":
            s_in = m.input_scale.float().cpu().reshape(1)
            deq = (s_in * scale).contiguous()
            t[f"{name}.input_scale"] = s_in
            t[f"{name}.input_offset"] = torch.zeros(1)
            # fp32 for bf16 models, else the fp32 bit pattern widened to int64 (msModelSlim's
            # deqscale2int64); vllm-ascend feeds either to npu_quant_matmul
            t[f"{name}.deq_scale"] = (deq if dtype == torch.bfloat16
                                      else deq.view(torch.int32).to(torch.int64))
            bias = m.bias.float().cpu() if m.bias is not None else torch.zeros(n)
            t[f"{name}.quant_bias"] = torch.round(bias / deq).to(torch.int32)
        for k in t:
            desc[k] = qtype
        if m.bias is not None:
            t[f"{name}.bias"] = m.bias.float().cpu().contiguous()
            desc[f"{name}.bias"] = "FLOAT"
        tensors.update(t)
    if group:
        desc["group_size"] = group
    save_file(tensors, str(tmp / MSMODELSLIM_WEIGHTS), metadata={"format": "pt"})
    _write_json(tmp / MSMODELSLIM_DESC, desc)
    _write_json(tmp / "config.json", _config_dict(model))


# ----------------------------------------------------------------------------- loading


def detect_format(path: str | Path) -> str | None:
    """"native", "msmodelslim", "compressed-tensors", or None for a float checkpoint."""
    p = Path(path)
    if (p / NATIVE_META).is_file():
        return "native"
    if (p / MSMODELSLIM_DESC).is_file():
        return "msmodelslim"
    cfg = p / "config.json"
    if cfg.is_file():
        try:
            qc = json.loads(cfg.read_text(encoding="utf-8")).get("quantization_config") or {}
        except (OSError, json.JSONDecodeError):
            return None
        if qc.get("quant_method") == "compressed-tensors":
            return "compressed-tensors"
    return None


def _skeleton(path: Path, dtype: torch.dtype) -> Any:
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = AutoConfig.from_pretrained(str(path))
    if hasattr(cfg, "quantization_config"):
        del cfg.quantization_config  # ours to interpret, not transformers'
    try:
        from transformers.modeling_utils import no_init_weights
    except ImportError:  # pragma: no cover - older transformers
        from contextlib import nullcontext as no_init_weights
    from ..models.loader import MODEL_BUILD_LOCK

    with MODEL_BUILD_LOCK, no_init_weights():  # module-global state: one build at a time
        model = AutoModelForCausalLM.from_config(cfg, dtype=dtype)
    # our exports store routed experts one linear each (engine.quant unrolled them to quantize)
    unroll_experts(model)
    return model


def _install_layers(model: Any, layers: dict[str, tuple[str, int]], dtype: torch.dtype) -> None:
    for name, (method, group) in layers.items():
        try:
            lin = model.get_submodule(name)
        except AttributeError:
            raise QuantError(f"checkpoint names layer {name} which the model does not have") from None
        set_module(model, name, QuantLinear(lin.in_features, lin.out_features, method,
                                            bias=lin.bias is not None, group_size=group,
                                            dtype=dtype))


def _install_head(model: Any, head: dict, dtype: torch.dtype) -> None:
    """The QuantEmbedding of an int8-head export (its lm_head is among the int8 layers)."""
    from .head import embedding_scale
    from .qlinear import QuantEmbedding

    qhead = model.get_submodule(head["head"])
    group = int(head.get("group", 0))  # written before 2026-12-05: per row
    if not group:
        qhead.act_rows = "token"  # as engine.quant.apply.quantize_head made it
    emb = model.get_submodule(head["embedding"])
    scale = embedding_scale(emb) or 1.0  # Gemma's sqrt(hidden): the architecture's, not saved
    set_module(model, head["embedding"], QuantEmbedding.tied(qhead, scale) if head["tied"]
               else QuantEmbedding(emb.num_embeddings, emb.embedding_dim, dtype,
                                   embed_scale=scale, group=group))


def _finish(model: Any, tensors: dict[str, torch.Tensor], info: QuantInfo, device: str) -> Any:
    missing, unexpected = model.load_state_dict(tensors, strict=False)
    # an int8 head is stored as a layer of its own, so nothing is left to re-tie
    tied = getattr(model.config, "tie_word_embeddings", False) and not info.int8_head
    missing = [k for k in missing if not (tied and k.startswith("lm_head."))]
    if missing or unexpected:
        raise QuantError(f"checkpoint does not match the model: missing {missing[:3]}, "
                         f"unexpected {unexpected[:3]}")
    if tied:
        model.tie_weights()
    model.npu_quant = info
    return model.to(device).eval()


def load_quantized(path: str | Path, device: str = "cpu", dtype: str = "float32",
                   name: str | None = None, progress: Callable[[float, str], None] | None = None,
                   cancel: Any = None) -> Any:
    """Load any of our three export formats; returns engine.models.loader.LoadedModel with
    QuantLinear layers in the model. `dtype` is the dtype of the float parts and activations."""
    from ..models.loader import (
        LoadedModel,
        ModelLoadError,
        load_steps,
        load_tokenizer,
    )

    path = Path(path)

    step = load_steps(progress, cancel)

    step(0.15, "loading the tokenizer")
    tokenizer = load_tokenizer(path)
    step(0.3, "loading the int8 weights")
    try:
        model = load_quantized_model(path, device, dtype)
    except QuantError as exc:
        raise ModelLoadError(str(exc)) from None
    from .apply import prepare_for_serving

    step(0.9, "packing int8 weights for the device")
    prepare_for_serving(model)
    step(1.0, "ready")
    arch = (model.config.architectures or [type(model).__name__])[0]
    return LoadedModel(name=name or path.name, path=path, model=model, tokenizer=tokenizer,
                       config=model.config, device=device, dtype=str(dtype).replace("torch.", ""),
                       architecture=arch, quantization=model.npu_quant.method)


def load_quantized_model(path: str | Path, device: str = "cpu",
                         dtype: str | torch.dtype = "float32") -> Any:
    """The transformers model alone (no tokenizer), with `model.npu_quant` set."""
    path = Path(path)
    fmt = detect_format(path)
    if fmt is None:
        raise QuantError(f"{path} holds no quantized checkpoint")
    dt = getattr(torch, dtype) if isinstance(dtype, str) else dtype
    model = _skeleton(path, dt)
    if fmt == "native":
        meta = json.loads((path / NATIVE_META).read_text(encoding="utf-8"))
        layers = {n: (v["method"], int(v.get("group_size", 0))) for n, v in meta["layers"].items()}
        tensors = load_file(str(path / "model.safetensors"))
        info = QuantInfo(method=meta["method"], quantized=meta["quantized"],
                         skipped=meta["skipped"], smoothed=meta.get("smoothed", []),
                         config=meta.get("config", {}), int8_head=meta.get("int8_head"),
                         group_fallback=meta.get("group_fallback", {}))
    elif fmt == "compressed-tensors":
        layers, tensors, info = _read_compressed_tensors(path, model)
    else:
        layers, tensors, info = _read_msmodelslim(path)
    if info.int8_head and str(device).split(":")[0] == "npu":
        raise QuantError("this checkpoint has an int8 lm_head, which Ascend cannot run (its int8 "
                         "matmuls cap N at 65535, a vocabulary is larger); quantize again "
                         "without --int8-head")
    _install_layers(model, layers, dt)
    if info.config.get("act_blocks"):  # w8a8-dynamic with activations per block of 32
        for m in quant_modules(model).values():
            if m.method == "w8a8-dynamic":
                m.act_rows = "block"
    if info.int8_head:
        _install_head(model, info.int8_head, dt)
    for name, m in quant_modules(model).items():
        if f"{name}.turn_signs" in tensors:
            m.set_input_turn(tensors[f"{name}.turn_signs"], tensors[f"{name}.turn_odd"])
    for k, v in list(tensors.items()):
        if v.is_floating_point() and not k.endswith(("weight_scale", "input_scale", "turn_signs",
                                                     "turn_odd")):
            tensors[k] = v.to(dt)
        elif v.is_floating_point():
            tensors[k] = v.float()
    return _finish(model, tensors, info, device)


def _read_compressed_tensors(path: Path, model: Any):
    qc = json.loads((path / "config.json").read_text(encoding="utf-8"))["quantization_config"]
    groups = list(qc.get("config_groups", {}).values())
    if len(groups) != 1:
        raise QuantError("only single-group compressed-tensors INT8 checkpoints are supported")
    g = groups[0]
    w, a = g.get("weights") or {}, g.get("input_activations")
    if w.get("num_bits") != 8 or w.get("type") != "int" or w.get("strategy") != "channel":
        raise QuantError("only int8 per-channel compressed-tensors weights are supported")
    if a is None:
        method = "w8a16"
    elif a.get("strategy") == "token" and a.get("dynamic"):
        method = "w8a8-dynamic"
    elif a.get("strategy") == "tensor" and not a.get("dynamic"):
        method = "w8a8-static"
    else:
        raise QuantError(f"unsupported compressed-tensors activation scheme {a}")
    tensors = load_file(str(path / "model.safetensors"))
    names = sorted({k[:-len(".weight_scale")] for k in tensors if k.endswith(".weight_scale")})
    out: dict[str, torch.Tensor] = {}
    for k, v in tensors.items():
        out[k] = v.reshape(-1) if k.endswith((".weight_scale", ".input_scale")) else v
    layers = {n: (method, 0) for n in names}
    ignored = [n for n in qc.get("ignore", []) if n != "lm_head"]
    info = QuantInfo(method=method, quantized=names, skipped=ignored)
    return layers, out, info


def _read_msmodelslim(path: Path):
    desc = json.loads((path / MSMODELSLIM_DESC).read_text(encoding="utf-8"))
    files = sorted(path.glob("quant_model_weight*.safetensors"))
    if not files:
        raise QuantError(f"{path} has {MSMODELSLIM_DESC} but no quant_model_weights*.safetensors")
    tensors: dict[str, torch.Tensor] = {}
    for f in files:
        tensors.update(load_file(str(f)))
    layers: dict[str, tuple[str, int]] = {}
    for k, typ in desc.items():
        if k.endswith(".weight") and typ in _MS_METHODS:
            name = k[:-len(".weight")]
            scale = tensors.get(f"{name}.weight_scale")
            group = 0
            if scale is not None and scale.dim() == 2 and scale.shape[1] > 1:
                group = tensors[k].shape[1] // scale.shape[1]
            layers[name] = (_MS_METHODS[typ], group)
        elif k.endswith(".weight") and typ not in ("FLOAT", *_MS_METHODS) and "." in k:
            raise QuantError(f"msModelSlim type {typ} ({k}) is not supported; "
                             "supported: W8A16, W8A8_DYNAMIC, W8A8")
    out: dict[str, torch.Tensor] = {}
    for k, v in tensors.items():
        name, _, leaf = k.rpartition(".")
        if name not in layers:
            out[k] = v
            continue
        method, group = layers[name]
        if leaf == "weight":
            out[k] = v
        elif leaf == "weight_offset":
            if v.abs().max() > 0:
                raise QuantError(f"{k}: asymmetric weights are not supported")
        elif leaf == "weight_scale":
            out[k] = v if group else v.reshape(-1)
        elif leaf == "input_scale":
            out[k] = v.float().reshape(1)
        elif leaf == "input_offset":
            if v.abs().max() > 0:
                raise QuantError(f"{k}: asymmetric activations are not supported")
        elif leaf == "bias":
            out[k] = v
        elif leaf in ("deq_scale", "quant_bias"):
            continue  # derived from input_scale * weight_scale (and the float bias) at load
        else:
            out[k] = v
    for name, (method, _) in layers.items():
        if method == "w8a8-static" and f"{name}.weight_scale" not in out:
            deq = tensors[f"{name}.deq_scale"]
            deq = (deq.to(torch.int32).view(torch.float32) if deq.dtype == torch.int64
                   else deq.float())
            out[f"{name}.weight_scale"] = deq / out[f"{name}.input_scale"]
        if (method == "w8a8-static" and f"{name}.bias" not in out
                and f"{name}.quant_bias" in tensors and tensors[f"{name}.quant_bias"].any()):
            raise QuantError(f"{name}: quant_bias without a float bias is not supported")
    info = QuantInfo(method=_MS_METHODS.get(desc.get("model_quant_type"), "w8a8-dynamic"),
                     quantized=sorted(layers), skipped=[])
    return layers, out, info
