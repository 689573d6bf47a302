"""The command line as a process: one launcher for the process-level smoke tests (in-process
checks call `npu_console.cli.main.main([...])` with capsys instead)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_cli(*args, env: dict | None = None, timeout: float = 300,
            cwd: Path | None = ROOT) -> subprocess.CompletedProcess:
    """`npu-console ARGS` in a child Python (unbuffered, text output, never raises on exit code);
    `env` adds to the inherited environment."""
    full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    return subprocess.run([sys.executable, "-m", "npu_console.cli.main", *map(str, args)],
                          capture_output=True, text=True, cwd=cwd, env=full_env, timeout=timeout,
                          check=False)


def cli_in_process(capsys, *args) -> subprocess.CompletedProcess:
    """`npu-console ARGS` through `main([...])` in this process (no interpreter start, no second
    import of torch): the same result object as run_cli, with what the command printed."""
    from npu_console.cli.main import main

    capsys.readouterr()  # drop anything printed before
    try:
        code = main([str(a) for a in args])
    except SystemExit as exc:  # argparse's own errors and --version
        code = exc.code if isinstance(exc.code, int) else 1
    out = capsys.readouterr()
    return subprocess.CompletedProcess(list(args), code, out.out, out.err)
