"""Model runners: turn one scheduled step into logits for the sequences that sample.

`BatchedRunner` runs Llama-shaped decoders (Llama, Qwen2, Qwen3, Mistral) with our own forward
over the Hugging Face module's submodules: all tokens of the step (decode tokens and prefill
chunks) go through the linear layers as one flat batch, so the weights are read once per step;
attention is done per group (all decodes together with a length mask, each prefill chunk with a
causal mask) against the preallocated slot KV cache. Projections and MLPs are called as modules,
never through `.weight`, so quantized replacements of nn.Linear work unchanged; plain fp32
linears on CPU go to the native decode kernel instead (engine.runtime.cpu_linear). The runner
looks the modules up once, so a model is quantized before it is served, not while.

`FallbackRunner` serves any other causal LM through its own HF forward and cache, one sequence
at a time.
"""

from __future__ import annotations

import inspect
import logging
from typing import Any

import torch
import torch.nn.functional as F
from npu_console.engine.runtime import cpu_linear, native_decode
from npu_console.engine.runtime.kv_cache import KVCache
from npu_console.engine.runtime.scheduler import ScheduledSeq
from npu_console.engine.runtime.sequence import Sequence

log = logging.getLogger(__name__)

BATCHED_MODEL_TYPES = {"llama", "qwen2", "qwen3", "mistral"}


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def supports_batched(model: Any, max_len: int) -> tuple[bool, str]:
    """Whether BatchedRunner can run `model`, and why not."""
    cfg = model.config
    mtype = getattr(cfg, "model_type", "")
    if mtype not in BATCHED_MODEL_TYPES:
        return False, f"model type {mtype!r} has no batched path"
    inner = getattr(model, "model", None)
    for attr in ("embed_tokens", "layers", "norm", "rotary_emb"):
        if not hasattr(inner, attr):
            return False, f"model has no model.{attr}"
    if not hasattr(model, "lm_head"):
        return False, "model has no lm_head"
    window = getattr(cfg, "sliding_window", None)
    if window and getattr(cfg, "use_sliding_window", True) and window < max_len:
        return False, f"sliding-window attention ({window}) is not in the batched path"
    return True, ""


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


def resolve_kv_dtype(kv_dtype: str, model_dtype: torch.dtype, device) -> torch.dtype:
    """"auto": float32 on CPU (CPU matmuls in bf16/fp16 are several times slower than in fp32
    at attention's small shapes, and the cache is small next to host memory), the model's dtype
    on accelerators."""
    if kv_dtype != "auto":
        return getattr(torch, kv_dtype)
    return torch.float32 if torch.device(device).type == "cpu" else model_dtype


class BatchedRunner:
    path_kind = "batched"

    def __init__(self, model: Any, num_slots: int, max_len: int, kv_dtype: str = "auto",
                 head_layout: str = "auto", linear_kernels: str = "auto"):
        self.model = model
        cfg = model.config
        self.inner = model.model
        self.layers = list(self.inner.layers)
        # fp32 products of decode-sized batches on the native kernel (engine.runtime.cpu_linear);
        # it reads nn.Linear's own layout, so a big head stays as it is
        native = linear_kernels != "torch" and cpu_linear.native_f32_available()
        self.linear_kernels = "torch"
        if native and any(cpu_linear.applies(m) for m in self._linears()):
            self.linear_kernels = "native"
            head_layout = "nt" if head_layout == "auto" else head_layout
        self.transposed_head = use_transposed_head(model, head_layout)
        on = self.linear_kernels == "native"
        self._calls = [self._layer_calls(layer, on) for layer in self.layers]
        self._head = cpu_linear.linear_fn(model.lm_head, on and not self.transposed_head)
        self.num_heads = cfg.num_attention_heads
        self.num_kv_heads = getattr(cfg, "num_key_value_heads", None) or self.num_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // self.num_heads
        attn0 = self.layers[0].self_attn
        self.scaling = getattr(attn0, "scaling", self.head_dim ** -0.5)
        self.has_qk_norm = hasattr(attn0, "q_norm") and hasattr(attn0, "k_norm")
        embed = self.inner.embed_tokens
        # an int8 embedding (QuantEmbedding) declares the float dtype it produces
        self.dtype = getattr(embed, "float_dtype", None) or embed.weight.dtype
        self.device = self.inner.norm.weight.device
        self.max_len = max_len
        self.kv = KVCache(len(self.layers), num_slots, self.num_kv_heads, max_len, self.head_dim,
                          resolve_kv_dtype(kv_dtype, self.dtype, self.device), self.device)
        # steps made only of decode rows: every layer in one native call (native_decode.py)
        self.decode_plan, self.decode_plan_reason = (
            native_decode.plan_for(self) if linear_kernels != "torch"
            else (None, "PyTorch kernels requested"))
        if self.decode_plan is None:
            log.info("decode steps on PyTorch: %s", self.decode_plan_reason)

    @staticmethod
    def _layer_calls(layer: Any, native: bool) -> tuple:
        """(q, k, v, o projections, MLP) of one layer: each the module or its native stand-in."""
        a = layer.self_attn
        projections = (a.q_proj, a.k_proj, a.v_proj, a.o_proj)
        return (*(cpu_linear.linear_fn(p, native) for p in projections),
                cpu_linear.mlp_fn(layer.mlp, native))

    def _linears(self):
        for layer in self.layers:
            a = layer.self_attn
            yield from (a.q_proj, a.k_proj, a.v_proj, a.o_proj)
            yield from (getattr(layer.mlp, n, None) for n in ("gate_proj", "up_proj", "down_proj"))
        yield getattr(self.model, "lm_head", None)

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
        pos_t = torch.tensor(pos, dtype=torch.long, device=dev)
        if (self.decode_plan is not None and decode_count == len(items)
                and 0 < n_tok <= native_decode.MAX_ROWS):
            return self._native_decode(ids_t, pos_t, torch.tensor(slots))
        slot_t = torch.tensor(slots, dtype=torch.long, device=dev)

        h = self.inner.embed_tokens(ids_t)[None]  # [1, N, H]: HF modules expect a batch dim
        cos, sin = self.inner.rotary_emb(h, pos_t[None])
        cos = cos[0][:, None, :]  # [N, 1, hd], broadcast over heads
        sin = sin[0][:, None, :]

        # per-step attention inputs shared by all layers
        dec = items[:decode_count]
        dec_view = None
        dec_mask = None
        dec_perm = dec_unperm = None
        if dec:
            # attention runs in slot order: when the running sequences fill a range of slots
            # (the usual case under load) K/V are a view of the cache, not a gathered copy
            order = sorted(range(decode_count), key=lambda i: dec[i].seq.slot)
            if order != list(range(decode_count)):
                dec_perm = torch.tensor(order, device=dev)
                dec_unperm = torch.argsort(dec_perm)
            dec_slots = [dec[i].seq.slot for i in order]
            dec_len = [dec[i].start + 1 for i in order]
            lmax = max(dec_len)
            s0 = dec_slots[0]
            contiguous = dec_slots == list(range(s0, s0 + len(dec_slots)))
            dec_view = (s0, len(dec_slots), lmax) if contiguous else (
                torch.tensor(dec_slots, device=dev), None, lmax)
            lens_t = torch.tensor(dec_len, device=dev)
            # True where a key lies beyond the sequence's length (masked out)
            dec_mask = (torch.arange(lmax, device=dev)[None, :] >= lens_t[:, None])[:, None, None, :]
        pre = []
        off = decode_count
        for it in items[decode_count:]:
            mask = None
            if it.start > 0:
                q_pos = torch.arange(it.start, it.start + it.num_tokens, device=dev)
                mask = torch.arange(it.start + it.num_tokens, device=dev)[None, :] <= q_pos[:, None]
            pre.append((off, it.num_tokens, it.seq.slot, it.start + it.num_tokens, mask))
            off += it.num_tokens

        nh, kvh, hd = self.num_heads, self.num_kv_heads, self.head_dim
        groups = nh // kvh
        kc, vc = self.kv.k, self.kv.v
        kdt = kc.dtype
        for li, layer in enumerate(self.layers):
            attn = layer.self_attn
            q_proj, k_proj, v_proj, o_proj, mlp = self._calls[li]
            x = layer.input_layernorm(h)
            q = q_proj(x).view(n_tok, nh, hd)
            k = k_proj(x).view(n_tok, kvh, hd)
            v = v_proj(x).view(n_tok, kvh, hd)
            if self.has_qk_norm:
                q = attn.q_norm(q)
                k = attn.k_norm(k)
            q = q * cos + _rotate_half(q) * sin
            k = k * cos + _rotate_half(k) * sin
            k_l, v_l = kc[li], vc[li]  # [slots, kvh, L, hd]
            k_l[slot_t, :, pos_t] = k.to(kdt)
            v_l[slot_t, :, pos_t] = v.to(kdt)

            outs = []
            if dec:
                a, b, lmax = dec_view
                if b is not None:
                    kk, vv = k_l[a:a + b, :, :lmax], v_l[a:a + b, :, :lmax]
                else:  # gather only the first lmax rows of the scattered slots
                    kk = k_l[:, :, :lmax].index_select(0, a)
                    vv = v_l[:, :, :lmax].index_select(0, a)
                # single-query attention as two batched matmuls with the query heads of a KV
                # head grouped together (GQA without repeating K/V); on CPU this is several
                # times faster than SDPA's kernel for one query row
                qd = q[:decode_count]
                if dec_perm is not None:
                    qd = qd.index_select(0, dec_perm)
                qd = qd.to(kdt).view(decode_count, kvh, groups, hd)
                scores = torch.matmul(qd, kk.transpose(-1, -2)) * self.scaling
                scores = scores.masked_fill(dec_mask, float("-inf"))
                o = torch.matmul(torch.softmax(scores, dim=-1), vv).reshape(decode_count, nh * hd)
                outs.append(o if dec_unperm is None else o.index_select(0, dec_unperm))
            for (o0, n, slot, ctx, mask) in pre:
                qp = q[o0:o0 + n].to(kdt).transpose(0, 1)[None]  # [1, nh, n, hd]
                kk = k_l[slot:slot + 1, :, :ctx]
                vv = v_l[slot:slot + 1, :, :ctx]
                o = F.scaled_dot_product_attention(qp, kk, vv, attn_mask=mask,
                                                   is_causal=mask is None, scale=self.scaling,
                                                   enable_gqa=True)
                outs.append(o[0].transpose(0, 1).reshape(n, nh * hd))
            o = outs[0] if len(outs) == 1 else torch.cat(outs, dim=0)
            h = h + o_proj(o.to(h.dtype)[None])
            h = h + mlp(layer.post_attention_layernorm(h))

        if not sample_rows:
            return torch.empty(0, 0)
        rows = torch.tensor(sample_rows, device=dev)
        last = self.inner.norm(h[0].index_select(0, rows))
        return self._head(last).float()

    def _native_decode(self, ids_t: torch.Tensor, pos_t: torch.Tensor,
                       slot_t: torch.Tensor) -> torch.Tensor:
        """A step of decode rows only (one token per sequence, all sampling) in one native
        call; the same result as the loop above, up to float summation order."""
        h = self.inner.embed_tokens(ids_t).contiguous()  # [N, H] float32
        cos, sin = self.inner.rotary_emb(h[None], pos_t[None])
        self.decode_plan.run(h, slot_t, pos_t, cos[0], sin[0])
        return self._head(self.decode_plan.final_norm(h)).float()


class FallbackRunner:
    """Any causal LM through its own forward and cache; sequences run one after another."""

    path_kind = "fallback"

    def __init__(self, model: Any, num_slots: int, max_len: int):
        self.model = model
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
    ok, _why = supports_batched(model, max_len)
    if ok and not force_fallback:
        return BatchedRunner(model, num_slots, max_len, kv_dtype=kv_dtype,
                             linear_kernels=linear_kernels)
    return FallbackRunner(model, num_slots, max_len)
