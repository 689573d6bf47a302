"""The decoder skeleton every family module builds on: embedding (plain or scaled, tied or
not), rotary tables, per-layer windows, the pre-norm residual block of Llama, the final norm,
the head and an optional logit soft-cap. A family overrides only what differs (Phi-3's fused
q/k/v, Gemma's sandwich norms, ...).

Projections, norms and MLPs are called as the model's own modules, never through `.weight`, so
quantized replacements of nn.Linear drop in; plain fp32 linears on CPU can be swapped for the
native decode-sized kernel (engine.runtime.cpu_linear) by `bind`. The modules are looked up
once, so a model is quantized before it is served, not while.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any, ClassVar

import torch

from .. import cpu_linear
from .attention import StepLayout, apply_rope, attend


@dataclass(frozen=True)
class NativeParts:
    """Where the native decode step (engine.runtime.native_decode) finds one layer's parts:
    each projection as (module, first row), the first row None for a whole module and a number
    for a slice of a fused one; the norm before attention, the one before the MLP, and the
    optional norms of the attention and MLP outputs (Gemma's sandwich); the MLP's gate
    activation module."""

    q: tuple
    k: tuple
    v: tuple
    o: tuple
    gate: tuple
    up: tuple
    down: tuple
    in_norm: Any
    post_norm: Any
    act: Any
    attn_out_norm: Any = None
    mlp_out_norm: Any = None


class DecoderFamily:
    """A Llama-shaped causal LM: model.model.{embed_tokens, layers, norm, rotary_emb} and
    model.lm_head; each layer self_attn.{q,k,v,o}_proj (+ q_norm / k_norm), mlp,
    input_layernorm, post_attention_layernorm."""

    name: ClassVar[str] = "llama"
    # the native decode step (engine/kernels/cpu_decode.c) computes this family's math:
    # RMSNorm, rotate-half rotary (full or partial), GQA, windows, optional q/k/v bias, q/k
    # norm, soft-capped scores and sandwich norms, SiLU- or GELU-gated MLP (native_parts)
    native_decode: ClassVar[bool] = True
    # RMSNorm scales by (norm_offset + w): 1 for Gemma
    norm_offset: ClassVar[float] = 0.0

    def __init__(self, model: Any, max_len: int):
        self.model = model
        self.cfg = cfg = model.config
        self.inner = model.model
        self.layers = list(self.inner.layers)
        self.max_len = max_len
        self.num_heads = cfg.num_attention_heads
        self.num_kv_heads = getattr(cfg, "num_key_value_heads", None) or self.num_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // self.num_heads
        attn0 = self.layers[0].self_attn
        self.scaling = float(getattr(attn0, "scaling", self.head_dim ** -0.5))
        self.has_qk_norm = hasattr(attn0, "q_norm") and hasattr(attn0, "k_norm")
        self.attn_softcap = getattr(cfg, "attn_logit_softcapping", None) or None
        self.final_softcap = getattr(cfg, "final_logit_softcapping", None) or None
        # a window at least as long as a slot never hides a key: no window at all
        self.windows = [w if w and w < max_len else None
                        for w in (self._window(layer) for layer in self.layers)]
        embed = self.inner.embed_tokens
        # an int8 embedding (QuantEmbedding) declares the float dtype it produces
        self.dtype = getattr(embed, "float_dtype", None) or embed.weight.dtype
        self.device = self.inner.norm.weight.device
        self.calls: list[tuple] = []
        self.head = model.lm_head
        self._rope_cache: dict = {}  # rope_rows' tables, per layer kind

    # -- what a family may override --------------------------------------------------------

    def _window(self, layer: Any) -> int | None:
        """This layer's sliding window (None: full attention)."""
        attn = layer.self_attn
        if hasattr(attn, "sliding_window"):
            return attn.sliding_window or None
        if getattr(self.cfg, "use_sliding_window", True) is False:
            return None
        return getattr(self.cfg, "sliding_window", None) or None

    def check(self) -> str:
        """Why this model cannot run on the family's path ("" when it can)."""
        for attr in ("embed_tokens", "layers", "norm", "rotary_emb"):
            if not hasattr(self.inner, attr):
                return f"model has no model.{attr}"
        return ""

    def layer_linears(self, layer: Any) -> list:
        a, mlp = layer.self_attn, layer.mlp
        return [a.q_proj, a.k_proj, a.v_proj, a.o_proj] + [
            getattr(mlp, n, None) for n in ("gate_proj", "up_proj", "down_proj")]

    def layer_calls(self, layer: Any, native: bool) -> tuple:
        """(q, k, v, o, mlp) of one layer: each the module or its native stand-in."""
        a = layer.self_attn
        return (*(cpu_linear.linear_fn(p, native) for p in (a.q_proj, a.k_proj, a.v_proj,
                                                             a.o_proj)),
                cpu_linear.mlp_fn(layer.mlp, native))

    def rotary_tables(self, h: torch.Tensor, pos_t: torch.Tensor) -> list[tuple]:
        """The distinct rotary tables, (cos, sin) [N, 1, rd] each: one shared by all layers."""
        cos, sin = self.rope_rows(h, pos_t)
        return [(cos[:, None, :], sin[:, None, :])]

    def rope_rows(self, h: torch.Tensor, pos_t: torch.Tensor,
                  kind: str | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """cos, sin [N, rd] of positions pos_t (for layers of `kind`, where the model's rotary
        embedding takes one). On CPU, where the frequencies do not depend on the sequence length
        (every RoPE type but "dynamic" and "longrope"), rows of a table the model's own
        rotary_emb computed once, grown by doubling: its half-dozen ops took 0.1-0.17 ms of
        every decode step. Each entry is one product and its cos / sin, so the rows equal what
        the module gives for these positions alone (tests/test_model_families.py)."""
        args = () if kind is None else (kind,)
        if h.device.type != "cpu" or not self._rope_is_static or not pos_t.numel():
            cos, sin = self.inner.rotary_emb(h, pos_t[None], *args)
            return cos[0], sin[0]
        need = int(pos_t.max()) + 1
        table = self._rope_cache.get(kind)
        if table is None or table[0].shape[0] < need or table[0].dtype != h.dtype:
            grown = 2 * table[0].shape[0] if table is not None else 128
            rows = max(need, min(grown, self.max_len))
            cos, sin = self.inner.rotary_emb(h, torch.arange(rows)[None], *args)
            table = self._rope_cache[kind] = (cos[0], sin[0])
        return table[0][pos_t], table[1][pos_t]

    @cached_property
    def _rope_is_static(self) -> bool:
        kinds = getattr(self.inner.rotary_emb, "rope_type", "default")
        kinds = kinds.values() if isinstance(kinds, dict) else [kinds]
        return all(isinstance(k, str) and "dynamic" not in k and k != "longrope" for k in kinds)

    @cached_property  # a fact of the model, asked every step
    def rope_table_of(self) -> list[int]:
        """Which of rotary_tables each layer turns with."""
        return [0] * len(self.layers)

    def rotary(self, h: torch.Tensor, pos_t: torch.Tensor) -> list[tuple]:
        """(cos, sin) [N, 1, rd] per layer."""
        tables = self.rotary_tables(h, pos_t)
        return [tables[i] for i in self.rope_table_of]

    def native_parts(self, layer: Any) -> NativeParts:
        a, mlp = layer.self_attn, layer.mlp
        return NativeParts(*((m, None) for m in (a.q_proj, a.k_proj, a.v_proj, a.o_proj,
                                                 getattr(mlp, "gate_proj", None), mlp.up_proj,
                                                 mlp.down_proj)),
                           in_norm=layer.input_layernorm,
                           post_norm=layer.post_attention_layernorm,
                           act=getattr(mlp, "act_fn", None))

    def qkv(self, li: int, x: torch.Tensor, n_tok: int) -> tuple:
        q_proj, k_proj, v_proj = self.calls[li][:3]
        return (q_proj(x).view(n_tok, self.num_heads, self.head_dim),
                k_proj(x).view(n_tok, self.num_kv_heads, self.head_dim),
                v_proj(x).view(n_tok, self.num_kv_heads, self.head_dim))

    def attention(self, li: int, x: torch.Tensor, step: StepLayout, rope: tuple,
                  kv: tuple) -> torch.Tensor:
        """Self-attention of layer li on normed x [1, N, H], through o_proj."""
        attn = self.layers[li].self_attn
        q, k, v = self.qkv(li, x, step.n_tok)
        if self.has_qk_norm:
            q, k = attn.q_norm(q), attn.k_norm(k)
        cos, sin = rope
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        o = attend(q, k, v, kv[0], kv[1], step, self.scaling, self.windows[li],
                   self.attn_softcap)
        return self.calls[li][3](o.to(x.dtype)[None])

    def layer(self, li: int, h: torch.Tensor, step: StepLayout, rope: tuple,
              kv: tuple) -> torch.Tensor:
        """Pre-norm residual block: h + attn(norm(h)), then h + mlp(norm(h))."""
        layer = self.layers[li]
        h = h + self.attention(li, layer.input_layernorm(h), step, rope, kv)
        return h + self.calls[li][4](layer.post_attention_layernorm(h))

    # -- shared --------------------------------------------------------------------------

    def linears(self):
        for layer in self.layers:
            yield from self.layer_linears(layer)
        yield self.head

    def bind(self, native: bool, native_head: bool) -> None:
        self.calls = [self.layer_calls(layer, native) for layer in self.layers]
        self.head_fn = cpu_linear.linear_fn(self.model.lm_head, native_head)

    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        """[1, N, H] (HF modules expect a batch dim); a scaled embedding scales itself."""
        return self.inner.embed_tokens(ids)[None]

    def forward(self, h: torch.Tensor, step: StepLayout, kv_k: torch.Tensor,
                kv_v: torch.Tensor) -> torch.Tensor:
        ropes = self.rotary(h, step.pos_t)
        for li in range(len(self.layers)):
            h = self.layer(li, h, step, ropes[li], (kv_k[li], kv_v[li]))
        return h

    def logits(self, h_rows: torch.Tensor) -> torch.Tensor:
        """Float32 logits of the final hidden rows [R, H]."""
        return self.cap(self.head_fn(self.inner.norm(h_rows)).float())

    def cap(self, logits: torch.Tensor) -> torch.Tensor:
        if self.final_softcap:
            logits = torch.tanh(logits / self.final_softcap) * self.final_softcap
        return logits
