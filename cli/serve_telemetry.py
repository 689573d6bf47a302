"""`npu-console serve`'s telemetry: the poller behind GET /v1/telemetry, /v1/telemetry/stream and
the device metrics of /metrics (live npu-smi / NVML / host, or a replayed capture)."""

from __future__ import annotations

from pathlib import Path

from .errors import CliError

SOURCES = ("auto", "npu-smi", "nvml", "host", "off")


def add_telemetry_args(p) -> None:
    p.add_argument("--telemetry-source", choices=SOURCES, default="auto",
                   help="device telemetry served at /v1/telemetry (default auto: npu-smi, else "
                        "NVML, else the host only; off: no telemetry routes, 503)")
    p.add_argument("--telemetry-input", nargs="+", metavar="CAPTURE", default=None,
                   help="replay saved `npu-smi info` captures (files, or capture folders with "
                        "their `info -t` sub-command captures) instead of live telemetry, one "
                        "per sample, cycled: for tests and demos")
    p.add_argument("--telemetry-interval", type=float, default=2.0, metavar="S",
                   help="seconds between telemetry samples, the cadence of "
                        "/v1/telemetry/stream (default 2)")
    p.add_argument("--npu-smi", dest="npu_smi", default=None, metavar="PATH",
                   help="npu-smi binary to run (default: from PATH)")


def check_telemetry_args(args) -> None:
    if args.telemetry_interval <= 0:
        raise CliError("--telemetry-interval must be positive")
    if args.telemetry_input and args.telemetry_source == "off":
        raise CliError("--telemetry-input replays a capture: drop --telemetry-source off")
    for capture in args.telemetry_input or ():
        if not Path(capture).exists():
            raise CliError(f"--telemetry-input: no such file or folder: {capture}")


def start_poller(args, engine):
    """The started poller for this server (its first sample is taken at once, on its thread),
    or None with --telemetry-source off. Engine stats feed its p99 / error-rate alerts."""
    if args.telemetry_source == "off" and not args.telemetry_input:
        return None
    from ..engine.telemetry import TelemetryPoller, make_provider

    if args.telemetry_input:
        source = make_provider("replay", replay_files=args.telemetry_input)
    else:
        source = make_provider(args.telemetry_source, npu_smi_path=args.npu_smi)
    poller = TelemetryPoller(source, interval_s=args.telemetry_interval,
                             engine_stats=engine.stats)
    poller.start()
    return poller
