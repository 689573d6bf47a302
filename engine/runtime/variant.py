"""One loaded model variant as the engine holds it: model, runner, KV slots, scheduler."""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from .config import EngineConfig
from .kv_slots import SlotAllocator
from .model_size import model_size
from .prompting import PromptEncoder
from .reasoning import choose_parser
from .runner import make_runner
from .scheduler import Scheduler
from .types import (
    MODEL_DEFAULT_FIELDS,
    InvalidRequestError,
    ModelInfo,
    SamplingParams,
)
from .validation import normalize_params

log = logging.getLogger(__name__)


def context_length(config: Any) -> int | None:
    for attr in ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length"):
        v = getattr(config, attr, None)
        if isinstance(v, int) and v > 0:
            return v
    return None


def eos_ids(loaded: Any) -> frozenset[int]:
    """Tokens that end a reply: the model's EOS (generation config and tokenizer) and the
    chat template's end-of-turn token where that is another one."""
    from .template_facts import end_of_turn_id

    ids: set[int] = set()
    eot = end_of_turn_id(loaded.tokenizer)
    if eot is not None:
        ids.add(eot)
    gen = getattr(loaded.model, "generation_config", None)
    for src in (getattr(gen, "eos_token_id", None), getattr(loaded.tokenizer, "eos_token_id", None)):
        if isinstance(src, int):
            ids.add(src)
        elif isinstance(src, (list, tuple)):
            ids.update(int(x) for x in src)
    return frozenset(ids)


def _acceptable(name: str, value: Any) -> bool:
    """Whether a request could carry `value` for `name` (the engine's own parameter checks)."""
    try:
        normalize_params(dataclasses.replace(SamplingParams(), **{name: value}))
    except InvalidRequestError:
        return False
    return True


def sampling_defaults(model: Any) -> dict[str, float]:
    """The sampling settings a model's generation_config.json sets away from transformers'
    own defaults (what `generate` would use, and what vLLM applies to requests that leave them
    unset); values a request could not carry are dropped."""
    gen = getattr(model, "generation_config", None)
    try:
        diff = gen.to_diff_dict() if gen is not None else {}
    except Exception:  # a malformed config must not stop the model from loading
        log.warning("could not read the model's generation_config", exc_info=True)
        return {}
    return {k: diff[k] for k in MODEL_DEFAULT_FIELDS if k in diff and _acceptable(k, diff[k])}


@dataclass(eq=False)
class Variant:
    name: str
    loaded: Any  # engine.models.loader.LoadedModel
    runner: Any
    allocator: SlotAllocator
    scheduler: Scheduler
    info: ModelInfo
    eos: frozenset[int]
    vocab_size: int
    max_len: int
    draining: bool = False
    encoder: PromptEncoder = field(init=False)  # prompts -> ids, on the caller's thread

    def __post_init__(self) -> None:
        self.encoder = PromptEncoder(self.loaded.tokenizer)

    @property
    def tokenizer(self) -> Any:
        return self.loaded.tokenizer


def int8_kernels(model: Any) -> str:
    """The kernels behind the model's int8 layers (duck-typed: runtime does not import quant)."""
    names = sorted({m.kernel_name() for m in model.modules() if hasattr(m, "kernel_name")})
    return "+".join(names)


def build_variant(loaded: Any, name: str, config: EngineConfig,
                  force_fallback: bool = False) -> Variant:
    """Wrap a LoadedModel: preallocate its KV cache and give it a scheduler (any thread)."""
    model = loaded.model
    from .context_budget import (
        choose_max_len,
        free_bytes,
        kv_bytes_per_token,
    )
    from .kv_cache import resolve_dtype as resolve_kv_dtype
    from .template_facts import default_system_prompt

    param = next(model.parameters())
    kv_dtype = resolve_kv_dtype(config.kv_dtype, param.dtype, param.device)
    max_len = choose_max_len(context_length(model.config), slots=config.max_running,
                             per_token=kv_bytes_per_token(model.config, kv_dtype),
                             free=free_bytes(param.device), max_model_len=config.max_model_len,
                             cap=config.max_context_cap)
    runner = make_runner(model, config.max_running, max_len, force_fallback=force_fallback,
                         kv_dtype=config.kv_dtype, linear_kernels=config.linear_kernels)
    batched = runner.path_kind == "batched"
    allocator = SlotAllocator(config.max_running, max_len,
                              prefix_caching=config.prefix_caching and batched,
                              min_prefix_tokens=config.min_prefix_tokens)
    scheduler = Scheduler(allocator, max_running=config.max_running,
                          max_batched_tokens=config.max_batched_tokens)
    size = model_size(model)
    n_params, weight_bytes = size.parameters, size.weight_bytes
    vocab = getattr(model.config, "vocab_size", None) or len(loaded.tokenizer)
    info = ModelInfo(
        name=name, path=str(loaded.path), architecture=loaded.architecture, dtype=loaded.dtype,
        quantization=getattr(loaded, "quantization", None), device=str(loaded.device),
        max_context=max_len, num_parameters=n_params, weight_bytes=weight_bytes,
        kv_bytes=runner.kv_bytes, path_kind=runner.path_kind, created=time.time(),
        kv_dtype=str(runner.kv.k.dtype).removeprefix("torch.") if batched else "",
        linear_kernels=getattr(runner, "linear_kernels", "torch"),
        decode_step="native" if getattr(runner, "decode_plan", None) is not None else "torch",
        unbatched_reason=getattr(runner, "reason", ""),
        int8_kernels=int8_kernels(model),
        default_system_prompt=default_system_prompt(loaded.tokenizer),
        sampling_defaults=tuple(sampling_defaults(model).items()),
        reasoning_parser=choose_parser(config.reasoning_parser,
                                       getattr(loaded.tokenizer, "chat_template", None)))
    return Variant(name=name, loaded=loaded, runner=runner, allocator=allocator,
                   scheduler=scheduler, info=info, eos=eos_ids(loaded), vocab_size=vocab,
                   max_len=max_len)


def rebuild_variant(old: Variant, config: EngineConfig) -> Variant:
    """The same weights with a fresh runner, KV cache and scheduler (an engine restart)."""
    return build_variant(old.loaded, old.name, config,
                         force_fallback=old.info.path_kind == "fallback")
