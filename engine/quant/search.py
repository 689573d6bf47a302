"""Per-input recipe search on calibration activations: the SmoothQuant strength (alpha) and,
for static W8A8, the clipping of the per-tensor input range, each chosen to minimise the
layer's own output error (the relative squared error of X W^T over sampled rows), as AWQ and
llm-compressor choose per layer instead of one global alpha.

Everything here simulates int8 in float ("fake quantization") on the CPU; nothing is changed
in the model.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..kernels import qmath
from ..kernels.qmath import QMAX

ALPHAS = (0.3, 0.45, 0.6, 0.7, 0.8, 0.9)
CLIPS = (1.0, 0.8, 0.6, 0.45, 0.33, 0.25)  # fractions of the largest non-sink |x|
# Static W8A8 fixes each range from a small calibration set, so it must hold on text it never
# saw. A strong alpha divides every channel by (nearly) its calibrated maximum, and a channel
# that was quiet in calibration then overflows the one per-tensor range on other text; a clip
# below the calibrated maximum does the same. On SmolLM2 the held-out text reached 5-12x the
# calibrated range of several down_proj inputs with alpha 0.8-0.9 and clip 0.8, and the
# search could not see it (it scores on calibration rows). Measured (docs/quantization.md):
# limiting alpha to 0.6 and keeping the full range took static from +5.0 % to +1.7 %.
STATIC_ALPHAS = (0.3, 0.45, 0.6)
STATIC_CLIPS = (1.0,)


@dataclass(frozen=True)
class InputChoice:
    alpha: float | None  # None: not smoothed
    clip: float  # static only: input range = clip * max |x| (sinks excluded); 1.0 otherwise
    error: float  # relative output error with this choice (body rows)
    sink_error: float  # the same on sink rows (what static clipping costs the attention sink)
    error_plain: float  # relative output error without smoothing or clipping
    tried: tuple[tuple[float | None, float, float, float], ...] = ()  # (alpha, clip, err, sink)


def fake_weight(w: torch.Tensor) -> torch.Tensor:
    s = qmath.weight_scales(w.abs().amax(1, keepdim=True))
    return (w / s).round().clamp(-QMAX, QMAX) * s


def fake_dynamic(x: torch.Tensor) -> torch.Tensor:
    s = (x.abs().amax(1, keepdim=True) / QMAX).clamp_min(1e-8)
    return (x / s).round().clamp(-QMAX, QMAX) * s


def fake_static(x: torch.Tensor, bound: float) -> torch.Tensor:
    s = max(bound, 1e-8) / QMAX
    return (x / s).round().clamp(-QMAX, QMAX) * s


def _rel(y: torch.Tensor, yq: torch.Tensor) -> float:
    return float((y - yq).pow(2).sum() / y.pow(2).sum().clamp_min(1e-20))


def smooth_factors(xmax: torch.Tensor, wmax: torch.Tensor, alpha: float) -> torch.Tensor:
    """Same formula as engine.quant.smooth (s_j = x_j^a / w_j^(1-a))."""
    return (xmax.clamp_min(1e-5).pow(alpha) / wmax.clamp_min(1e-5).pow(1 - alpha)).clamp_min(1e-5)


def fake_blocks(x: torch.Tensor) -> torch.Tensor:
    """Dynamic int8 activations per block of 32 values (QuantConfig.act_blocks)."""
    return qmath.block_dequantize_act(*qmath.block_quantize_act(x))


def _act(x: torch.Tensor, method: str, bound: float) -> torch.Tensor:
    if method == "w8a8-dynamic-blocks":
        return fake_blocks(x)
    return fake_dynamic(x) if method == "w8a8-dynamic" else fake_static(x, bound)


def _errors(x, sinks, y, y_sinks, wq, method, bound) -> tuple[float, float]:
    """`y`, `y_sinks`: the float outputs, the same whatever the smoothing (it is exact)."""
    err = _rel(y, _act(x, method, bound) @ wq.t())
    serr = 0.0
    if sinks.numel():
        serr = _rel(y_sinks, _act(sinks, method, bound) @ wq.t())
    return err, serr


@torch.no_grad()
def search_input(x: torch.Tensor, sinks: torch.Tensor, weights: list[torch.Tensor],
                 xmax: torch.Tensor, method: str, smoothable: bool,
                 alphas: tuple[float, ...] = ALPHAS,
                 clips: tuple[float, ...] = CLIPS, sink_weight: float = 1.0,
                 tie=None) -> InputChoice:
    """The best (alpha, clip) for one shared input. `x`: sampled non-sink rows (R, K);
    `weights`: the float (N_i, K) weights of the linears reading it; `xmax`: the channel
    ranges smoothing divides by (sinks excluded); `tie`: SmoothGroup.tie of a producer that
    feeds several channels with one (v_proj under grouped-query attention)."""
    w = torch.cat([t.detach().float().cpu() for t in weights])
    static = method == "w8a8-static"
    wmax = w.abs().amax(0)
    xs_max, ws_max = (tie(xmax), tie(wmax)) if tie is not None else (xmax, wmax)
    y, y_sinks = x @ w.t(), sinks @ w.t()
    plain = None
    best: InputChoice | None = None
    tried = []
    for alpha in (None,) + (tuple(alphas) if smoothable else ()):
        s = torch.ones_like(xmax) if alpha is None else smooth_factors(xs_max, ws_max, alpha)
        xs, ss, ws = x / s, sinks / s, w * s
        wq = fake_weight(ws)
        top = float((xmax / s).max())  # the calibrated range, sinks excluded
        for clip in (clips if static else (1.0,)):
            err, serr = _errors(xs, ss, y, y_sinks, wq, method, clip * top)
            tried.append((alpha, clip, err, serr))
            if plain is None:
                plain = err
            if best is None or err + sink_weight * serr < best.error + sink_weight * best.sink_error:
                best = InputChoice(alpha, clip, err, serr, plain)
    assert best is not None and plain is not None
    return InputChoice(best.alpha, best.clip, best.error, best.sink_error, plain, tuple(tried))
