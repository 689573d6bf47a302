"""Whole-model sensitivity of each linear layer in one forward and backward pass.

A layer's own output error (engine.quant.search) says how much int8 changes that layer, not
how much the model's predictions care: an error in a direction the later layers ignore costs
nothing, one at the attention-sink token can cost a lot. Here every candidate layer's int8
error on the calibration tokens (its fake-quantized output minus its float output, on the
float model's own inputs) is weighted by the gradient of the calibration loss with respect to
that output: to second order, the loss the layer alone adds is half of
sum_t (g_t . delta_t)^2 (the Fisher approximation, as BRECQ and HAWQ weight layer errors).
The gradients come from the model's own text (self-calibration), so the empirical Fisher is
close to the true one.
"""

from __future__ import annotations

import threading
from typing import Any

import torch
import torch.nn.functional as F

from .calib import Cancelled, Progress
from .search import fake_dynamic, fake_static, fake_weight


def _fake_output(x: torch.Tensor, w: torch.Tensor, wq: torch.Tensor, method: str,
                 bound: float | None) -> torch.Tensor:
    if method == "w8a16":
        xq = x
    elif method == "w8a8-dynamic":
        xq = fake_dynamic(x)
    else:
        xq = fake_static(x, bound if bound is not None else float(x.abs().max()))
    return xq @ wq.t() - x @ w.t()


def fisher_scores(model: Any, samples: list[torch.Tensor], names: list[str], method: str,
                  bounds: dict[str, float] | None = None,
                  progress: Progress | None = None,
                  cancel: threading.Event | None = None) -> dict[str, float]:
    """Layer -> estimated increase of the mean calibration loss (nats per token) when that
    layer alone is int8. `model`: the float model as the recipe leaves it before rounding
    (smoothed); `bounds`: static W8A8 input ranges (max |x| the int8 grid covers)."""
    mods = {n: model.get_submodule(n) for n in names}
    wq = {n: fake_weight(m.weight.detach().float()) for n, m in mods.items()}
    scores = dict.fromkeys(names, 0.0)
    inputs: dict[str, torch.Tensor] = {}
    handles = []

    def fwd(name: str):
        def hook(_mod, args, _out):
            inputs[name] = args[0].detach()
        return hook

    def bwd(name: str):
        def hook(_mod, _gin, gout):
            x = inputs.pop(name).reshape(-1, mods[name].in_features).float()
            g = gout[0].reshape(-1, mods[name].out_features).float()
            w = mods[name].weight.detach().float()
            d = _fake_output(x, w, wq[name], method, (bounds or {}).get(name))
            scores[name] += float((g * d).sum(-1).pow(2).sum())
        return hook

    for n, m in mods.items():
        handles.append(m.register_forward_hook(fwd(n)))
        handles.append(m.register_full_backward_hook(bwd(n)))
    params = list(model.parameters())
    was = [p.requires_grad for p in params]
    tokens = 0
    try:
        for p in params:
            p.requires_grad_(False)
        emb = model.get_input_embeddings()
        dev = next(model.parameters()).device
        for i, ids in enumerate(samples):
            if cancel is not None and cancel.is_set():
                raise Cancelled()
            ids = ids.reshape(1, -1).to(dev).clone()  # not an inference tensor: autograd saves it
            with torch.enable_grad():
                # gradients must flow from the embeddings on, so every layer's output has one
                x = emb(ids).detach().requires_grad_(True)
                logits = model(inputs_embeds=x, use_cache=False).logits[0, :-1].float()
                loss = F.cross_entropy(logits, ids[0, 1:], reduction="sum")
                loss.backward()
            tokens += ids.shape[1] - 1
            inputs.clear()
            if progress:
                progress("sensitivity", i + 1, len(samples))
    finally:
        for h in handles:
            h.remove()
        for p, r in zip(params, was, strict=True):
            p.requires_grad_(r)
    return {n: 0.5 * s / max(tokens, 1) for n, s in scores.items()}


def recipe_scores(model: Any, recipe: Any, stats: dict, names: list[str],
                  samples: list[torch.Tensor], progress: Progress | None = None,
                  cancel: threading.Event | None = None) -> dict[str, float]:
    """fisher_scores of every candidate layer under a searched recipe: on a float copy of the
    model smoothed as quantize_model will smooth it, with the recipe's clipped static ranges."""
    import copy

    from .smooth import smooth_model

    twin = copy.deepcopy(model)
    with torch.no_grad():  # tensors made under inference_mode cannot take part in autograd
        for t in list(twin.parameters()) + list(twin.buffers()):
            if t.is_inference():
                t.data = t.data.clone()
    smoothed = {k: type(v)(v.absmax.clone()) for k, v in stats.items()}
    if recipe.alphas:
        smooth_model(twin, smoothed, recipe.alphas, set(names))
    bounds = {n: recipe.clips.get(n, 1.0) * smoothed[n].tensor_absmax
              for n in names if n in smoothed}
    return fisher_scores(twin, samples, names, recipe.method, bounds, progress, cancel)


def crossfit_scores(model: Any, method: str, names: list[str], samples: list[torch.Tensor],
                    bos_id: int | None = None, act_blocks: bool = False,
                    progress: Progress | None = None,
                    cancel: threading.Event | None = None) -> dict[str, float]:
    """recipe_scores out of sample: the recipe's ranges are searched on one half of the
    samples and scored on the other, both ways, and the two estimates averaged. Scored on the
    samples they were fitted on, static ranges hold every row by construction, so the estimate
    cannot see which layers overflow on text it never saw. The halves are the even and the odd
    samples: self-calibration alternates free text (after BOS alone) with chat requests, so
    each kind's ranges are scored on the other kind's text.

    On SmolLM2, with programming requests in the calibration, this choice of static's float
    layers took the mean of three dev texts from 2.32 to 1.71 points over three seeds; the
    evaluation texts did not move beyond the noise (docs/quantization.md, "Float layers chosen
    out of sample")."""
    from . import recipe as recipe_mod
    from .capture import capture

    halves = (samples[0::2], samples[1::2])
    if not halves[1]:  # one sample: nothing to score out of
        halves = (samples, samples)
    total = dict.fromkeys(names, 0.0)
    done = 0
    for fit, scored in (halves, halves[::-1]):
        # the capture and search of a half are quick and report nothing: a run's progress
        # stays in its sensitivity stage, counted over both halves' samples
        caps = capture(model, fit, names, bos_id=bos_id, cancel=cancel)
        rec = recipe_mod.search(model, method, caps, cancel=cancel, act_blocks=act_blocks)

        def step(name: str, i: int, _n: int, base: int = done) -> None:
            if progress:
                progress(name, base + i, len(halves[0]) + len(halves[1]))
        got = recipe_scores(model, rec, recipe_mod.body_stats(caps), names, scored, step,
                            cancel)
        done += len(scored)
        for n, v in got.items():
            total[n] += v / 2
    return total
