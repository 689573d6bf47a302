"""The steps of tests/device/gpu_check.sh, run one after another as subprocesses, each with its own
time limit inside one overall budget. A step that fails, crashes or runs out of time is recorded
and the next one runs. The summary (every step's status, seconds, reason and parsed JSON output,
plus the engine / generate ratio) goes to OUT/gpu_check.json; the child processes' progress goes
to this process's stderr, which the shell script logs.

    python tests/device/gpu_check.py --out DIR [--device cuda] [--only kernels,serve] [--no-cuda WHY]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
DEMO = ROOT / "assets" / "models" / "demo"
SMOLLM2_GGUF = "smollm2-135m-instruct/SmolLM2-135M-Instruct.Q4_1.gguf"
BENCH = ["--batch-sizes", "1,8,64", "--input-len", "128", "--output-len", "64"]
QUANTS = {"bf16": "none", "w8a16": "w8a16", "w8a8-dynamic": "w8a8-dynamic"}
PROBE = ("import json, torch; ok = torch.cuda.is_available(); print(json.dumps({'ok': ok, "
         "'torch': torch.__version__, 'cuda': torch.version.cuda, 'device': "
         "torch.cuda.get_device_name(0) if ok else None, 'memory': torch.cuda.mem_get_info(0) "
         "if ok else None, 'reason': None if ok else 'torch sees no CUDA device'}))")


@dataclass
class Step:
    name: str
    argv: list[str]
    timeout: int
    cuda: bool = True  # skipped without a CUDA device
    needs: list[Path] = field(default_factory=list)  # inputs that must exist


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "npu_console.cli.main", *args]


def script(name: str, *args: str) -> list[str]:
    return [sys.executable, str(HERE / name), *args]


def plan(models: Path | None, work: Path, device: str) -> list[Step]:
    stories = (models / "stories260K") if models else Path("<no models folder>/stories260K")
    gguf = (models / SMOLLM2_GGUF) if models else Path(f"<no models folder>/{SMOLLM2_GGUF}")
    qwen = work / "qwen05b"
    dev = ["--device", device]
    steps = [
        Step("doctor", cli("doctor", "--json"), 90, cuda=False),
        Step("cuda-probe", [sys.executable, "-c", PROBE], 60),
        Step("kernels", script("gpu_kernels.py", *dev), 90),
        Step("parity-stories260K", script("gpu_parity.py", "--model", str(stories), *dev), 120,
             needs=[stories]),
        Step("parity-demo", script("gpu_parity.py", "--model", str(DEMO), *dev), 120),
        Step("pytest-gpu", [sys.executable, "-m", "pytest", "-q", "-m", "gpu", "-p",
                            "no:cacheprovider", str(HERE)], 150),
        Step("make-qwen05b-shape", [sys.executable, "-m", "npu_console.engine.bench.random_model", "--out",
                                    str(qwen), "--dtype", "bfloat16"], 90),
        Step("generate-baseline-qwen05b", script("gpu_baseline.py", "--model", str(qwen), *dev),
             90, needs=[qwen]),
    ]
    for label, quant in QUANTS.items():
        steps.append(Step(f"bench-qwen05b-{label}", cli(
            "bench", "offline", "--model", str(qwen), "--quant", quant, "--dtype", "bfloat16",
            *dev, *BENCH, "--json"), 100, needs=[qwen]))
    steps.append(Step("serve-qwen05b", script("gpu_serving.py", "--model", str(qwen), *dev,
                                              "--concurrency", "32"), 150, needs=[qwen]))
    for label, quant in QUANTS.items():
        steps.append(Step(f"bench-smollm2-{label}", cli(
            "bench", "offline", "--model", str(gguf), "--quant", quant, "--dtype", "bfloat16",
            *dev, *BENCH, "--json"), 100, needs=[gguf]))
    return steps


def parse_json(text: str):
    """The JSON document a step printed on stdout (after any stray lines), or None."""
    start = text.find("{")
    if start < 0:
        return None
    try:
        return json.loads(text[start:])
    except ValueError:
        return None


def verdict(step: Step, rc: int, out: str, doc) -> str | None:
    """None when the step passed, else why not."""
    if rc != 0:
        return f"exit status {rc}"
    if step.name == "pytest-gpu":
        return None if " passed" in out else "no test marked gpu ran (does torch see CUDA?)"
    if step.name == "make-qwen05b-shape":
        return None
    if doc is None:
        return "no JSON on stdout"
    if step.name == "doctor":
        bad = [c["name"] for c in doc.get("checks", []) if c.get("status") == "fail"]
        return f"doctor checks failed: {', '.join(bad)}" if bad else None
    if doc.get("ok") is False:
        return doc.get("reason") or "the check did not hold (see result)"
    return None


def run_step(step: Step, deadline: float) -> dict:
    rec: dict = {"name": step.name, "command": " ".join(step.argv[1:])}
    missing = [str(p) for p in step.needs if not p.exists()]
    if missing:
        return {**rec, "status": "failed", "seconds": 0.0, "reason": f"not found: {missing[0]}"}
    left = deadline - time.monotonic()
    if left < 10:
        return {**rec, "status": "skipped", "seconds": 0.0, "reason": "time budget spent"}
    limit = int(min(step.timeout, left))
    t0 = time.monotonic()
    print(f"[gpu_check] step {step.name} (limit {limit} s)", file=sys.stderr, flush=True)
    # its own process group, so that a timeout also ends what it started (a server)
    p = subprocess.Popen(step.argv, cwd=ROOT, stdout=subprocess.PIPE, text=True,
                         start_new_session=True)
    try:
        out, _ = p.communicate(timeout=limit)
        rc = p.returncode
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, _ = p.communicate()
        rc = None
    rec["seconds"] = round(time.monotonic() - t0, 1)
    doc = parse_json(out)
    if step.name == "pytest-gpu":
        rec["result"] = out.strip().splitlines()[-1:]
    elif doc is not None:
        rec["result"] = doc
    elif out.strip():
        rec["stdout_tail"] = out.strip()[-2000:]
    why = f"timed out after {limit} s" if rc is None else verdict(step, rc, out, doc)
    print(f"[gpu_check] {step.name}: {'passed' if why is None else 'FAILED: ' + why} "
          f"({rec['seconds']} s)", file=sys.stderr, flush=True)
    return {**rec, "status": "passed" if why is None else "failed",
            **({"reason": why} if why else {})}


def ratios(steps: list[dict]) -> dict:
    """Engine output tokens/s per batch size over generate's, one request at a time."""
    by = {s["name"]: s.get("result") for s in steps if s.get("status") == "passed"}
    base = (by.get("generate-baseline-qwen05b") or {}).get("output_tokens_per_s")
    out = {}
    for label in QUANTS:
        for b in (by.get(f"bench-qwen05b-{label}") or {}).get("batches", []):
            if base:
                out[f"qwen05b-{label}-batch{b['batch_size']}"] = round(
                    b["output_tokens_per_s"] / base, 2)
    return {"generate_one_at_a_time_tokens_per_s": base, "engine_over_generate": out}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--work", type=Path, default=None, help="scratch folder (made models)")
    ap.add_argument("--models", default="", help="folder with stories260K and smollm2-...")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--budget", type=float, default=450.0, help="seconds for all steps")
    ap.add_argument("--only", default="", help="comma-separated step names")
    ap.add_argument("--no-cuda", default=None, metavar="WHY",
                    help="no CUDA device here: skip the CUDA steps, say why")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    work = args.work or args.out / "work"
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    models = Path(args.models).resolve() if args.models else None
    steps = plan(models, work, args.device)
    if args.only:
        wanted = set(args.only.split(","))
        steps = [s for s in steps if s.name in wanted]
    t_start = time.monotonic()
    deadline = t_start + args.budget
    records = []
    for step in steps:
        if args.no_cuda is not None and step.cuda:
            records.append({"name": step.name, "status": "skipped",
                            "reason": f"no CUDA device: {args.no_cuda}"})
            continue
        records.append(run_step(step, deadline))
    summary = {
        "issue": 24, "host": platform.node(), "python": sys.executable,
        "device": args.device,
        "cuda": {"steps": "skipped" if args.no_cuda is not None else "ran",
                 "skipped_because": args.no_cuda,
                 "probe": next((r.get("result") for r in records if r["name"] == "cuda-probe"),
                               None)},
        "models": str(models) if models else None,
        "seconds": round(time.monotonic() - t_start, 1),
        "passed": sum(r["status"] == "passed" for r in records),
        "failed": sum(r["status"] == "failed" for r in records),
        "skipped": sum(r["status"] == "skipped" for r in records),
        "steps": records,
        "ratios": ratios(records),
    }
    path = args.out / "gpu_check.json"
    path.write_text(json.dumps(summary, indent=2, default=str))
    for r in records:
        print(f"  {r['status']:>7}  {r['name']:<28} {r.get('reason', '')}", file=sys.stderr)
    print(f"[gpu_check] {summary['passed']} passed, {summary['failed']} failed, "
          f"{summary['skipped']} skipped in {summary['seconds']} s -> {path}", file=sys.stderr)
    if args.no_cuda is not None:
        return 0
    return 0 if summary["failed"] == 0 and summary["skipped"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
