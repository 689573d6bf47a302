"""The quantization wizard's model, free of Qt: the user's choices (QuantPlan), turned into a
request for the one quantization workflow (engine.quant.workflow), its measured result as a
QuantRun, the verdict text, and the JSON store of earlier runs so nobody re-measures the same
combination. The Quantize page (console/pages/quantize*.py) is a view over this."""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from ..engine.atomic_files import atomic_write_json, check_runs_history, load_json
from ..engine.typed_records import check_fields
from .events import Emitter

PRESET_LABELS = {"all": "All linear layers", "attention": "Attention only",
                 "no-down-proj": "All but down_proj", "custom": "Custom skip list"}
METHOD_LABELS = {"w8a16": "W8A16 (int8 weights)", "w8a8-dynamic": "W8A8 dynamic",
                 "w8a8-static": "W8A8 static"}
EVAL_CTX = 256  # the wizard's perplexity window: quick enough for a laptop CPU


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
    # lm_head and embeddings in int8 too: "auto" (engine.quant.head decides from the head's
    # share of the weights), "on", "off"; runs saved before hold a bool
    int8_head: str = "auto"
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
        mode = self.head_mode
        if mode != "off":  # off adds nothing, so that earlier runs keep their keys
            ident["int8_head"] = True if mode == "on" else mode
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
        if self.head_mode == "on":
            parts.append("int8 lm_head + embeddings")
        elif self.head_mode == "auto":
            parts.append("lm_head: auto")
        if self.fit_budget:
            parts.append(f"float layers as needed for {self.budget_pct:g}%")
        return " · ".join(parts)

    @property
    def head_mode(self) -> str:
        from ..engine.quant.head import head_mode

        return head_mode(self.int8_head)

    def out_dir(self) -> Path:
        return runs_dir() / f"{self.model_name}-{self.method}-{self.key()}"

    def request(self, out_dir: str | Path | None = None):
        """The workflow request: quantize (auto recipe), export natively, measure float vs
        INT8 on the held-out text with the wizard's sizes."""
        from ..engine.quant.report import EvalSpec
        from ..engine.quant.workflow import QuantizeRequest

        text = str(eval_file(self))
        return QuantizeRequest(
            model_dir=self.model_dir, out_dir=str(out_dir or self.out_dir()), method=self.method,
            fmt="native", preset=self.engine_preset, skip=tuple(self.skip),
            smoothquant=self.smoothquant, calib_file=self.calib_file, samples=self.samples,
            seq_len=self.seq_len, overwrite=True, int8_head=self.head_mode,
            budget_pct=self.budget_pct if self.fit_budget else None,
            eval_file=text if self.fit_budget else None,
            evaluate=EvalSpec(data=text, max_tokens=self.eval_tokens,
                              n_prompts=self.eval_prompts, new_tokens=self.new_tokens,
                              ctx=EVAL_CTX, batch8=False, kl=False))

    def sensitivity_request(self):
        from ..engine.quant.analysis import SensitivityRequest

        return SensitivityRequest(model_dir=self.model_dir, eval_file=str(eval_file(self)),
                                  method=self.method, preset=self.engine_preset,
                                  skip=tuple(self.skip), smoothquant=self.smoothquant,
                                  calib_file=self.calib_file, samples=self.samples,
                                  seq_len=self.seq_len, budget_pct=self.budget_pct,
                                  eval_tokens=self.eval_tokens)


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

    @classmethod
    def from_row(cls, row) -> VariantMeasure:
        """From an engine.quant.report.VariantRow."""
        return cls(name=row.name, method=row.method, disk_bytes=row.disk_bytes,
                   memory_bytes=row.weight_bytes, ttft_ms=row.ttft_ms, tok_s=row.tok_s_b1,
                   perplexity=row.perplexity, greedy_agreement=row.greedy_agreement,
                   top1_agreement=row.top1_agreement)


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
    # None, both, for a run on a server with "measure float vs INT8" off: nothing compared
    float: VariantMeasure | None
    quant: VariantMeasure | None
    eval_source: str
    calibration: str = ""  # which calibration text was used ("" in runs saved before)
    kept_float: dict = field(default_factory=dict)  # layer -> why it stayed float
    int8_weight_fraction: float | None = None  # of the linear layers' weights
    budget_note: str = ""  # why a budget could not be met
    int8_head: bool = False  # what the run did with lm_head + embedding (not what was asked)
    head_reason: str = ""
    head_cost: dict | None = None  # engine.quant.head.HeadCost.to_dict(): the int8 head alone
    server: str = ""  # the base URL of the server it ran on ("" for this machine)

    @property
    def measured(self) -> bool:
        return self.float is not None and self.quant is not None

    @property
    def ppl_delta_pct(self) -> float | None:
        if not self.measured:
            return None
        return 100.0 * (self.quant.perplexity / self.float.perplexity - 1.0)

    def within(self, budget_pct: float) -> bool:
        return self.measured and self.ppl_delta_pct <= budget_pct

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> QuantRun:
        d = dict(d)
        for k in ("float", "quant"):
            d[k] = VariantMeasure(**d[k]) if d.get(k) is not None else None
        return cls(**d)

    @classmethod
    def from_result(cls, plan: QuantPlan, result) -> QuantRun:
        """From the workflow's QuantizeResult (its evaluate stage ran)."""
        cmp = result.comparison
        return cls(key=plan.key(), plan=asdict(plan), created=_now(), out_dir=result.out_dir,
                   fmt=result.fmt, seconds=result.seconds,
                   quantized_layers=len(result.info.quantized),
                   skipped_layers=len(result.info.skipped), calib_samples=result.calib_samples,
                   float=VariantMeasure.from_row(cmp.rows[0]),
                   quant=VariantMeasure.from_row(cmp.rows[1]), eval_source=cmp.source,
                   calibration=result.calibration or "none (weights only)",
                   kept_float=dict(result.kept_float),
                   int8_weight_fraction=result.int8_weight_fraction,
                   budget_note=(result.budget or {}).get("why", ""),
                   int8_head=bool(result.info.int8_head),
                   head_reason=result.head.reason if result.head else "",
                   head_cost=result.head_cost.to_dict() if result.head_cost else None)


def run_plan(plan: QuantPlan, on_event=None, cancel: threading.Event | None = None,
             out_dir: str | Path | None = None) -> QuantRun:
    """Run the workflow for the wizard's plan. A cancel or an error at any stage leaves no
    output folder behind (the workflow puts the checkpoint in place only at the end)."""
    from ..engine.quant.workflow import run_workflow

    return QuantRun.from_result(plan, run_workflow(plan.request(out_dir), on_event, cancel))


def run_sensitivity(plan: QuantPlan, on_event=None, cancel: threading.Event | None = None):
    from ..engine.quant.analysis import run_sensitivity as analyse

    return analyse(plan.sensitivity_request(), on_event, cancel)


def export_run(run: QuantRun, fmt: str, dest: str | Path, on_event=None,
               overwrite: bool = False) -> Path:
    """Write the run's checkpoint in another format (every export is atomic)."""
    from ..engine.quant.workflow import reexport

    return reexport(run.out_dir, fmt, str(dest), source_dir=run.plan["model_dir"],
                    overwrite=overwrite, on_event=on_event)


def verdict(run: QuantRun, budget_pct: float) -> tuple[bool, str]:
    """(within budget, one paragraph) for the wizard: perplexity against the budget, the int8
    share of linear weights, the layers kept float and the calibration used."""
    share = ("" if run.int8_weight_fraction is None
             else f"{run.int8_weight_fraction:.1%} of linear weights int8")
    kept = (f"{len(run.kept_float)} sensitive layer(s) kept float" if run.kept_float
            else "no layer kept float for quality")
    head = ""
    if run.int8_head:
        cost = run.head_cost
        head = "int8 lm_head" + (f" (alone {cost['perplexity_change_pct']:+.2f}% perplexity)"
                                 if cost else "")
    facts = " · ".join(x for x in (share, kept, head, run.calibration and
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


# The wizard's messages and checks that are not about widgets (the page shows them).

CALIB_BUILTIN_TEXT = ("16 samples of 128 tokens (256 for w8a8-static), sampled from the model "
                      "after BOS and a few neutral chat prompts (w8a8-static: two programming "
                      "requests too): text in the model's own language and format, never the "
                      "evaluation text.")
CALIB_REMOTE_TEXT = "Read on the server when the run starts (a path under its roots)."


def calib_note(needs_calibration: bool) -> str:
    """What the calibration text is used for, with this method and these options."""
    return ("Activation ranges, per-layer SmoothQuant and error-compensating rounding are "
            "chosen on this text." if needs_calibration
            else "Error-compensating rounding uses this text.")


def calib_summary_text(summary: tuple[int, int], samples: int, seq_len: int) -> str:
    """A calibration file's calib_summary, and what is cut from it."""
    docs, words = summary
    return (f"{docs} documents, about {words:,} words. Up to {samples} samples of {seq_len} "
            "tokens are cut from it evenly.")


def known_text(run: QuantRun) -> str:
    return (f"Already measured on {run.created[:16].replace('T', ' ')} UTC: the result is shown "
            "below. Run again to re-measure.")


def done_text(run: QuantRun) -> str:
    return (f"Done in {run.seconds:.0f} s: {run.quantized_layers} layers int8, "
            f"{run.skipped_layers} float. Saved to {run.out_dir}")


def variant_name(run: QuantRun, taken: set[str]) -> str:
    """The run's model name and method, numbered past the names already loaded."""
    base = f"{run.plan['model_name']}-{run.plan['method']}"
    name, i = base, 2
    while name in taken:
        name, i = f"{base}-{i}", i + 1
    return name


def export_problem(run: QuantRun, fmt: str) -> str:
    """Why the run cannot be saved in `fmt` (one line), or "" when it can."""
    if fmt == "compressed-tensors" and run.plan["method"] == "w8a16":
        return ("⚠ compressed-tensors is for W8A8 only (vLLM has no W8A16 mapping): choose "
                "native or msModelSlim.")
    if fmt != "native" and (run.int8_head or run.plan.get("int8_head") is True):
        return ("⚠ This run has an int8 lm_head and embeddings, which vLLM and vllm-ascend "
                "read in float: save it as native, or run again with lm_head and embeddings "
                "in int8 set to off.")
    return ""


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
    return [("0%", share, ""), ("all", kept, ""), ("—", run.calibration or "—", ""),
            head_row(run)]


def head_row(run: QuantRun) -> tuple[str, str, str]:
    """lm_head + embedding: float in the float model; int8 or float in the run, and what the
    int8 head alone costs (perplexity on the quantized model, float vs int8 head)."""
    int8 = run.int8_head or run.plan.get("int8_head") is True  # runs saved before: the flag
    state = "int8" if int8 else "float"
    cost = run.head_cost
    change = (f"{cost['perplexity_change_pct']:+.2f}% alone" if cost
              else "—" if int8 else "")
    return ("float", state, change)


def head_recommendation(model_dir: str) -> tuple[bool, float | None]:
    """(auto turns the int8 head on, the head's share of the weights) of a model folder or
    GGUF, from its headers only; (False, None) when they do not say."""
    from ..engine.quant.head import recommended, share_of_path

    try:
        share = share_of_path(model_dir)
    except (OSError, ValueError):
        return False, None
    return recommended(share), share


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def default_eval_file() -> Path | None:
    """Held-out text when the project ships it, else the calibration text."""
    from ..engine.paths import CALIB_DIR

    for name in ("heldout_demo.txt", "calibration.txt"):
        if (CALIB_DIR / name).is_file():
            return CALIB_DIR / name
    return None


def eval_file(plan: QuantPlan) -> Path:
    from ..engine.quant.config import QuantError

    path = default_eval_file()
    if path is None and plan.calib_file:
        path = Path(plan.calib_file)
    if path is None:
        raise QuantError("no evaluation text: the shipped calibration text is missing; choose a "
                         "calibration file on the Calibration step")
    return path


def calib_summary(path: str | None) -> tuple[int, int]:
    """(documents, words) of a calibration file; raises QuantError with a one-line reason."""
    from ..engine.quant.calib import read_texts

    if path is not None and Path(path).is_file() and Path(path).stat().st_size > 200 * 2**20:
        from ..engine.quant.config import QuantError

        raise QuantError(f"{path} is larger than 200 MB; pick a smaller calibration file")
    texts = read_texts(path)
    return len(texts), sum(len(t.split()) for t in texts)


def runs_dir() -> Path:
    from ..engine.paths import state_dir

    return state_dir() / "quantized"


class QuantRunStore:
    """Earlier runs as one JSON file under the state dir, newest first, one per combination.
    Announces on `events` (console.events.Emitter), on the thread that changed it: "runs" with
    the list whenever it is read with reload() or grows."""

    def __init__(self, path: str | Path | None = None):
        if path is None:
            from ..engine.paths import state_dir

            path = state_dir() / "quant_runs.json"
        self.path = Path(path)
        self.events = Emitter()

    def reload(self) -> list[QuantRun]:
        runs = self.load()
        self.events.emit("runs", runs)
        return runs

    def load(self) -> list[QuantRun]:
        # a damaged history is kept aside as quant_runs.json.corrupt-<time> and reported
        data = load_json(self.path, {}, check=check_runs_history)
        runs = []
        for d in data.get("runs", []):
            try:
                runs.append(check_fields(QuantRun.from_dict(d)))
            except (TypeError, KeyError, ValueError, AttributeError):
                continue  # a record from an older layout, or damaged: skip it, keep the rest
        return runs

    def find(self, key: str) -> QuantRun | None:
        return next((r for r in self.load() if r.key == key), None)

    def add(self, run: QuantRun) -> list[QuantRun]:
        runs = [run] + [r for r in self.load() if r.key != run.key]
        atomic_write_json(self.path, {"runs": [r.to_dict() for r in runs]}, indent=1)
        self.events.emit("runs", runs)
        return runs
