"""Load a GGUF file straight into the INT8 model, one tensor at a time, with no float copy.

A Q8_0 tensor is int8 values with one fp16 scale per 32 of them: exactly our grouped W8A16
layout with group_size 32 (engine.kernels.int8_linear), so its linear layers become QuantLinear
modules holding the file's own int8 values and its scales in fp32 (fp16 -> fp32 is exact): no
rounding at all. Tensors of other types (F32, F16, BF16, Q4_0, Q4_K, Q6_K, ...) are dequantized
one at a time and rounded to INT8 per group of 32 at once, so memory stays near the INT8 size.

The model is built with its parameters on the meta device (accelerate's init_empty_weights;
buffers such as the rotary frequencies are real), each linear replaced by its int8 module and
each remaining parameter (norms, float embeddings) assigned from the file. The tensors are read
with plain reads at the offsets the file's index gives (engine.models.gguf_index), not through
a memory map: pages of a mapped file count in the process's resident memory, so a mapped 7 GB
file would double the peak.

llama.cpp stores the rows of Llama-family Q and K projections permuted (its rotary embedding
pairs neighbouring values, transformers' pairs halves); transformers' own tensor processor
reverses that on floats. A row permutation commutes with per-row quantization, so the same
processor is applied to the int8 rows and to their scales separately.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..kernels import qmath
from .apply import QuantInfo, set_module
from .qlinear import QuantEmbedding, QuantLinear

GROUP = 32  # values per scale: Q8_0's block, and the int8 group of everything rounded here
Q8_0_BLOCK = 34  # bytes of one Q8_0 block: fp16 scale + 32 int8 values
# processors whose work on a linear weight is a row permutation or nothing: safe on int8 rows
_ROW_SAFE = ("TensorProcessor", "LlamaTensorProcessor", "Gemma2TensorProcessor")


def q8_0_rows(raw: np.ndarray, n: int, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The bytes of an (n, k) Q8_0 tensor -> int8 (n, k) and fp32 scales (n, k / 32)."""
    blocks = raw.reshape(n, k // GROUP, Q8_0_BLOCK)
    scale = np.ascontiguousarray(blocks[:, :, :2]).view(np.float16).reshape(n, k // GROUP)
    q = np.ascontiguousarray(blocks[:, :, 2:]).view(np.int8).reshape(n, k)
    return torch.from_numpy(q), torch.from_numpy(scale.astype(np.float32))


class _Tensors:
    """Reads one tensor at a time from the file (see the module's note on memory maps)."""

    def __init__(self, path: Path):
        from ..models.gguf_index import read_index

        self.index = read_index(path)
        self._f = open(path, "rb")  # noqa: SIM115 - closed by close()

    def raw(self, t: Any) -> np.ndarray:
        buf = np.empty(int(t.n_bytes), dtype=np.uint8)
        self._f.seek(int(t.data_offset))
        if self._f.readinto(memoryview(buf)) != buf.size:
            raise ValueError(f"tensor {t.name} runs past the end of the file")
        return buf

    def floats(self, t: Any) -> np.ndarray:
        """The tensor dequantized to float32, in transformers' (row-major) shape."""
        from gguf.quants import dequantize

        dtype, shape = t.numpy_layout()
        arr = self.raw(t).view(dtype).reshape(shape)
        return np.asarray(dequantize(arr, t.tensor_type), dtype=np.float32)

    def close(self) -> None:
        self._f.close()


def _skeleton(config: Any, dtype: torch.dtype) -> Any:
    from accelerate import init_empty_weights
    from transformers import AutoModelForCausalLM

    from ..models.loader import MODEL_BUILD_LOCK

    with MODEL_BUILD_LOCK, init_empty_weights(include_buffers=False):
        return AutoModelForCausalLM.from_config(config, dtype=dtype)


def _int8_weight(src: _Tensors, t: Any, proc: Any, name: str) -> tuple[torch.Tensor,
                                                                     torch.Tensor, int]:
    """(int8 (n, k), fp32 scales, group size) of the linear weight in GGUF tensor `t`."""
    k, n = (int(d) for d in t.shape[:2])
    row_safe = type(proc).__name__ in _ROW_SAFE
    if t.tensor_type.name == "Q8_0" and row_safe:
        q, s = q8_0_rows(src.raw(t), n, k)
        q = torch.from_numpy(np.ascontiguousarray(proc.process(q.numpy(), name).weights))
        s = torch.from_numpy(np.ascontiguousarray(proc.process(s.numpy(), name).weights))
        return q, s, GROUP
    w = torch.from_numpy(np.ascontiguousarray(proc.process(src.floats(t), name).weights))
    group = GROUP if k % GROUP == 0 else 0
    q, s = qmath.quantize_weight(w, group)
    return q, s, group


def _assign(model: Any, hf_name: str, value: torch.Tensor) -> None:
    mod_name, _, leaf = hf_name.rpartition(".")
    mod = model.get_submodule(mod_name)
    if isinstance(mod, QuantLinear):  # a bias after its weight
        mod.bias.copy_(value)
        return
    mod._parameters[leaf] = torch.nn.Parameter(value, requires_grad=False)


def _to_int8_linear(model: Any, mod_name: str, q: torch.Tensor, s: torch.Tensor, group: int,
                    dtype: torch.dtype) -> QuantLinear:
    lin = model.get_submodule(mod_name)
    has_bias = lin.bias is not None
    mod = QuantLinear(lin.in_features, lin.out_features, "w8a16", bias=has_bias,
                      group_size=group, dtype=dtype)
    mod.weight, mod.weight_scale = q, s
    if has_bias and lin.bias.device.type != "meta":  # read before its weight; else it follows
        mod.bias.copy_(lin.bias.detach())
    set_module(model, mod_name, mod)
    return mod


def build_int8_model(path: Path, config: Any, dtype: torch.dtype,
                     step: Callable[[float, str], None], serve: bool = False) -> Any:
    """The transformers model of GGUF `path` with int8 linear layers (w8a16, groups of 32).
    serve (a CPU model): each layer prepared for serving as soon as it is read, so that its
    fp32 scales go before the next layer's come, and the memory its reading freed given back
    to the system (give_back_freed_memory). Prepared after the whole model, a 7B model's fp32
    scales (0.84 GB) were all held beside the packed copies' fp16 ones, and 1.26 GB of freed
    read buffers stayed with the process: peak RSS 1.24-1.25x the INT8 weights and KV cache,
    over issue 34's 1.2x (docs/benchmarks.md, "fp16 scales in the packed layout")."""
    from transformers.modeling_gguf_pytorch_utils import (
        TENSOR_PROCESSORS,
        TensorProcessor,
        get_gguf_hf_weights_map,
    )

    from ..runtime.process_memory import give_back_freed_memory

    def done(mod: QuantLinear) -> None:
        if serve:
            mod.release_plain_weight()
            give_back_freed_memory()

    model = _skeleton(config, dtype)
    src = _Tensors(path)
    try:
        arch = str(src.index.field("general.architecture"))
        proc = TENSOR_PROCESSORS.get(arch, TensorProcessor)(config=config.to_dict())
        names = get_gguf_hf_weights_map(model, proc)
        emb, head = model.get_input_embeddings(), model.get_output_embeddings()
        emb_name = next(n for n, m in model.named_modules() if m is emb)
        head_name = next(n for n, m in model.named_modules() if m is head)
        tied = bool(getattr(config, "tie_word_embeddings", False))
        quantized, head_int8, emb_int8 = [], None, False
        tensors = src.index.tensors
        for i, t in enumerate(tensors):
            if i % max(1, len(tensors) // 40) == 0:
                step(i / len(tensors), "reading the int8 weights")
            hf = names.get(t.name)
            if hf is None:
                continue  # e.g. llama 3's rope_freqs: transformers computes them itself
            mod_name, _, leaf = hf.rpartition(".")
            target = model.get_submodule(mod_name)
            is_q8 = t.tensor_type.name == "Q8_0"
            if mod_name == emb_name and is_q8:
                # the table stays int8: a head of its own when tied, or an own grouped table
                q, s = q8_0_rows(src.raw(t), int(t.shape[1]), int(t.shape[0]))
                if tied:
                    head_int8 = _to_int8_linear(model, head_name, q, s, GROUP, dtype)
                    new = QuantEmbedding.tied(head_int8, _embed_scale(emb))
                else:
                    new = QuantEmbedding(q.shape[0], q.shape[1], dtype,
                                         embed_scale=_embed_scale(emb))
                    new.weight, new.weight_scale = q, s
                set_module(model, emb_name, new)
                emb_int8 = True
                if tied:
                    done(head_int8)
            elif isinstance(target, torch.nn.Linear) and leaf == "weight" and (
                    mod_name != head_name or is_q8):
                q, s, group = _int8_weight(src, t, proc, t.name)
                mod = _to_int8_linear(model, mod_name, q, s, group, dtype)
                del q, s
                done(mod)
                if mod_name == head_name:
                    head_int8 = mod
                else:
                    quantized.append(mod_name)
            else:
                value = proc.process(src.floats(t), t.name).weights
                _assign(model, hf, torch.from_numpy(np.ascontiguousarray(value)).to(dtype))
    finally:
        src.close()
    if tied and head_int8 is None:
        model.tie_weights()  # a float table shared by the embedding and the head
    left = [n for n, p in model.named_parameters() if p.device.type == "meta"]
    if left:
        raise ValueError(f"the file has no tensor for {', '.join(left[:3])}")
    model.npu_quant = QuantInfo(
        method="w8a16", quantized=quantized + ([head_name] if head_int8 is not None else []),
        skipped=[], config={"group_size": GROUP, "source": "gguf"},
        int8_head={"head": head_name, "embedding": emb_name, "tied": tied}
        if head_int8 is not None and emb_int8 else None)
    return model.eval()


def _embed_scale(emb: Any) -> float:
    from .head import embedding_scale

    return embedding_scale(emb) or 1.0


def load_gguf_int8(path: str | Path, device: str = "cpu", dtype: str = "float32",
                   name: str | None = None, progress: Callable[[float, str], None] | None = None,
                   cancel: threading.Event | None = None) -> Any:
    """engine.models.loader.LoadedModel of a GGUF file loaded as INT8 (formats "gguf-int8")."""
    import transformers

    from ..models.gguf_config import load_config
    from ..models.gguf_tokenizer import load_tokenizer
    from ..models.loader import LoadedModel, ModelLoadError, load_steps

    path = Path(path)

    step = load_steps(progress, cancel)

    transformers.utils.logging.set_verbosity_error()
    step(0.05, "reading the GGUF header")
    try:
        config = load_config(path)
        step(0.1, "reading the tokenizer")
        tokenizer = load_tokenizer(path)
        dt = getattr(torch, dtype)
        model = build_int8_model(path, config, dt, lambda f, w: step(0.15 + 0.8 * f, w),
                                 serve=str(device).split(":")[0] == "cpu")
    except (ValueError, KeyError, OSError, NotImplementedError) as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ModelLoadError(f"{path}: cannot load as INT8: {reason}") from None
    from .apply import prepare_for_serving

    model.config.architectures = [type(model).__name__]
    model.to(device)
    prepare_for_serving(model)
    step(1.0, "ready")
    return LoadedModel(name=name or path.stem, path=path, model=model, tokenizer=tokenizer,
                       config=model.config, device=device, dtype=dtype,
                       architecture=type(model).__name__, quantization="w8a16")
