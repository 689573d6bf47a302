"""Float vs INT8 comparison report (size, memory, speed, perplexity) as Markdown and JSON."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path


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
    md.write_text(to_markdown(rows), encoding="utf-8")
    js.write_text(json.dumps({"variants": [asdict(r) for r in rows], **(extra or {})}, indent=2),
                  encoding="utf-8")
    return md, js


def compare_and_write(float_dir: str, quant_dirs: list[str], out: str, data: str | None = None,
                      dtype: str = "float32", max_tokens: int = 4096, n_prompts: int = 8,
                      progress: Callable[[str, int, int], None] | None = None) -> list[VariantRow]:
    """Evaluate the float model and each exported variant on the same text and write the report."""
    import torch
    from npu_console.engine.models.loader import load_model
    from npu_console.engine.quant import eval_methods as em
    from npu_console.engine.quant import evaluate as ev
    from npu_console.engine.quant.calib import read_texts

    texts = read_texts(data)
    float_loaded = load_model(float_dir, device="cpu", dtype=dtype)
    tok = float_loaded.tokenizer
    ids = em.text_token_ids(tok, texts)[:max_tokens]
    prompts = [ids[i * 64:i * 64 + 16] for i in range(n_prompts) if len(ids) >= i * 64 + 16]
    window = min(int(getattr(float_loaded.config, "max_position_embeddings", 1024) or 1024), 1024)
    samples = [torch.tensor([ids[i:i + window]]) for i in range(0, min(len(ids), 2 * window),
                                                                  window) if len(ids) - i > 1]
    rows: list[VariantRow] = []
    ref_greedy = [ev.greedy_tokens(float_loaded.model, p, 32) for p in prompts]
    for i, q in enumerate([float_dir] + quant_dirs):
        if progress:
            progress("report", i, len(quant_dirs) + 1)
        loaded = float_loaded if i == 0 else load_model(q, device="cpu", dtype=dtype)
        m = loaded.model
        # llama.cpp's chunk method, as `npu-console eval` (engine.quant.eval_methods)
        ppl = em.evaluate_texts(m, loaded.tokenizer, texts, "chunks", min(window, em.DEFAULT_CTX),
                                max_tokens=max_tokens).perplexity
        speed1 = ev.decode_speed(m, batch=1, prompt_len=32, new_tokens=32)
        speed8 = ev.decode_speed(m, batch=8, prompt_len=32, new_tokens=16)
        row = VariantRow(name=Path(q).name, method=loaded.quantization or "float",
                         disk_bytes=dir_bytes(q), weight_bytes=ev.weight_bytes(m),
                         perplexity=ppl, ttft_ms=speed1.ttft_s * 1000,
                         tok_s_b1=speed1.decode_tok_s, tok_s_b8=speed8.decode_tok_s)
        if i:
            row.ppl_delta_pct = 100 * (ppl / rows[0].perplexity - 1)
            row.kl = ev.kl_divergence(float_loaded.model, m, samples)
            row.greedy_agreement = ev.greedy_agreement(
                ref_greedy, [ev.greedy_tokens(m, p, 32) for p in prompts])
            row.top1_agreement = ev.top1_agreement(m, prompts, ref_greedy)
        rows.append(row)
    write_report(rows, out, {"data": data, "tokens": len(ids), "dtype": dtype})
    return rows
