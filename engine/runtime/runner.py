"""Model runners: turn one scheduled step into logits for the sequences that sample.

`BatchedRunner` schedules a step's rows for the model's family module (engine.runtime.families:
one module per architecture, built from shared pieces): all tokens of the step (decode tokens
and prefill chunks) go through the linear layers as one flat batch, so the weights are read
once per step; attention is done per group (all decodes together with a length mask, each
prefill chunk with a causal mask) against the preallocated slot KV cache. A step of decode
rows only, for the families whose math the native step covers, runs every layer in one
native call (engine.runtime.native_decode).

`FallbackRunner` serves any other causal LM through its own HF forward and cache, one sequence
at a time.
"""

from __future__ import annotations

import inspect
import logging
from typing import Any

import torch

from . import cpu_linear, families, native_decode
from .families.attention import StepLayout
from .kv_cache import KVCache, resolve_dtype
from .scheduler import ScheduledSeq
from .sequence import Sequence

log = logging.getLogger(__name__)


def supports_batched(model: Any, max_len: int) -> tuple[bool, str]:
    """Whether BatchedRunner can run `model`, and why not ("no native support for X")."""
    fam, why = families.build(model, max_len)
    return fam is not None, why


def unbatched_reason(model: Any, max_len: int = 2048) -> str:
    """What the engine says of a model off the batched path ("" when it is batched)."""
    ok, why = supports_batched(model, max_len)
    return "" if ok else f"runs unbatched: {why}"


# lm_head (and a tied embedding) at least this big is stored transposed on CPU; see below
HEAD_TRANSPOSE_MIN_BYTES = 64 << 20


def use_transposed_head(model: Any, mode: str = "auto") -> bool:
    """Store a big float32 lm_head on CPU as the transpose of a contiguous [hidden, vocab]
    tensor, so `F.linear` reaches the CPU BLAS as a plain x @ W product instead of x @ W^T.

    Measured on the 2-core AVX2 test machine (tests/bench/bench_gemm.py, docs/benchmarks.md):
    the Qwen2.5-0.5B head (896 x 151936) takes 33 instead of 51 ms at 1 row, 103 instead of
    146 ms at 8, 121 instead of 160 ms at 16 - the largest single product of a decode step.
    A tied embedding is re-pointed at the same storage (its row lookups then read strided
    columns: a few hundred microseconds per prefill chunk), so memory does not grow. Returns
    whether the layout was applied; "nn" forces it, "nt" never.
    """
    head = getattr(model, "lm_head", None)
    if mode == "nt" or type(head) is not torch.nn.Linear:
        return False
    w = head.weight
    if w.device.type != "cpu" or w.dtype != torch.float32 or w.dim() != 2:
        return False
    if not w.is_contiguous():
        return w.t().is_contiguous()  # True: already stored transposed (a second runner)
    if mode == "auto" and w.numel() * w.element_size() < HEAD_TRANSPOSE_MIN_BYTES:
        return False
    embed = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    tied = embed is not None and getattr(embed, "weight", None) is w
    with torch.no_grad():
        view = torch.nn.Parameter(w.detach().t().contiguous().t(), requires_grad=False)
    head.weight = view
    if tied:
        embed.weight = view
    return True


class BatchedRunner:
    path_kind = "batched"

    def __init__(self, model: Any, num_slots: int, max_len: int, kv_dtype: str = "auto",
                 head_layout: str = "auto", linear_kernels: str = "auto"):
        self.model = model
        fam, why = families.build(model, max_len)
        if fam is None:
            raise ValueError(f"no batched path: {why}")
        self.family = fam
        self.family_name = fam.name
        self.inner = fam.inner
        self.layers = fam.layers
        # fp32 products of decode-sized batches on the native kernel (engine.runtime.cpu_linear);
        # it reads nn.Linear's own layout, so a big head stays as it is
        native = linear_kernels != "torch" and cpu_linear.native_f32_available()
        self.linear_kernels = "torch"
        if native and any(cpu_linear.applies(m) for m in fam.linears() if m is not None):
            self.linear_kernels = "native"
            head_layout = "nt" if head_layout == "auto" else head_layout
        self.transposed_head = use_transposed_head(model, head_layout)
        on = self.linear_kernels == "native"
        fam.bind(on, on and not self.transposed_head)
        self.num_heads, self.num_kv_heads = fam.num_heads, fam.num_kv_heads
        self.head_dim, self.scaling = fam.head_dim, fam.scaling
        self.has_qk_norm = fam.has_qk_norm
        self.dtype, self.device = fam.dtype, fam.device
        self.max_len = max_len
        self.kv = KVCache(len(self.layers), num_slots, self.num_kv_heads, max_len, self.head_dim,
                          resolve_dtype(kv_dtype, self.dtype, self.device), self.device)
        # steps made only of decode rows: every layer in one native call (native_decode.py)
        if linear_kernels == "torch":
            self.decode_plan, self.decode_plan_reason = None, "PyTorch kernels requested"
        elif not fam.native_decode:
            self.decode_plan, self.decode_plan_reason = (
                None, f"the native step does not cover the {fam.name} family")
        else:
            self.decode_plan, self.decode_plan_reason = native_decode.plan_for(self)
        if self.decode_plan is None:
            log.info("decode steps on PyTorch: %s", self.decode_plan_reason)

    @property
    def kv_bytes(self) -> int:
        return self.kv.nbytes

    def prepare(self, admitted: list[Sequence]) -> None:
        for seq in admitted:
            if seq.copy_from is not None:
                src, n = seq.copy_from
                self.kv.copy_rows(src, seq.slot, n)
                seq.copy_from = None

    def release(self, seq: Sequence) -> None:
        pass  # rows stay in the slot for prefix reuse

    @torch.inference_mode()
    def execute(self, items: list[ScheduledSeq], decode_count: int) -> torch.Tensor:
        """Run the step; items[:decode_count] are single-token decodes, the rest prefill chunks.

        Returns float32 logits [R, vocab] for the items whose chunk ends at their last token,
        in item order.
        """
        ids: list[int] = []
        pos: list[int] = []
        slots: list[int] = []
        sample_rows: list[int] = []
        for it in items:
            seq = it.seq
            ids.extend(seq.token_slice(it.start, it.start + it.num_tokens))
            pos.extend(range(it.start, it.start + it.num_tokens))
            slots.extend([seq.slot] * it.num_tokens)
            if it.samples:
                sample_rows.append(len(ids) - 1)
        dev = self.device
        n_tok = len(ids)
        ids_t = torch.tensor(ids, dtype=torch.long, device=dev)
        if (self.decode_plan is not None and decode_count == len(items)
                and 0 < n_tok <= native_decode.MAX_ROWS):
            return self._native_decode(ids_t, torch.tensor(pos, dtype=torch.long),
                                       torch.tensor(slots))
        step = StepLayout.build(items, decode_count, pos, slots, dev)
        h = self.family.forward(self.family.embed(ids_t), step, self.kv.k, self.kv.v)
        if not sample_rows:
            return torch.empty(0, 0)
        rows = torch.tensor(sample_rows, device=dev)
        return self.family.logits(h[0].index_select(0, rows))

    def _native_decode(self, ids_t: torch.Tensor, pos_t: torch.Tensor,
                       slot_t: torch.Tensor) -> torch.Tensor:
        """A step of decode rows only (one token per sequence, all sampling) in one native
        call; the same result as the family's forward, up to float summation order."""
        h = self.family.embed(ids_t)[0].contiguous()  # [N, H] float32
        tables = self.family.rotary_tables(h[None], pos_t)
        if len(tables) == 1:  # [N, 1, rd] -> [1, N, rd] as a view: no copy for one table
            cos, sin = tables[0][0][None, :, 0], tables[0][1][None, :, 0]
        else:
            cos = torch.stack([c[:, 0] for c, _ in tables])
            sin = torch.stack([s[:, 0] for _, s in tables])
        self.decode_plan.run(h, slot_t, pos_t, cos, sin)
        return self.family.cap(self.family.head_fn(self.decode_plan.final_norm(h)).float())


class FallbackRunner:
    """Any causal LM through its own forward and cache; sequences run one after another."""

    path_kind = "fallback"

    def __init__(self, model: Any, num_slots: int, max_len: int, reason: str = ""):
        self.model = model
        self.reason = reason  # "runs unbatched: ...", shown by /v1/models and the Models page
        self.max_len = max_len
        self.device = next(model.parameters()).device
        # transformers renamed `past_key_values` to `cache` (5.x deprecation); use what exists
        params = inspect.signature(model.forward).parameters
        self._cache_kw = "cache" if "cache" in params else "past_key_values"

    @property
    def kv_bytes(self) -> int:
        return 0  # grows per request inside HF's cache; not preallocated

    def prepare(self, admitted: list[Sequence]) -> None:
        pass

    def release(self, seq: Sequence) -> None:
        seq.extra.pop("hf_cache", None)

    @torch.inference_mode()
    def execute(self, items: list[ScheduledSeq], decode_count: int) -> torch.Tensor:
        from transformers import DynamicCache

        rows = []
        for it in items:
            seq = it.seq
            cache = seq.extra.get("hf_cache")
            if cache is None:
                cache = seq.extra["hf_cache"] = DynamicCache()
            ids = torch.tensor([seq.token_slice(it.start, it.start + it.num_tokens)],
                               device=self.device)
            pos = torch.arange(it.start, it.start + it.num_tokens, device=self.device)[None]
            out = self.model(input_ids=ids, position_ids=pos, use_cache=True,
                             **{self._cache_kw: cache})
            if it.samples:
                rows.append(out.logits[0, -1].float())
        return torch.stack(rows) if rows else torch.empty(0, 0)


def _error_text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def run_step(runner, items: list[ScheduledSeq], decode_count: int):
    """Run a step, containing failures to the sequences they concern.

    Returns (sampling items that succeeded, their logits [R, V], [(failed item, message)]).
    When the batched step raises, each item is re-run alone: rewriting the same KV rows is
    idempotent, so the healthy ones complete and only the culprit fails.
    """
    if isinstance(runner, FallbackRunner):
        return _one_by_one(runner, items, 0)
    try:
        logits = runner.execute(items, decode_count)
        return [it for it in items if it.samples], logits, []
    except Exception:  # isolate the culprit below
        log.debug("batched step failed; re-running its sequences one by one", exc_info=True)
    return _one_by_one(runner, items, decode_count)


def _one_by_one(runner: Any, items: list, decode_count: int):
    """Each item in a step of its own (the first `decode_count` as decodes): a failure fails
    only its own request."""
    ok, rows, failed = [], [], []
    for i, it in enumerate(items):
        try:
            logits = runner.execute([it], 1 if i < decode_count else 0)
        except Exception as exc:  # noqa: BLE001 - contained to this request
            failed.append((it, _error_text(exc)))
            continue
        if it.samples:
            ok.append(it)
            rows.append(logits[0])
    return ok, (torch.stack(rows) if rows else None), failed


def make_runner(model: Any, num_slots: int, max_len: int, force_fallback: bool = False,
                kv_dtype: str = "auto", linear_kernels: str = "auto"):
    ok, why = supports_batched(model, max_len)
    if ok and not force_fallback:
        return BatchedRunner(model, num_slots, max_len, kv_dtype=kv_dtype,
                             linear_kernels=linear_kernels)
    reason = "runs unbatched: " + (why if not ok else "the batched path was turned off")
    log.info("%s", reason)
    return FallbackRunner(model, num_slots, max_len, reason)
