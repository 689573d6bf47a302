"""Benchmark: parse a 16-chip `npu-smi info` table with a process table (target < 2 ms).

Input: the real A3 capture a3_info_2 (8 NPUs x 2 dies = 16 chips, 98 columns) with its idle
process table replaced by two process rows per NPU, each row copied from the real A3 process
row format of a3_info_6 (pid and die changed). Also times the unmodified captures.

    nice -n 10 .venv/bin/python tests/bench/bench_npu_smi_parse.py
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
FIXTURES = ROOT.parent / "shared" / "fixtures" / "npu-smi"

from npu_console.engine.telemetry.npu_smi_table import parse_npu_smi_info


def sixteen_chips_with_processes() -> str:
    lines = (FIXTURES / "a3_info_2.txt").read_text().splitlines()
    proc_row = next(
        ln for ln in (FIXTURES / "a3_info_6.txt").read_text().splitlines() if "990711" in ln
    )
    rule = lines[-1]
    out = []
    for ln in lines:
        if "No running processes found in NPU" in ln:
            npu = int(ln.split("NPU")[-1].strip(" |"))
            for die in (0, 1):
                row = proc_row.replace("| 1       1 ", f"| {npu:<7} {die} ", 1)
                out.append(row.replace("990711", str(900000 + 10 * npu + die)))
            continue
        out.append(ln)
    assert out[-1] == rule
    return "\n".join(out) + "\n"


def bench(text: str, repeat: int = 2000) -> tuple[float, float]:
    for _ in range(50):
        parse_npu_smi_info(text)
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        parse_npu_smi_info(text)
        samples.append(time.perf_counter() - t0)
    samples.sort()
    return statistics.median(samples) * 1e3, samples[int(0.99 * len(samples))] * 1e3


def main() -> int:
    if not FIXTURES.is_dir():
        print(f"fixtures not found at {FIXTURES}")
        return 1
    text = sixteen_chips_with_processes()
    info = parse_npu_smi_info(text)
    assert len(info.chips) == 16 and len(info.processes) == 16, (
        len(info.chips),
        len(info.processes),
    )
    med, p99 = bench(text)
    print(f"16 chips + 16 processes (A3, 98 col): median {med:.3f} ms  p99 {p99:.3f} ms")
    for name in ("310_info_3", "910b3_info_3", "310p3-duo_info_1", "err_info_1"):
        med, p99 = bench((FIXTURES / f"{name}.txt").read_text(), repeat=1000)
        print(f"{name:<18} median {med:.3f} ms  p99 {p99:.3f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
