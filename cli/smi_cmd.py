"""`npu-console smi`: a small nvitop-like live view of NPUs / GPUs / host in the terminal.

npu-console smi                       live table, refreshed every --interval seconds
npu-console smi --once                one snapshot
npu-console smi --replay A.txt B.txt  play saved `npu-smi info` captures (files or folders, cycled)
npu-console smi --input A.txt --json  parse one capture, print it as JSON
npu-console smi --input DIR --json    parse a capture folder: its tables, each chip with the
                                      details its `info -t` sub-command captures give
"""

from __future__ import annotations

import json
import os
import sys
import time
from datetime import datetime
from pathlib import Path

SOURCES = ("auto", "npu-smi", "nvml", "host")


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "smi",
        help="live device telemetry (npu-smi / NVML / host) in the terminal",
        description="Show NPU / GPU / host telemetry; parse saved npu-smi captures.",
    )
    p.add_argument(
        "--interval",
        type=float,
        default=2.0,
        metavar="S",
        help="refresh period in seconds (default 2)",
    )
    p.add_argument("--once", action="store_true", help="print one snapshot and exit")
    p.add_argument(
        "--count",
        type=int,
        default=0,
        metavar="N",
        help="stop after N refreshes (default: run until Ctrl-C)",
    )
    p.add_argument("--replay", nargs="+", metavar="CAPTURE",
                   help="replay saved npu-smi captures (files, or capture folders)")
    p.add_argument(
        "--input",
        metavar="FILE|DIR",
        help="parse one saved `npu-smi info` capture, or a folder of captures (tables + "
        "`info -t` sub-commands, named as in docs/telemetry.md)",
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="with --input: print the parsed table as JSON; with --once: the snapshot",
    )
    p.add_argument("--npu-smi", dest="npu_smi", metavar="PATH", help="npu-smi binary to run")
    p.add_argument(
        "--source",
        choices=SOURCES,
        default="auto",
        help="telemetry source (default: auto = npu-smi, else NVML, else host)",
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=10.0,
        metavar="S",
        help="npu-smi timeout in seconds (default 10)",
    )
    p.add_argument("--no-color", action="store_true", help="no ANSI colours / screen redraw")
    p.set_defaults(func=run)


def _fail(msg: str):
    from .main import CliError

    raise CliError(msg)


def _read_text(path: str) -> str:
    p = Path(path)
    if not p.is_file():
        _fail(f"no such file: {path}")
    try:
        return p.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        _fail(f"cannot read {path}: {exc.strerror or exc}")
    return ""


def run(args) -> int:
    try:
        return _run(args)
    except BrokenPipeError:  # `npu-console smi ... | head`
        try:
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - keep interpreter exit quiet
        except OSError:
            pass
        return 0


def _run(args) -> int:
    if args.interval <= 0:
        _fail("--interval must be positive")
    if args.timeout <= 0:
        _fail("--timeout must be positive")
    if args.input:
        return _run_input(args)
    if args.json and not args.once:
        _fail("--json needs --input FILE or --once")

    from ..engine.telemetry import TelemetryPoller, make_provider

    if args.replay:
        for f in args.replay:
            if not Path(f).exists():
                _fail(f"no such file or folder: {f}")
        source = make_provider("replay", replay_files=args.replay)
    else:
        source = make_provider(args.source, npu_smi_path=args.npu_smi, timeout_s=args.timeout)
    poller = TelemetryPoller(source, interval_s=args.interval)
    color = not args.no_color and sys.stdout.isatty()
    try:
        if args.once:
            snap = poller.poll_once()
            if args.json:
                from ..engine.telemetry.snapshot_json import snapshot_json

                print(json.dumps(snapshot_json(snap, poller.active_alerts()), indent=2))
            else:
                print(render(snap, poller, color=color))
            return 0
        n = 0
        while True:
            started = time.monotonic()
            snap = poller.poll_once()
            frame = render(snap, poller, color=color)
            if color:
                sys.stdout.write("\x1b[H\x1b[2J" + frame + "\n")
            else:
                sys.stdout.write(frame + "\n\n")
            sys.stdout.flush()
            n += 1
            if args.count and n >= args.count:
                return 0
            time.sleep(max(0.0, args.interval - (time.monotonic() - started)))
    except KeyboardInterrupt:
        return 0
    finally:
        poller.close()


def _run_input(args) -> int:
    from ..engine.telemetry import TelemetryPoller, make_provider
    from ..engine.telemetry.npu_smi_table import parse_npu_smi_info

    if Path(args.input).is_dir():
        return _run_folder(args)
    text = _read_text(args.input)
    info = parse_npu_smi_info(text)
    for w in info.warnings:
        print(f"warning: {w}", file=sys.stderr)
    if args.json:
        print(json.dumps(info.to_json(), indent=2))
        return 0
    source = make_provider("replay", replay_files=[args.input])
    poller = TelemetryPoller(source, interval_s=args.interval)
    try:
        print(render(poller.poll_once(), poller, color=not args.no_color and sys.stdout.isatty()))
    finally:
        poller.close()
    return 0


def _run_folder(args) -> int:
    from ..engine.telemetry import TelemetryPoller, make_provider
    from ..engine.telemetry.capture_folder import folder_json

    data = folder_json(args.input)
    if not data["captures"]:
        _fail(f"no `npu-smi info` table capture in {args.input}")
    for cap in data["captures"]:
        for w in cap["warnings"]:
            print(f"warning: {cap['file']}: {w}", file=sys.stderr)
    if args.json:
        print(json.dumps(data, indent=2))
        return 0
    poller = TelemetryPoller(make_provider("replay", replay_files=[args.input]), args.interval)
    try:
        print(render(poller.poll_once(), poller, color=not args.no_color and sys.stdout.isatty()))
    finally:
        poller.close()
    return 0


# ----------------------------------------------------------------------------- rendering


def _c(text: str, code: str, color: bool) -> str:
    return f"\x1b[{code}m{text}\x1b[0m" if color else text


def _bar(pct: float | None, width: int = 10) -> str:
    if pct is None:
        return "[" + " " * width + "]"
    filled = round(max(0.0, min(100.0, pct)) / 100.0 * width)
    return "[" + "|" * filled + " " * (width - filled) + "]"


def _num(v, fmt: str = "{:.0f}", missing: str = "-") -> str:
    return missing if v is None else fmt.format(v)


def render(snap, poller=None, color: bool = False) -> str:
    when = datetime.fromtimestamp(snap.timestamp).strftime("%Y-%m-%d %H:%M:%S")
    lines = [_c(f"npu-console smi   {when}   source: {snap.source}", "1", color)]
    if snap.error is not None:
        code = f" (code {snap.error.code})" if snap.error.code is not None else ""
        lines.append(_c(f"error: {snap.error.kind}: {snap.error.message}{code}", "31", color))
    header = (
        f"{'DEVICE':<10} {'NAME':<14} {'HEALTH':<8} {'UTIL':>5} {'':12} "
        f"{'MEMORY (MB)':>17} {'MEM%':>5} {'TEMP':>5} {'POWER':>7}"
    )
    lines.append(header)
    lines.append("-" * len(header))
    for d in snap.devices:
        health = d.health or "-"
        hcol = "32" if health.upper() == "OK" else "31"
        mem = (
            f"{_num(d.mem_used_mb)} / {_num(d.mem_total_mb)}" if d.mem_total_mb is not None else "-"
        )
        name = d.name if len(d.name) <= 14 else d.name[:13] + "~"
        lines.append(
            f"{d.key:<10} {name:<14} {_c(f'{health:<8}', hcol, color)} "
            f"{_num(d.util_pct, '{:.0f}%'):>5} {_bar(d.util_pct):12} {mem:>17} "
            f"{_num(d.mem_pct, '{:.0f}%'):>5} {_num(d.temp_c, '{:.0f}C'):>5} "
            f"{_num(d.power_w, '{:.1f}W'):>7}"
        )
    details = [d for d in snap.devices if d.detail is not None]
    if details:
        lines.append("")
        lines.extend(_detail_line(d.key, d.detail) for d in details)
    if snap.processes:
        lines.append("")
        lines.append(f"{'DEVICE':<10} {'PID':>9} {'NAME':<18} {'MEMORY (MB)':>12}")
        for p in snap.processes:
            lines.append(
                f"{p.device_key:<10} {p.pid:>9} {(p.name or '?'):<18} {_num(p.memory_mb):>12}"
            )
    elif any(d.kind != "cpu" for d in snap.devices):
        lines.append("")
        lines.append("no processes on the accelerators")
    h = snap.host
    if h is not None:
        lines.append("")
        mem = (
            f"{_num(h.mem_used_mb and h.mem_used_mb / 1024, '{:.1f}')}"
            f"/{_num(h.mem_total_mb and h.mem_total_mb / 1024, '{:.1f}')} GB"
        )
        lines.append(
            f"host: cpu {_num(h.cpu_pct, '{:.0f}%')} of {h.cpu_count or '?'} cores  "
            f"mem {mem} ({_num(h.mem_pct, '{:.0f}%')})  load {_num(h.load_1m, '{:.2f}')}   "
            f"this process (pid {h.proc_pid}): cpu {_num(h.proc_cpu_pct, '{:.0f}%')} "
            f"rss {_num(h.proc_rss_mb, '{:.0f}')} MB"
        )
    if poller is not None:
        for ev in poller.active_alerts():
            lines.append(_c(f"ALERT [{ev.severity}] {ev.message}", "33", color))
    for w in snap.warnings:
        lines.append(_c(f"note: {w}", "2", color))
    return "\n".join(lines)


def _detail_line(key: str, det) -> str:
    """One line per chip from the `info -t` sub-commands (what `DeviceSnapshot.detail` holds)."""
    parts = []
    if det.health_status:
        parts.append(f"health {det.health_status} ({det.health_meaning})")
    parts += [f"code {c}" for c in det.error_codes]
    for label, value in (("AI CPU", det.aicpu_pct), ("ctrl CPU", det.ctrlcpu_pct),
                         ("HBM BW", det.hbm_bandwidth_pct), ("DDR BW", det.ddr_bandwidth_pct)):
        if value is not None:
            parts.append(f"{label} {value:.0f}%")
    single, double = det.ecc_count("HBM", "Single"), det.ecc_count("HBM", "Double")
    if single is not None or double is not None:
        parts.append(f"HBM ECC 1-bit/2-bit {_num(single)}/{_num(double)}")
    if det.firmware_version:
        parts.append(f"fw {det.firmware_version}")
    if det.serial_number:
        parts.append(f"S/N {det.serial_number}")
    parts += [f"failed: {e}" for e in det.errors]
    return f"{key:<10} " + " · ".join(parts or ["no sub-command answer yet"])
