"""What demo mode says, free of Qt: the load and memory tiles from a telemetry snapshot, the
request each side of its A/B chat sends, and the line under a finished answer. The demo view
(console/pages/demo.py) only puts these into its tiles and panes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

ANSWER_TOKENS, REASONING_TOKENS = 96, 256  # a reasoning model thinks first: it gets more room


@dataclass(frozen=True)
class Tiles:
    """The load and memory tiles: each a caption and (value, unit); memory None: as it was."""

    load_label: str
    load: tuple[str, str]
    memory_label: str
    memory: tuple[str, str] | None
    device: str  # the line beside the title


def tiles(snap: Any) -> Tiles | None:
    """The accelerators' mean load and summed memory, or the host CPU's when there are none;
    None when the snapshot has neither."""
    devs = [d for d in snap.devices if d.kind != "cpu"]
    if devs:
        utils = [d.util_pct for d in devs if d.util_pct is not None]
        used = sum(d.mem_used_mb or 0 for d in devs)
        total = sum(d.mem_total_mb or 0 for d in devs)
        npu = devs[0].kind == "npu"
        return Tiles("NPU LOAD" if npu else "GPU LOAD",
                     (f"{sum(utils) / len(utils):.0f}" if utils else "—",
                      f"% · {len(devs)} card{'s' if len(devs) > 1 else ''}"),
                     "HBM" if npu else "GPU MEMORY",
                     (f"{used / 1024:.0f}", f"of {total / 1024:.0f} GB" if total else "GB"),
                     f"{len(devs)} × {devs[0].name} · {snap.source}")
    h = snap.host
    if h is None:
        return None
    memory = None
    if h.mem_used_mb is not None and h.mem_total_mb:
        memory = (f"{h.mem_used_mb / 1024:.1f}", f"of {h.mem_total_mb / 1024:.0f} GB")
    return Tiles("CPU LOAD", (f"{h.cpu_pct:.0f}" if h.cpu_pct is not None else "—", "%"),
                 "HOST MEMORY", memory, "host CPU · no accelerator found")


def request(text: str, model: str, reasoner: bool) -> Any:
    """The GenerationRequest one side sends, greedy: a reasoning model is asked as a chat, so
    its thinking comes apart from its answer; any other gets the plain prompt."""
    from ..engine.runtime.types import GenerationRequest, SamplingParams

    params = SamplingParams(max_tokens=REASONING_TOKENS if reasoner else ANSWER_TOKENS,
                            temperature=0.0)
    if reasoner:
        return GenerationRequest(messages=[{"role": "user", "content": text}], model=model,
                                 params=params)
    return GenerationRequest(prompt=text, model=model, params=params)


def finish_lines(fin: Any) -> list[str]:
    """What goes under a finished answer: how long it thought, then its error or its speed."""
    lines = []
    t, usage = fin.timings, fin.usage
    if usage.reasoning_tokens and t.first_answer_s is not None:
        lines.append(f"\n— thought for {usage.reasoning_tokens} tokens · first answer "
                     f"token {t.first_answer_s * 1000:.0f} ms")
    if fin.error:
        lines.append(f"\n⚠ {fin.error}")
    elif t.tpot_s:
        lines.append(f"\n— {usage.completion_tokens} tokens · {1 / t.tpot_s:.0f} tok/s · TTFT "
                     f"{(t.ttft_s or 0) * 1000:.0f} ms")
    return lines
