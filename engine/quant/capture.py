"""One calibration pass that keeps what the recipe search needs, per distinct layer input
(q/k/v share one, gate/up share one): the channel ranges with and without attention-sink
positions, a sample of input rows to measure layer output error on, and optionally the
Gram matrix X^T X for error-compensating rounding (engine.quant.gptq).

Sink positions are the first token of every sample and every BOS token: models put huge
activations there (the attention sink), and a per-tensor range taken over them leaves
every other token a few int8 steps.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

import torch

from ..models.experts import ExpertMLP
from .calib import ActStats, Progress, run_samples


@dataclass
class InputCapture:
    consumers: tuple[str, ...]
    absmax: torch.Tensor  # (K,) over every position
    absmax_body: torch.Tensor  # (K,) without sink positions
    rows: list[torch.Tensor] = field(default_factory=list)  # sampled non-sink rows
    sink_rows: list[torch.Tensor] = field(default_factory=list)
    gram: torch.Tensor | None = None  # (K, K) sum of x x^T over every position
    tokens: int = 0

    def x(self) -> torch.Tensor:
        return torch.cat(self.rows) if self.rows else torch.empty(0, self.absmax.numel())

    def sinks(self) -> torch.Tensor:
        return (torch.cat(self.sink_rows) if self.sink_rows
                else torch.empty(0, self.absmax.numel()))


def input_groups(model: Any, names: list[str]) -> dict[str, tuple[str, ...]]:
    """Key (first consumer) -> the quantized linears that read the same input tensor."""
    from .smooth import find_groups

    chosen, out, seen = set(names), {}, set()
    for g in find_groups(model):
        if g.kind == "norm":
            cons = tuple(c for c in g.consumers if c in chosen)
            if cons:
                out[cons[0]] = cons
                seen.update(cons)
    for n in names:
        if n not in seen:
            out[n] = (n,)
    return out


def capture(model: Any, samples: list[torch.Tensor], names: list[str],
            rows_per_sample: int = 32, gram: bool = False, bos_id: int | None = None,
            progress: Progress | None = None,
            cancel: threading.Event | None = None) -> dict[str, InputCapture]:
    groups = input_groups(model, names)
    caps: dict[str, InputCapture] = {}
    gen = torch.Generator().manual_seed(0)
    current: dict[str, torch.Tensor] = {}  # sink mask of the sample being run

    mods = dict(model.named_modules())

    def make_hook(key: str):
        # a routed expert sees only the rows sent to it: its share of the sink mask
        expert = mods.get(key.rpartition(".")[0])
        expert = expert if isinstance(expert, ExpertMLP) else None

        def hook(_mod, args):
            x = args[0].detach().reshape(-1, args[0].shape[-1]).float().cpu()
            sink = current["sink"] if expert is None else current["sink"][expert.rows]
            body = x[~sink]
            c = caps.get(key)
            if c is None:
                k = x.shape[-1]
                c = caps[key] = InputCapture(groups[key], torch.zeros(k), torch.zeros(k))
                if gram:
                    c.gram = torch.zeros(k, k)
            torch.maximum(c.absmax, x.abs().amax(0), out=c.absmax)
            if body.numel():
                torch.maximum(c.absmax_body, body.abs().amax(0), out=c.absmax_body)
                pick = torch.randperm(body.shape[0], generator=gen)[:rows_per_sample]
                c.rows.append(body[pick.sort().values].clone())
            c.sink_rows.append(x[sink].clone())
            if c.gram is not None:
                c.gram.addmm_(x.t(), x)
            c.tokens += x.shape[0]
        return hook

    def prepare(ids: torch.Tensor) -> torch.Tensor:
        flat = ids.reshape(-1)
        sink = torch.zeros(flat.numel(), dtype=torch.bool)
        sink[0] = True
        if bos_id is not None:
            sink |= flat == bos_id
        current["sink"] = sink
        return ids.reshape(1, -1)

    body_mod = getattr(model, "model", None)
    runner = body_mod if isinstance(body_mod, torch.nn.Module) else model
    run_samples(model, runner, samples, {mods[k]: make_hook(k) for k in groups}, prepare,
                progress=progress, cancel=cancel)
    return caps


def as_stats(caps: dict[str, InputCapture], body_only: bool = False) -> dict[str, ActStats]:
    """Per-layer ActStats (what smooth.py and the static scales read) for every consumer."""
    out = {}
    for c in caps.values():
        for name in c.consumers:
            out[name] = ActStats((c.absmax_body if body_only else c.absmax).clone())
    return out
