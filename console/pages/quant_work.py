"""What the quantization wizard runs on its worker thread (no Qt here): quantize + export with
engine.quant, measure float vs INT8 side by side, per-layer sensitivity, re-export, and the
JSON store of earlier runs so nobody re-measures the same combination.

engine.quant.report.compare_and_write measures the same things but has no cancel and writes
report files; this adapter calls the same engine.quant.evaluate functions stage by stage so
the wizard can cancel between them and keep the numbers in memory.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from npu_console.engine.atomic_files import atomic_write_json, check_runs_history, load_json

Report = Callable[[float, str], None]  # fraction 0..1, stage line

PRESET_LABELS = {"all": "All linear layers", "attention": "Attention only",
                 "no-down-proj": "All but down_proj", "custom": "Custom skip list"}
METHOD_LABELS = {"w8a16": "W8A16 (int8 weights)", "w8a8-dynamic": "W8A8 dynamic",
                 "w8a8-static": "W8A8 static"}


@dataclass
class QuantPlan:
    model_dir: str
    model_name: str
    method: str = "w8a8-dynamic"
    preset: str = "all"  # one of engine.quant.config.PRESETS, or "custom" (= all + skip)
    skip: tuple[str, ...] = ()
    smoothquant: float | None = None
    calib_file: str | None = None  # None: text the model writes itself (engine.quant.selfcalib)
    samples: int = 64
    seq_len: int = 256
    budget_pct: float = 2.0  # allowed perplexity increase for the verdict
    eval_tokens: int = 2048
    eval_prompts: int = 4
    new_tokens: int = 24
    int8_head: bool = False  # lm_head and embeddings in int8 too
    # keep the most sensitive layers float until the measured loss is within budget_pct
    # (engine.quant.mixed.fit_budget, as `quantize --budget`)
    fit_budget: bool = False

    @property
    def engine_preset(self) -> str:
        return "all" if self.preset == "custom" else self.preset

    @property
    def needs_calibration(self) -> bool:
        return True  # the auto recipe calibrates every method (GPTQ rounding for w8a16 too)

    def key(self) -> str:
        """Identity of the measured combination (budget and display name do not change it)."""
        ident = {"model": str(Path(self.model_dir).resolve()), "method": self.method,
                 "preset": self.engine_preset, "skip": sorted(self.skip),
                 "smoothquant": self.smoothquant,
                 "calib": (self.calib_file or "shipped") if self.needs_calibration else None,
                 "samples": self.samples if self.needs_calibration else None,
                 "seq_len": self.seq_len if self.needs_calibration else None,
                 "eval": [self.eval_tokens, self.eval_prompts, self.new_tokens],
                 "recipe": "auto"}
        if self.int8_head:  # only when set, so that earlier runs keep their keys
            ident["int8_head"] = True
        if self.fit_budget:
            ident["fit_budget"] = self.budget_pct
        return hashlib.sha1(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:12]

    def describe(self) -> str:
        parts = [METHOD_LABELS.get(self.method, self.method)]
        if self.smoothquant is not None:
            parts.append(f"SmoothQuant α={self.smoothquant:g}")
        parts.append(PRESET_LABELS.get(self.preset, self.preset))
        if self.skip:
            parts.append("skip " + ", ".join(self.skip))
        if self.int8_head:
            parts.append("int8 lm_head + embeddings")
        if self.fit_budget:
            parts.append(f"float layers as needed for {self.budget_pct:g}%")
        return " · ".join(parts)


@dataclass
class VariantMeasure:
    name: str
    method: str  # "float" or the quantization method
    disk_bytes: int
    memory_bytes: int  # resident weights (int8 + scales + float parts)
    ttft_ms: float
    tok_s: float  # batch-1 greedy decode
    perplexity: float
    greedy_agreement: float | None = None  # vs the float model; None for the float row
    top1_agreement: float | None = None  # teacher-forced on the float model's continuation


@dataclass
class QuantRun:
    key: str
    plan: dict
    created: str
    out_dir: str
    fmt: str
    seconds: float
    quantized_layers: int
    skipped_layers: int
    calib_samples: int
    float: VariantMeasure
    quant: VariantMeasure
    eval_source: str
    calibration: str = ""  # which calibration text was used ("" in runs saved before)
    kept_float: dict = field(default_factory=dict)  # layer -> why it stayed float
    int8_weight_fraction: float | None = None  # of the linear layers' weights
    budget_note: str = ""  # why a budget could not be met

    @property
    def ppl_delta_pct(self) -> float:
        return 100.0 * (self.quant.perplexity / self.float.perplexity - 1.0)

    def within(self, budget_pct: float) -> bool:
        return self.ppl_delta_pct <= budget_pct

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> QuantRun:
        d = dict(d)
        d["float"] = VariantMeasure(**d["float"])
        d["quant"] = VariantMeasure(**d["quant"])
        return cls(**d)


def default_eval_file() -> Path | None:
    """Held-out text when the project ships it, else the calibration text."""
    from npu_console.engine.paths import CALIB_DIR

    for name in ("heldout_demo.txt", "calibration.txt"):
        if (CALIB_DIR / name).is_file():
            return CALIB_DIR / name
    return None


def calib_summary(path: str | None) -> tuple[int, int]:
    """(documents, words) of a calibration file; raises QuantError with a one-line reason."""
    from npu_console.engine.quant.calib import read_texts

    if path is not None and Path(path).is_file() and Path(path).stat().st_size > 200 * 2**20:
        from npu_console.engine.quant.config import QuantError

        raise QuantError(f"{path} is larger than 200 MB; pick a smaller calibration file")
    texts = read_texts(path)
    return len(texts), sum(len(t.split()) for t in texts)


def runs_dir() -> Path:
    from npu_console.engine.paths import state_dir

    return state_dir() / "quantized"


def _stage(report: Report, lo: float, hi: float) -> Callable[[str, int, int], None]:
    names = {"load": "loading the float model", "calibrate": "calibrating",
             "smooth": "SmoothQuant", "quantize": "quantizing layers", "export": "writing"}

    def progress(stage: str, done: int, total: int) -> None:
        report(lo + (hi - lo) * done / max(total, 1),
               f"{names.get(stage, stage)} {done}/{total}")
    return progress


def run_plan(plan: QuantPlan, report: Report, cancel, out_dir: str | Path | None = None) -> QuantRun:
    """Quantize, export (native, atomically), and measure float vs INT8. A cancel at any stage
    removes the output folder this run wrote, so nothing half-done stays on disk."""
    from npu_console.engine.quant.calib import Cancelled
    from npu_console.engine.quant.job import QuantizeRequest, run_quantize

    out = Path(out_dir) if out_dir else runs_dir() / f"{plan.model_name}-{plan.method}-{plan.key()}"
    existed = out.exists()
    req = QuantizeRequest(model_dir=plan.model_dir, out_dir=str(out), method=plan.method,
                          fmt="native", preset=plan.engine_preset, skip=tuple(plan.skip),
                          smoothquant=plan.smoothquant, calib_file=plan.calib_file,
                          samples=plan.samples, seq_len=plan.seq_len, overwrite=True,
                          int8_head=plan.int8_head,
                          budget_pct=plan.budget_pct if plan.fit_budget else None,
                          eval_file=str(eval_file(plan)) if plan.fit_budget else None)
    t0 = time.perf_counter()
    result = run_quantize(req, progress=_stage(report, 0.0, 0.55), cancel=cancel)
    try:
        fl, qu, source = measure(plan, str(out), report, cancel, 0.55, 1.0)
    except BaseException:
        if not existed or cancel.is_set():
            shutil.rmtree(out, ignore_errors=True)
        raise
    if cancel.is_set():
        shutil.rmtree(out, ignore_errors=True)
        raise Cancelled()
    return QuantRun(key=plan.key(), plan=asdict(plan), created=_now(), out_dir=str(out),
                    fmt="native", seconds=time.perf_counter() - t0,
                    quantized_layers=len(result.info.quantized),
                    skipped_layers=len(result.info.skipped), calib_samples=result.calib_samples,
                    float=fl, quant=qu, eval_source=source,
                    calibration=result.calibration or "none (weights only)",
                    kept_float=dict(result.kept_float),
                    int8_weight_fraction=result.int8_weight_fraction,
                    budget_note=(result.budget or {}).get("why", ""))


def verdict(run: QuantRun, budget_pct: float) -> tuple[bool, str]:
    """(within budget, one paragraph) for the wizard: perplexity against the budget, the int8
    share of linear weights, the layers kept float and the calibration used."""
    share = ("" if run.int8_weight_fraction is None
             else f"{run.int8_weight_fraction:.1%} of linear weights int8")
    kept = (f"{len(run.kept_float)} sensitive layer(s) kept float" if run.kept_float
            else "no layer kept float for quality")
    facts = " · ".join(x for x in (share, kept, run.calibration and
                                   f"calibration: {run.calibration}") if x)
    if run.within(budget_pct):
        return True, (f"Perplexity {run.ppl_delta_pct:+.2f}% vs float (budget {budget_pct:g}%)"
                      f", agreement {_agreement_text(run.quant)}, weights "
                      f"{run.quant.memory_bytes / max(run.float.memory_bytes, 1):.0%} of float."
                      f" {facts}.")
    why = run.budget_note or ("turn on \"keep sensitive layers float to meet the budget\", "
                              "skip layers (step 4) or try W8A16")
    return False, (f"Perplexity {run.ppl_delta_pct:+.2f}% vs float exceeds the {budget_pct:g}% "
                   f"budget ({facts}): {why}.")


def _agreement_text(q: VariantMeasure) -> str:
    text = f"{100 * (q.greedy_agreement or 0):.0f}% greedy"
    if q.top1_agreement is not None:
        text += f" · {100 * q.top1_agreement:.0f}% top-1"
    return text


def recipe_rows(run: QuantRun) -> list[tuple[str, str, str]]:
    """Extra rows of the float-vs-INT8 table: int8 share, layers kept float, calibration."""
    share = ("—" if run.int8_weight_fraction is None
             else f"{run.int8_weight_fraction:.1%}")
    kept = f"{len(run.kept_float)}" + (f" (+{run.skipped_layers - len(run.kept_float)} by "
                                       "preset/skip)" if run.skipped_layers > len(run.kept_float)
                                       else "")
    return [("0%", share, ""), ("all", kept, ""), ("—", run.calibration or "—", "")]


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def eval_file(plan: QuantPlan) -> Path:
    from npu_console.engine.quant.config import QuantError

    path = default_eval_file()
    if path is None and plan.calib_file:
        path = Path(plan.calib_file)
    if path is None:
        raise QuantError("no evaluation text: the shipped calibration text is missing; choose a "
                         "calibration file on the Calibration step")
    return path


def eval_ids(tokenizer, plan: QuantPlan) -> tuple[list[int], str]:
    from npu_console.engine.quant.calib import read_texts
    from npu_console.engine.quant.config import QuantError
    from npu_console.engine.quant.eval_methods import text_token_ids

    path = eval_file(plan)
    ids = text_token_ids(tokenizer, read_texts(str(path)))[:plan.eval_tokens]
    if len(ids) < 64:
        raise QuantError(f"evaluation text {path.name} is too short ({len(ids)} tokens)")
    return ids, path.name


def measure(plan: QuantPlan, quant_dir: str, report: Report, cancel, lo: float = 0.0,
            hi: float = 1.0) -> tuple[VariantMeasure, VariantMeasure, str]:
    from npu_console.engine.models.loader import load_model
    from npu_console.engine.quant import eval_methods as em
    from npu_console.engine.quant import evaluate as ev
    from npu_console.engine.quant.calib import Cancelled
    from npu_console.engine.quant.report import dir_bytes

    def check() -> None:
        if cancel.is_set():
            raise Cancelled()

    span = hi - lo
    report(lo, "measuring: loading float and INT8 models")
    fl = load_model(plan.model_dir, device="cpu", dtype="float32")
    check()
    qu = load_model(quant_dir, device="cpu", dtype="float32")
    ids, source = eval_ids(fl.tokenizer, plan)
    whole, docs = em.read_eval_text(eval_file(plan))
    window = min(int(getattr(fl.config, "max_position_embeddings", 256) or 256), 256)
    prompts = [ids[i * 48:i * 48 + 12] for i in range(plan.eval_prompts)
               if len(ids) >= i * 48 + 12]
    rows, ref = [], None
    for i, (loaded, path, method) in enumerate(((fl, plan.model_dir, "float"),
                                                (qu, quant_dir, plan.method))):
        base = lo + span * i / 2
        report(base, f"measuring {method}: perplexity")
        # llama.cpp's chunk method, as `npu-console eval` (engine.quant.eval_methods)
        ppl = em.evaluate_texts(
            loaded.model, loaded.tokenizer, docs, "chunks", window, whole=whole,
            max_tokens=plan.eval_tokens,
            progress=lambda d, t, b=base, m=method: report(b + span * 0.3 * d / t,
                                                           f"measuring {m}: perplexity {d}/{t}"),
            cancel=cancel).perplexity
        check()
        report(base + span * 0.3, f"measuring {method}: greedy agreement")
        greedy = [ev.greedy_tokens(loaded.model, p, plan.new_tokens) for p in prompts]
        agree = top1 = None
        if ref is None:
            ref = greedy
        else:
            agree = ev.greedy_agreement(ref, greedy)
            top1 = ev.top1_agreement(loaded.model, prompts, ref)
        check()
        report(base + span * 0.4, f"measuring {method}: speed")
        ev.decode_speed(loaded.model, batch=1, prompt_len=16, new_tokens=4)  # warm-up
        speed = ev.decode_speed(loaded.model, batch=1, prompt_len=32, new_tokens=plan.new_tokens)
        check()
        rows.append(VariantMeasure(name=loaded.name if i == 0 else Path(path).name,
                                   method=method, disk_bytes=_weights_on_disk(path, dir_bytes),
                                   memory_bytes=ev.weight_bytes(loaded.model),
                                   ttft_ms=speed.ttft_s * 1000.0, tok_s=speed.decode_tok_s,
                                   perplexity=ppl, greedy_agreement=agree,
                                   top1_agreement=top1))
    report(hi, "measured")
    return rows[0], rows[1], source


def _weights_on_disk(path: str, dir_bytes) -> int:
    """Bytes of the checkpoint files (a model folder may also hold unrelated files)."""
    p = Path(path)
    files = [f for f in p.iterdir() if f.suffix in (".safetensors", ".bin", ".pt")]
    return sum(f.stat().st_size for f in files) if files else dir_bytes(p)


# ----------------------------------------------------------------------------- sensitivity


@dataclass
class SensitivityResult:
    ranking: list[tuple[str, float]]  # (layer, KL), most sensitive first
    skip: list[str]  # recommended skip list for the budget
    budget_pct: float
    float_ppl: float
    quant_ppl: float
    met: bool
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)

    @property
    def delta_pct(self) -> float:
        return 100.0 * (self.quant_ppl / self.float_ppl - 1.0)


def run_sensitivity(plan: QuantPlan, report: Report, cancel, max_samples: int = 4,
                    max_skip: int = 12) -> SensitivityResult:
    import torch
    from npu_console.engine.quant import calib as calib_mod
    from npu_console.engine.quant.config import QuantConfig, select_layers
    from npu_console.engine.quant.job import load_float_model
    from npu_console.engine.quant.sensitivity import layer_sensitivity, recommend_skip

    t0 = time.perf_counter()
    report(0.0, "sensitivity: loading the float model")
    cfg = QuantConfig(method=plan.method, preset=plan.engine_preset, skip=tuple(plan.skip),
                      smoothquant=plan.smoothquant, calib_samples=min(plan.samples, max_samples),
                      calib_seq_len=min(plan.seq_len, 128))
    model, tok = load_float_model(plan.model_dir, "cpu", "float32")
    ids, _source = eval_ids(tok, plan)
    samples = [torch.tensor([ids[i:i + cfg.calib_seq_len]])
               for i in range(0, len(ids) - 1, cfg.calib_seq_len)][:cfg.calib_samples]
    stats = None
    if cfg.needs_calibration:
        texts = calib_mod.read_texts(plan.calib_file)
        csamples = calib_mod.build_samples(tok, texts, cfg.calib_samples, cfg.calib_seq_len)
        stats = calib_mod.collect_stats(model, csamples, select_layers(model, cfg).quantize,
                                        progress=_stage(report, 0.02, 0.1), cancel=cancel)
    ranking = layer_sensitivity(model, cfg, samples, stats,
                                progress=_stage(report, 0.1, 0.6), cancel=cancel)
    eval_t = torch.tensor(ids[:1024])
    window = min(int(getattr(model.config, "max_position_embeddings", 256) or 256), 256)
    rec = recommend_skip(model, cfg, ranking, eval_t, plan.budget_pct, stats,
                         max_skip=max_skip, window=window,
                         progress=_stage(report, 0.6, 1.0), cancel=cancel)
    return SensitivityResult(ranking=[(r.name, r.kl) for r in ranking], skip=list(rec.skip),
                             budget_pct=plan.budget_pct, float_ppl=rec.float_ppl,
                             quant_ppl=rec.quant_ppl, met=rec.met,
                             seconds=time.perf_counter() - t0)


# ----------------------------------------------------------------------------- re-export


def export_run(run: QuantRun, fmt: str, dest: str | Path, report: Report, overwrite: bool = False) -> Path:
    """Write the run's checkpoint in another format (every export is atomic)."""
    from npu_console.engine.quant.io import export, load_quantized_model

    report(0.1, f"loading {Path(run.out_dir).name}")
    model = load_quantized_model(run.out_dir, "cpu", "float32")
    report(0.5, f"writing {fmt}")
    path = export(model, dest, fmt, source_dir=run.plan["model_dir"], overwrite=overwrite)
    report(1.0, f"saved {fmt} to {path}")
    return path


# ----------------------------------------------------------------------------- history


class QuantRunStore:
    """Earlier runs as one JSON file under the state dir, newest first, one per combination."""

    def __init__(self, path: str | Path | None = None):
        if path is None:
            from npu_console.engine.paths import state_dir

            path = state_dir() / "quant_runs.json"
        self.path = Path(path)

    def load(self) -> list[QuantRun]:
        # a damaged history is kept aside as quant_runs.json.corrupt-<time> and reported
        data = load_json(self.path, {}, check=check_runs_history)
        runs = []
        for d in data.get("runs", []):
            try:
                runs.append(QuantRun.from_dict(d))
            except (TypeError, KeyError):
                continue  # a record from an older layout: skip it rather than fail
        return runs

    def find(self, key: str) -> QuantRun | None:
        return next((r for r in self.load() if r.key == key), None)

    def add(self, run: QuantRun) -> list[QuantRun]:
        runs = [run] + [r for r in self.load() if r.key != run.key]
        atomic_write_json(self.path, {"runs": [r.to_dict() for r in runs]}, indent=1)
        return runs
