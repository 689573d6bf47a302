"""SmoothQuant (Xiao et al. 2023): move activation outliers into the weights before W8A8.

For input channel j of the linears that share one input X:
    s_j = max|X_j|^alpha / max|W_j|^(1 - alpha)
X is divided by s (folded into whatever produced X) and W's column j multiplied by s_j. The float
model computes exactly the same function afterwards; only the int8 ranges change.

Producers we can fold into, per Llama-style decoder layer:
* input_layernorm -> q_proj, k_proj, v_proj        (norm weight /= s)
* post_attention_layernorm -> gate_proj, up_proj   (norm weight /= s)
* v_proj -> o_proj   o_proj's input channel (head h, dim d) is a weighted sum of v_proj's
                     output channel (kv head of h, dim d). With grouped-query attention several
                     query heads read one value head, so the factor is tied: one s per value
                     channel, taken over the query heads that share it (`tie`)
* up_proj -> down_proj   (down's input is act(gate) * up, linear in up's output rows)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from .calib import ActStats
from .turn import is_turned


@dataclass(frozen=True)
class SmoothGroup:
    producer: str  # module name of the norm or linear that makes the input
    kind: str  # "norm" or "linear"
    consumers: tuple[str, ...]
    repeat: int = 1  # v -> o with GQA: query heads per value head
    head_dim: int = 0

    def tie(self, per_channel: torch.Tensor) -> torch.Tensor:
        """Consumer-channel maxima -> the same, equal across channels that one producer
        channel feeds (max over them), so any factor computed from them folds exactly."""
        if self.repeat == 1:
            return per_channel
        v = per_channel.reshape(-1, self.repeat, self.head_dim).amax(1, keepdim=True)
        return v.expand(-1, self.repeat, -1).reshape(-1)

    def producer_factors(self, s: torch.Tensor) -> torch.Tensor:
        """Tied consumer-channel factors -> one per producer output channel."""
        if self.repeat == 1:
            return s
        return s.reshape(-1, self.repeat, self.head_dim)[:, 0].reshape(-1)


def find_groups(model: Any, gqa: bool = False) -> list[SmoothGroup]:
    """`gqa`: also v_proj -> o_proj under grouped-query attention (a tied factor per value
    channel). Off unless asked: on SmolLM2 it halved o_proj's own int8 error yet measured
    +1.68 % against +1.46 % without it for static W8A8, so only a search that scores it
    (or a caller that wants it) turns it on."""
    mods = dict(model.named_modules())
    cfg = getattr(model, "config", None)
    heads = getattr(cfg, "num_attention_heads", None)
    kv_heads = getattr(cfg, "num_key_value_heads", None) or heads
    groups = []
    for name, mod in mods.items():
        if not (hasattr(mod, "self_attn") and hasattr(mod, "mlp")):
            continue
        attn, mlp = f"{name}.self_attn", f"{name}.mlp"
        qkv = tuple(f"{attn}.{p}" for p in ("q_proj", "k_proj", "v_proj"))
        if f"{name}.input_layernorm" in mods and all(isinstance(mods.get(c), torch.nn.Linear)
                                                     for c in qkv):
            groups.append(SmoothGroup(f"{name}.input_layernorm", "norm", qkv))
        gu = (f"{mlp}.gate_proj", f"{mlp}.up_proj")
        if f"{name}.post_attention_layernorm" in mods and all(
                isinstance(mods.get(c), torch.nn.Linear) for c in gu):
            groups.append(SmoothGroup(f"{name}.post_attention_layernorm", "norm", gu))
        v, o = mods.get(f"{attn}.v_proj"), mods.get(f"{attn}.o_proj")
        if (isinstance(v, torch.nn.Linear) and isinstance(o, torch.nn.Linear) and heads
                and (kv_heads == heads or gqa) and heads % kv_heads == 0
                and o.in_features % heads == 0
                and v.out_features * (heads // kv_heads) == o.in_features):
            groups.append(SmoothGroup(f"{attn}.v_proj", "linear", (f"{attn}.o_proj",),
                                      heads // kv_heads, o.in_features // heads))
        up, down = mods.get(f"{mlp}.up_proj"), mods.get(f"{mlp}.down_proj")
        # a turned down_proj input (engine.quant.turn) has R between up_proj and it: a factor
        # per channel of the turned input cannot fold into up_proj's rows
        if (isinstance(up, torch.nn.Linear) and isinstance(down, torch.nn.Linear)
                and up.out_features == down.in_features and not is_turned(mods.get(mlp))):
            groups.append(SmoothGroup(f"{mlp}.up_proj", "linear", (f"{mlp}.down_proj",)))
    return groups


def _norm_is_foldable(norm: Any) -> bool:
    # (1 + w) parameterisations (Gemma) or weight-less norms cannot absorb a plain division
    w = getattr(norm, "weight", None)
    return isinstance(w, torch.nn.Parameter) and w.dim() == 1 and not type(norm).__name__.startswith(
        "Gemma")


@torch.no_grad()
def smooth_model(model: Any, stats: dict[str, ActStats], alpha: float | dict[str, float],
                 quantized: set[str],
                 record: dict[str, torch.Tensor] | None = None) -> list[SmoothGroup]:
    """Smooth every group with at least one quantized consumer; updates `stats` in place so
    they describe the smoothed activations. Returns the groups that were smoothed. `alpha`
    is one strength for all, or one per producer (producers not in the dict stay as they are,
    as searched by engine.quant.search). `record` receives each producer's factors s."""
    mods = dict(model.named_modules())
    done = []
    # a dict names its producers, so tied (GQA) groups are smoothed only when a search chose them
    for g in find_groups(model, gqa=isinstance(alpha, dict)):
        if not any(c in quantized for c in g.consumers) or g.consumers[0] not in stats:
            continue
        a = alpha.get(g.producer) if isinstance(alpha, dict) else alpha
        if a is None:
            continue
        producer = mods[g.producer]
        if g.kind == "norm" and not _norm_is_foldable(producer):
            continue
        x_max = g.tie(stats[g.consumers[0]].absmax).clamp_min(1e-5)
        w_max = g.tie(torch.stack([mods[c].weight.detach().abs().amax(0).float().cpu()
                                   for c in g.consumers]).amax(0)).clamp_min(1e-5)
        s = (x_max.pow(a) / w_max.pow(1 - a)).clamp_min(1e-5)
        if record is not None:
            record[g.producer] = s
        dev = producer.weight.device
        s_dev = g.producer_factors(s).to(dev)
        if g.kind == "norm":
            producer.weight.div_(s_dev.to(producer.weight.dtype))
            if getattr(producer, "bias", None) is not None:
                producer.bias.div_(s_dev.to(producer.bias.dtype))
        else:
            producer.weight.div_(s_dev.to(producer.weight.dtype).unsqueeze(1))
            if producer.bias is not None:
                producer.bias.div_(s_dev.to(producer.bias.dtype))
        for c in g.consumers:
            w = mods[c].weight
            w.mul_(s.to(w.device, w.dtype).unsqueeze(0))
            if c in stats:
                stats[c].absmax = stats[c].absmax / s
        done.append(g)
    return done
