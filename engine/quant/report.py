"""Float vs INT8 comparison report (size, memory, speed, perplexity) as Markdown and JSON."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

DEFAULT_CTX_CAP = 512  # engine.quant.eval_methods.DEFAULT_CTX, without importing torch here


def dir_bytes(path: str | Path) -> int:
    return sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file())


@dataclass
class VariantRow:
    name: str
    method: str  # "float" or the quantization method
    disk_bytes: int
    weight_bytes: int
    perplexity: float | None = None
    ppl_delta_pct: float | None = None
    kl: float | None = None
    greedy_agreement: float | None = None  # free-running, position by position
    top1_agreement: float | None = None  # teacher-forced on the float model's continuation
    ttft_ms: float | None = None
    tok_s_b1: float | None = None
    tok_s_b8: float | None = None
    peak_rss_bytes: int | None = None


def to_markdown(rows: list[VariantRow], title: str = "Quantization report") -> str:
    def f(v, fmt):
        return "—" if v is None else format(v, fmt)

    lines = [f"## {title}", "",
             ("| variant | method | disk MiB | weights MiB | peak RSS MiB | TTFT ms | tok/s b1 | "
              "tok/s b8 | perplexity | Δ ppl % | KL | greedy agree | top-1 agree |"),
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(
            f"| {r.name} | {r.method} | {r.disk_bytes / 2**20:.1f} | {r.weight_bytes / 2**20:.1f}"
            f" | {f(r.peak_rss_bytes and r.peak_rss_bytes / 2**20, '.0f')} | {f(r.ttft_ms, '.1f')}"
            f" | {f(r.tok_s_b1, '.1f')} | {f(r.tok_s_b8, '.1f')} | {f(r.perplexity, '.4f')}"
            f" | {f(r.ppl_delta_pct, '+.2f')} | {f(r.kl, '.5f')} | {f(r.greedy_agreement, '.3f')}"
            f" | {f(r.top1_agreement, '.3f')} |")
    return "\n".join(lines) + "\n"


def write_report(rows: list[VariantRow], path: str | Path, extra: dict | None = None) -> tuple[Path, Path]:
    """Writes PATH.md and PATH.json (whatever suffix PATH had)."""
    base = Path(path)
    base = base.with_suffix("") if base.suffix in (".md", ".json") else base
    md, js = base.with_suffix(".md"), base.with_suffix(".json")
    md.parent.mkdir(parents=True, exist_ok=True)
    md.write_text(to_markdown(rows) + head_markdown(extra or {}), encoding="utf-8")
    js.write_text(json.dumps({"variants": [asdict(r) for r in rows], **(extra or {})}, indent=2),
                  encoding="utf-8")
    return md, js


def head_markdown(extra: dict) -> str:
    """A paragraph on the vocabulary head (engine.quant.head), when the run says what it did."""
    if "int8_head_reason" not in extra:
        return ""
    state = "int8" if extra.get("int8_head") else "float"
    text = f"\nlm_head and embedding: {state} ({extra['int8_head_reason']}).\n"
    cost = extra.get("int8_head_cost")
    if cost:
        text += (f"The int8 head alone, on the quantized model ({cost['tokens']} tokens): "
                 f"perplexity {cost['perplexity_float_head']:.4f} -> "
                 f"{cost['perplexity_int8_head']:.4f} ({cost['perplexity_change_pct']:+.2f} %), "
                 f"next token unchanged at {100 * cost['top1_agreement']:.1f} % of positions.\n")
    return text


@dataclass(frozen=True)
class EvalSpec:
    """How float and quantized variants are measured side by side (the evaluate stage of
    engine.quant.workflow, `quantize --report` and the wizard, each with its own sizes)."""

    data: str | None = None  # evaluation text (.txt / .jsonl); None: the shipped calibration text
    max_tokens: int = 4096
    n_prompts: int = 8  # greedy / top-1 agreement prompts, 16 tokens each, 64 tokens apart
    new_tokens: int = 32  # greedy continuation and decode-speed length
    ctx: int = DEFAULT_CTX_CAP  # perplexity window cap (llama.cpp chunks)
    batch8: bool = True  # also decode speed at batch 8
    kl: bool = True  # KL divergence against the float model

    def check(self) -> None:
        from .config import QuantError

        if self.max_tokens < 64 or self.n_prompts < 1 or self.new_tokens < 2 or self.ctx < 16:
            raise QuantError("evaluation needs max_tokens >= 64, n_prompts >= 1, "
                             "new_tokens >= 2 and ctx >= 16")
        if self.data is not None and not Path(self.data).is_file():
            raise QuantError(f"evaluation text not found: {self.data}")


@dataclass
class Comparison:
    rows: list[VariantRow]  # the float model first
    tokens: int  # evaluation tokens read
    source: str  # the evaluation text's file name


def weights_on_disk(path: str | Path) -> int:
    """Bytes of a checkpoint's weight files (a model folder may also hold unrelated files)."""
    p = Path(path)
    if p.is_file():  # a GGUF float model
        return p.stat().st_size
    files = [f for f in p.iterdir() if f.suffix in (".safetensors", ".bin", ".pt")]
    return sum(f.stat().st_size for f in files) if files else dir_bytes(p)


def compare(float_dir: str, quant_dirs: list[str], spec: EvalSpec = EvalSpec(),
            dtype: str = "float32", progress: Callable[[float, str], None] | None = None,
            cancel: threading.Event | None = None, names: list[str] | None = None
            ) -> Comparison:
    """Measure the float model and each exported variant on the same text and prompts: the one
    float-vs-quantized measurement. `progress(fraction, message)` follows each step; `cancel`
    stops between (and inside perplexity) steps with engine.runtime.types.Cancelled. `names`:
    the variants' names in rows and messages (default: their folder names)."""
    import torch

    from ..models.loader import load_model
    from . import eval_methods as em
    from . import evaluate as ev
    from .calib import Cancelled, read_texts
    from .config import QuantError

    n = 1 + len(quant_dirs)
    names = list(names or [Path(q).name for q in quant_dirs])

    def say(variant: int, part: float, message: str) -> None:
        # each variant gets an equal share: perplexity 60 %, greedy 15, speed 15, agreement 10
        if progress:
            progress(min(1.0, (variant + part) / n), message)
        if cancel is not None and cancel.is_set():
            raise Cancelled()

    spec.check()
    say(0, 0.0, "float: loading")
    float_loaded = load_model(float_dir, device="cpu", dtype=dtype, cancel=cancel)
    tok = float_loaded.tokenizer
    if spec.data is None:
        docs = read_texts(None)
        whole = "\n\n".join(docs)
    else:
        whole, docs = em.read_eval_text(spec.data, tok)
    ids = em.text_token_ids(tok, docs)[:spec.max_tokens]
    if len(ids) < 64:
        raise QuantError(f"evaluation text {Path(spec.data or 'calibration.txt').name} is too "
                         f"short ({len(ids)} tokens; 64 at least)")
    prompts = [ids[i * 64:i * 64 + 16] for i in range(spec.n_prompts) if len(ids) >= i * 64 + 16]
    window = min(int(getattr(float_loaded.config, "max_position_embeddings", 1024) or 1024),
                 spec.ctx)
    samples = [torch.tensor([ids[i:i + window]]) for i in range(0, min(len(ids), 2 * window),
                                                                  window) if len(ids) - i > 1]
    rows: list[VariantRow] = []
    ref_greedy: list[list[int]] = []
    for i, q in enumerate([float_dir] + quant_dirs):
        if i:
            say(i, 0.0, f"{names[i - 1]}: loading")
        loaded = float_loaded if i == 0 else load_model(q, device="cpu", dtype=dtype,
                                                        cancel=cancel)
        m, method = loaded.model, loaded.quantization or "float"
        # llama.cpp's chunk method, as `npu-console eval` (engine.quant.eval_methods)
        ppl = em.evaluate_texts(
            m, loaded.tokenizer, docs, "chunks", window, whole=whole, max_tokens=spec.max_tokens,
            cancel=cancel, progress=lambda d, t, i=i, w=method: say(
                i, 0.6 * d / max(t, 1), f"{w}: perplexity {d}/{t}")).perplexity
        say(i, 0.6, f"{method}: greedy continuations")
        greedy = [ev.greedy_tokens(m, p, spec.new_tokens) for p in prompts]
        say(i, 0.75, f"{method}: speed")
        ev.decode_speed(m, batch=1, prompt_len=16, new_tokens=4)  # warm-up
        speed1 = ev.decode_speed(m, batch=1, prompt_len=32, new_tokens=spec.new_tokens)
        speed8 = (ev.decode_speed(m, batch=8, prompt_len=32,
                                  new_tokens=max(2, spec.new_tokens // 2))
                  if spec.batch8 else None)
        row = VariantRow(name=loaded.name if i == 0 else names[i - 1], method=method,
                         disk_bytes=weights_on_disk(q), weight_bytes=ev.weight_bytes(m),
                         perplexity=ppl, ttft_ms=speed1.ttft_s * 1000,
                         tok_s_b1=speed1.decode_tok_s,
                         tok_s_b8=speed8.decode_tok_s if speed8 else None)
        if i == 0:
            ref_greedy = greedy
        else:
            say(i, 0.9, f"{method}: agreement with float")
            row.ppl_delta_pct = 100 * (ppl / rows[0].perplexity - 1)
            row.greedy_agreement = ev.greedy_agreement(ref_greedy, greedy)
            row.top1_agreement = ev.top1_agreement(m, prompts, ref_greedy)
            if spec.kl:
                row.kl = ev.kl_divergence(float_loaded.model, m, samples)
        rows.append(row)
        say(i, 1.0, f"{method}: measured")
    return Comparison(rows=rows, tokens=len(ids),
                      source=Path(spec.data).name if spec.data else "calibration.txt")
