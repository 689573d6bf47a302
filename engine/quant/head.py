"""Whether the vocabulary head goes int8: the rule behind `--int8-head auto`, and what the int8
head alone costs in quality.

The head is lm_head plus the token embedding (one table when the model ties them). After the
linear layers are int8 (1 byte a weight), a float32 head is read at 4 bytes a weight by every
decode step; with a head that is a share `s` of the parameters, int8 weights cut the head's
bytes by 3/4, i.e. 3s / (1 + 3s) of what the quantized model reads. At the threshold, 15 %,
that is 31 % of the bytes (decode ~1.45x faster where it is memory-bound); SmolLM2-135M
(21 %) saves 39 %, the Qwen2.5-0.5B shape (28 %) 45 %. Large models (Llama-3-8B, Qwen2.5-7B:
13-14 % with their untied tables, 6-7 % read per step) stay below it: the head is a small part
of their bytes and the float logits are where int8 error shows most. docs/quantization.md has
the table.
"""

from __future__ import annotations

import json
import math
import threading
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ..kernels.errors import QuantError

HEAD_MODES = ("auto", "on", "off")
AUTO_MIN_SHARE = 0.15  # head share of the weights from which auto turns the int8 head on


def head_mode(value: str | bool | None) -> str:
    """'auto' / 'on' / 'off' from a mode or the older bool flag (True = on, False = off)."""
    if value is None:
        return "auto"
    if isinstance(value, bool):
        return "on" if value else "off"
    if value not in HEAD_MODES:
        raise QuantError(f"unknown int8 head mode {value!r}; choose one of "
                         f"{', '.join(HEAD_MODES)}")
    return value


def head_is_tied(model: Any) -> bool:
    """Whether lm_head and the token embedding share one table."""
    head, emb = model.get_output_embeddings(), model.get_input_embeddings()
    return head.weight is emb.weight or head.weight.data_ptr() == emb.weight.data_ptr()


def embedding_scale(emb: Any) -> float | None:
    """The factor a token embedding multiplies its rows by: 1.0 for a plain nn.Embedding, the
    stored scale of a scaled one (Gemma's `*TextScaledWordEmbedding`: sqrt(hidden)), None for
    any other module (its lookup does something an int8 table would not)."""
    import torch

    if type(emb) is torch.nn.Embedding:
        return 1.0
    if isinstance(emb, torch.nn.Embedding) and type(emb).__name__.endswith("ScaledWordEmbedding"):
        scale = getattr(emb, "scalar_embed_scale", None)
        if scale is None and getattr(emb, "embed_scale", None) is not None:
            scale = float(emb.embed_scale)
        return None if scale is None else float(scale)
    return None


def unsupported(model: Any) -> str:
    """Why this model cannot take the int8 head and embedding ("" when it can): the head must be
    a plain nn.Linear and the embedding a plain or scaled nn.Embedding, each the model's own."""
    import torch

    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    emb = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    if type(head) is not torch.nn.Linear:
        return f"its lm_head is {type(head).__name__}, not a plain linear layer"
    if emb is None or embedding_scale(emb) is None:
        return f"its token embedding is {type(emb).__name__}, which has no int8 form here"
    return ""


def share_of_model(model: Any) -> float:
    """The head's share of the model's weights (each tensor counted once: a tied table once)."""
    seen: set[int] = set()
    total = 0
    for p in model.parameters():
        if p.data_ptr() not in seen:
            seen.add(p.data_ptr())
            total += p.numel()
    tables = {m.weight.data_ptr(): m.weight.numel()
              for m in (model.get_input_embeddings(), model.get_output_embeddings())
              if m is not None and getattr(m, "weight", None) is not None}
    return sum(tables.values()) / total if total else 0.0


def share_of_path(path: str | Path) -> float | None:
    """The same share from a model folder's config and weight headers (or a GGUF's header),
    without loading it; None when they do not say (the wizard then offers auto unresolved)."""
    from ..models.folder import inspect_model_folder

    report = inspect_model_folder(path)
    if not (report.vocab_size and report.hidden_size and report.num_parameters):
        return None
    tied = True  # GGUF files of tied models carry no output table; folders say in config.json
    config = Path(path) / "config.json"
    if config.is_file():
        try:
            tied = bool(json.loads(config.read_text(encoding="utf-8"))
                        .get("tie_word_embeddings", True))
        except (OSError, ValueError):
            return None
    table = report.vocab_size * report.hidden_size
    return min(1.0, table * (1 if tied else 2) / report.num_parameters)


# Static W8A8 kept the head float under auto until 2026-12-07: the per-row int8 head cost it
# +0.45 % on SmolLM2-135M-Instruct, its recipe sat at its bar, and the Ascend formats read the
# head in float anyway. The head per 32 costs SmolLM2 +0.00 % (apply.HEAD_GROUP), static now
# has room (down_proj's inputs turned: engine.quant.turn), and the exports still keep the
# head float (decide, below); the float head was half of static's batch-1 step.
def recommended(share: float | None) -> bool:
    return share is not None and share >= AUTO_MIN_SHARE


@dataclass(frozen=True)
class HeadDecision:
    """What a run does with the head, and why (the JSON's int8_head / int8_head_reason)."""

    mode: str  # as asked: auto / on / off
    int8_head: bool
    share: float | None  # the head's share of the float weights
    reason: str

    def to_dict(self) -> dict:
        return asdict(self)


def decide(mode: str | bool | None, share: float | None, fmt: str = "native",
           device: str = "cpu", not_possible: str = "") -> HeadDecision:
    """The head for one run. An explicit 'on' with a format other than native is refused by the
    request check before this; 'auto' with one means a float head for that export, and so
    does 'auto' on an Ascend device (its int8 matmul caps N at 65535, below a vocabulary).
    `not_possible`: why this model cannot take an int8 head (`unsupported(model)`): 'on' is
    then refused here, right after the load and before any calibration, and 'auto' keeps
    the head float."""
    mode = head_mode(mode)
    pct = "unknown" if share is None else f"{100 * share:.0f} %"
    if not_possible and mode == "on":
        raise QuantError(f"--int8-head on is not possible for this model: {not_possible}; "
                         "use --int8-head auto or off")
    if not_possible and mode == "auto":
        return HeadDecision(mode, False, share, f"auto: the head stays float ({not_possible})")
    if mode == "on":
        return HeadDecision(mode, True, share, f"asked for (head = {pct} of the weights)")
    if mode == "off":
        return HeadDecision(mode, False, share, f"asked off (head = {pct} of the weights)")
    if fmt != "native":
        return HeadDecision(mode, False, share,
                            f"auto: {fmt} readers (vLLM, vllm-ascend) keep lm_head and the "
                            "embedding in float, so this export keeps them float")
    if device.startswith("npu"):
        return HeadDecision(mode, False, share, "auto: Ascend's int8 matmul cannot take a "
                            "vocabulary-sized head (65535 rows at most), so it stays float")
    if recommended(share):
        return HeadDecision(mode, True, share, f"auto: head = {pct} of the weights "
                            f"(at least {100 * AUTO_MIN_SHARE:.0f} %)")
    return HeadDecision(mode, False, share, f"auto: head = {pct} of the weights "
                        f"(below {100 * AUTO_MIN_SHARE:.0f} %, not worth its error)")


@dataclass(frozen=True)
class HeadCost:
    """The int8 head alone, on the quantized body: the same hidden states through the float and
    the int8 head (one forward pass, so no second INT8 evaluation)."""

    tokens: int
    perplexity_float_head: float
    perplexity_int8_head: float
    top1_agreement: float  # share of positions where both heads pick the same next token

    @property
    def perplexity_change_pct(self) -> float:
        return 100.0 * (self.perplexity_int8_head / self.perplexity_float_head - 1.0)

    def to_dict(self) -> dict:
        return asdict(self) | {"perplexity_change_pct": round(self.perplexity_change_pct, 4)}


def measure_head_cost(model: Any, float_weight: Any, ids: list[int], window: int = 256,
                      cancel: threading.Event | None = None) -> HeadCost:
    """`model`: quantized with an int8 head; `float_weight`: the head's float table from before.
    Runs `ids` in windows, catching lm_head's input: the int8 head's logits are the model's,
    the float head's are that input times the float table."""
    import torch

    from .calib import Cancelled

    head = model.get_output_embeddings()
    caught: list = []
    hook = head.register_forward_hook(lambda _m, inp, out: caught.append((inp[0], out)))
    nll_f = nll_q = 0.0
    agree = count = 0
    try:
        with torch.inference_mode():
            for start in range(0, max(len(ids) - 1, 0), window):
                chunk = ids[start:start + window + 1]
                if len(chunk) < 2:
                    break
                if cancel is not None and cancel.is_set():
                    raise Cancelled()
                caught.clear()
                model(input_ids=torch.tensor([chunk[:-1]]), use_cache=False)
                hidden, q_logits = caught[-1]
                f_logits = hidden.float() @ float_weight.float().t()
                target = torch.tensor(chunk[1:])
                q, f = q_logits[0].float(), f_logits[0]
                nll_q += torch.nn.functional.cross_entropy(q, target, reduction="sum").item()
                nll_f += torch.nn.functional.cross_entropy(f, target, reduction="sum").item()
                agree += int((q.argmax(-1) == f.argmax(-1)).sum())
                count += len(target)
    finally:
        hook.remove()
    if not count:
        raise QuantError("no tokens to measure the int8 head on")
    return HeadCost(tokens=count, perplexity_float_head=math.exp(nll_f / count),
                    perplexity_int8_head=math.exp(nll_q / count),
                    top1_agreement=agree / count)
