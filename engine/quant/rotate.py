"""Rotate the residual stream by one orthogonal matrix (QuaRot / SpinQuant's R1), and each
value head by another (R2), offline.

An RMSNorm without its weight commutes with an orthogonal Q: rms(hQ) = rms(h). So once every
norm's weight is folded into the linears it feeds, the whole residual stream can live in a
rotated basis: embeddings E -> EQ, every reader of the stream (q/k/v, gate/up, the head)
W -> WQ, every writer (o_proj, down_proj) W -> Q^T W. The float model computes the same
function to rounding; what changes is that a few channels no longer carry most of the
activation range, which is what a per-tensor static int8 scale cannot follow. The rotated model
is an ordinary checkpoint (norm weights of one, an untied head): every export format carries it.
The value heads turn the same way, per head: v_proj's rows and o_proj's matching columns, so
o_proj's input is spread too. down_proj's input would need a turn at run time (QuaRot's online
Hadamard), which no export format could carry: not done.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from .config import QuantError
from .head import head_is_tied

ROTATE_MODES = ("off", "on")
SEED = 0


@dataclass(frozen=True)
class Stream:
    """The modules that read and write one model's residual stream."""

    embed: torch.nn.Embedding
    head: torch.nn.Linear
    final_norm: torch.nn.Module
    # (norm, readers) per norm that feeds linears; writers add into the stream
    norms: tuple[tuple[torch.nn.Module, tuple[torch.nn.Linear, ...]], ...]
    writers: tuple[torch.nn.Linear, ...]
    # (v_proj, o_proj, head_dim) per layer: the value heads' basis, turned per head
    values: tuple[tuple[torch.nn.Linear, torch.nn.Linear, int], ...]


def _plain_rmsnorm(mod: Any) -> bool:
    # Gemma's (1 + w) norms and LayerNorm's centring would not fold as a plain scale
    return (type(mod).__name__.endswith("RMSNorm") and "Gemma" not in type(mod).__name__
            and isinstance(getattr(mod, "weight", None), torch.Tensor)
            and getattr(mod, "bias", None) is None)


def find_stream(model: Any) -> Stream:
    body = getattr(model, "model", None)
    layers = getattr(body, "layers", None)
    embed = getattr(body, "embed_tokens", None)
    head = getattr(model, "lm_head", None)
    final = getattr(body, "norm", None)
    if layers is None or not isinstance(embed, torch.nn.Embedding) \
            or not isinstance(head, torch.nn.Linear) or not _plain_rmsnorm(final):
        raise QuantError(f"cannot rotate {type(model).__name__}: needs a decoder with a token "
                         "embedding, a linear head and RMSNorm")
    if getattr(getattr(model, "config", None), "embedding_multiplier", None):
        raise QuantError("cannot rotate a model that scales its embeddings")
    norms, writers, values = [], [], []
    for i, layer in enumerate(layers):
        attn, mlp = getattr(layer, "self_attn", None), getattr(layer, "mlp", None)
        parts = {n: getattr(attn, n, None) for n in ("q_proj", "k_proj", "v_proj", "o_proj")}
        parts.update({n: getattr(mlp, n, None) for n in ("gate_proj", "up_proj", "down_proj")})
        pre, post = (getattr(layer, n, None) for n in ("input_layernorm",
                                                       "post_attention_layernorm"))
        if not all(isinstance(m, torch.nn.Linear) for m in parts.values()) \
                or not (_plain_rmsnorm(pre) and _plain_rmsnorm(post)) \
                or any(hasattr(layer, n) for n in ("pre_feedforward_layernorm",
                                                   "post_feedforward_layernorm")):
            raise QuantError(f"cannot rotate layer {i} of {type(model).__name__}: needs "
                             "q/k/v/o and gate/up/down linears behind plain RMSNorms")
        norms.append((pre, (parts["q_proj"], parts["k_proj"], parts["v_proj"])))
        norms.append((post, (parts["gate_proj"], parts["up_proj"])))
        writers += [parts["o_proj"], parts["down_proj"]]
        hd = getattr(attn, "head_dim", None)
        if hd and parts["v_proj"].out_features % hd == 0 \
                and parts["o_proj"].in_features % hd == 0:
            values.append((parts["v_proj"], parts["o_proj"], int(hd)))
    return Stream(embed, head, final, tuple(norms), tuple(writers), tuple(values))


@dataclass(frozen=True)
class RotationDecision:
    mode: str  # off / on, as asked
    rotate: bool
    reason: str


def check_mode(mode: str) -> None:
    if mode not in ROTATE_MODES:
        raise QuantError(f"unknown rotation {mode!r}; choose one of {', '.join(ROTATE_MODES)}")


def decide(mode: str, method: str, model: Any) -> RotationDecision:
    """Whether to rotate this model: 'on' for a model that cannot be rotated is refused here,
    right after the load, before any calibration. Off unless asked: on SmolLM2 it moved the
    dev text but not the worst evaluation text, and it unties a tied head (docs/quantization.md,
    "The residual stream rotated")."""
    check_mode(mode)
    if mode == "off":
        return RotationDecision(mode, False, "off (the default)")
    try:
        find_stream(model)
    except QuantError as exc:
        raise QuantError(f"--rotate on is not possible for this model: {exc}") from None
    return RotationDecision(mode, True, f"asked for, before {method}"
                            + (" (the head is untied from the embedding)"
                               if head_is_tied(model) else ""))


def random_orthogonal(dim: int, seed: int) -> torch.Tensor:
    """A seeded orthogonal matrix in float64: QR of a Gaussian with the signs fixed, so the
    same seed gives the same Q on every CPU up to float64 rounding."""
    g = torch.Generator().manual_seed(seed)
    q, r = torch.linalg.qr(torch.randn(dim, dim, generator=g, dtype=torch.float64))
    return q * torch.sign(torch.diagonal(r)).unsqueeze(0)


def hadamard_factors(dim: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """hadamard_orthogonal's factors, float64: the random signs D [dim] and the odd part's
    seeded orthogonal R_m [m, m] (m = dim over its largest power-of-two divisor; [[1]] when dim
    is a power of two). What a turn at run time keeps (engine.kernels.turn)."""
    two = dim & -dim  # the largest power of two dividing dim
    odd = dim // two
    r = random_orthogonal(odd, seed + 1) if odd > 1 else torch.ones(1, 1, dtype=torch.float64)
    g = torch.Generator().manual_seed(seed)
    signs = torch.randint(0, 2, (dim,), generator=g).to(torch.float64) * 2 - 1
    return signs, r.contiguous()


def hadamard_orthogonal(dim: int, seed: int) -> torch.Tensor:
    """A seeded orthogonal matrix with entries as flat as the width allows: D (H_2^k (x) R_m)
    for dim = 2^k * m, with H Sylvester's Hadamard matrix, R_m a seeded random orthogonal of the
    odd part (1 when dim is a power of two) and D random signs. Every entry of H_2^k is
    +-1/sqrt(2^k), so no output channel leans on a few inputs, whatever the seed."""
    return hadamard_from_factors(*hadamard_factors(dim, seed))


def hadamard_from_factors(signs: torch.Tensor, odd: torch.Tensor) -> torch.Tensor:
    """D (H (x) Q) from its factors (hadamard_factors), in float64."""
    h = torch.ones(1, 1, dtype=torch.float64)
    while h.shape[0] < signs.shape[0] // odd.shape[0]:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    h = h / h.shape[0] ** 0.5
    return signs.double().unsqueeze(1) * torch.kron(h, odd.double())


def _set(lin: torch.nn.Module, name: str, value: torch.Tensor) -> None:
    p = getattr(lin, name)
    setattr(lin, name, torch.nn.Parameter(value.to(p.dtype), requires_grad=False))


@torch.no_grad()
def rotate_residual(model: Any, seed: int = SEED,
                    progress: Callable[[str, int, int], None] | None = None,
                    kind: str = "hadamard", values: bool = True) -> torch.Tensor:
    """Rotate `model` in place; returns Q. The head is untied from the embedding (the final
    norm's weight folds into the head only). progress("rotate", done, total) after each
    norm's readers and each writer; it may raise to cancel (the model is then half turned)."""
    s = find_stream(model)
    q = (hadamard_orthogonal if kind == "hadamard" else random_orthogonal)(
        s.embed.weight.shape[1], seed)
    if head_is_tied(model):
        s.head.weight = torch.nn.Parameter(s.embed.weight.detach().clone(), requires_grad=False)
    cfg = getattr(model, "config", None)
    for c in (cfg, cfg.get_text_config() if hasattr(cfg, "get_text_config") else None):
        if c is not None:
            c.tie_word_embeddings = False
    # float64: a 4096-wide product in float32 would move the function by more than int8 noise
    # is measured against
    one = torch.float64

    def fold_norm(norm, readers):
        w = norm.weight.to(one)
        for lin in readers:
            _set(lin, "weight", (lin.weight.to(one) * w) @ q)
        norm.weight.data.fill_(1.0)

    def turn_writer(lin):
        _set(lin, "weight", q.T @ lin.weight.to(one))
        if lin.bias is not None:
            _set(lin, "bias", lin.bias.to(one) @ q)

    jobs = [lambda n=n, r=r: fold_norm(n, r) for n, r in s.norms + ((s.final_norm, (s.head,)),)]
    jobs += [lambda lin=lin: turn_writer(lin) for lin in s.writers]
    jobs.append(lambda: _set(s.embed, "weight", s.embed.weight.to(one) @ q))

    def turn_values(v, o, hd):
        # every value head v_h -> v_h R, so each attention output a_h -> a_h R (the softmax
        # mixes positions, not channels) and o_proj's block of columns for it -> W R
        r = hadamard_orthogonal(hd, seed)
        wv = v.weight.to(one).reshape(-1, hd, v.in_features)
        _set(v, "weight", (r.T @ wv).reshape(v.weight.shape))
        if v.bias is not None:
            _set(v, "bias", (v.bias.to(one).reshape(-1, hd) @ r).reshape(-1))
        wo = o.weight.to(one).reshape(o.out_features, -1, hd)
        _set(o, "weight", (wo @ r).reshape(o.weight.shape))

    if values:
        jobs += [lambda v=v, o=o, hd=hd: turn_values(v, o, hd) for v, o, hd in s.values]
    for i, job in enumerate(jobs):
        job()
        if progress is not None:
            progress("rotate", i + 1, len(jobs))
    return q
