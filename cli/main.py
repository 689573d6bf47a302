"""`npu-console` entry point: one sub-command per module in cli/.

Each command module exposes `register(subparsers)` which adds its parser and sets
`func=callable(args) -> int`. Modules are imported lazily only by name in COMMANDS so that
`npu-console --version` stays instant and a broken optional part cannot take the CLI down.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from ..engine import __version__
from .errors import CliError

# name of the module in cli/ for each command group, in help order
COMMANDS = [
    "gui",
    "doctor",
    "generate",
    "chat",
    "serve",
    "smi",
    "quantize",
    "eval",
    "bench",
    "remote",
]


def build_parser() -> argparse.ArgumentParser:
    from ..engine.build_info import build_info

    parser = argparse.ArgumentParser(
        prog="npu-console",
        description="Run, quantize, benchmark and serve LLMs on Ascend NPUs, NVIDIA GPUs and CPUs.",
    )
    parser.add_argument(
        "--version", action="version", version=f"npu-console {__version__} ({build_info().describe()})"
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        try:
            module = importlib.import_module(f"npu_console.cli.{name}_cmd")
        except ModuleNotFoundError as exc:
            if exc.name == f"npu_console.cli.{name}_cmd":
                continue  # command not built yet in this checkout
            raise
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    # OpenMP workers spin briefly after each parallel region by default. The desktop console
    # keeps them passive: its GUI thread shares the cores (measured on a loaded 2-core VM: up
    # to 9x slower decode with spinning workers beside it). Headless commands keep libgomp's
    # default: with the engine thread as the only team (engine.runtime.threads) the 0.5B
    # w8a8-dynamic sweep decoded 8.9 vs 7.3 tok/s at batch 1 and 36.8 vs 22.8 at batch 8
    # (docs/benchmarks.md). OMP_WAIT_POLICY set by the user wins either way.
    args_in = sys.argv[1:] if argv is None else argv
    if args_in[:1] == ["gui"]:
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 1
    try:
        return int(args.func(args) or 0)
    except CliError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
