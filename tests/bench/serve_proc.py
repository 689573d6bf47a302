"""`npu-console serve` as a child process for the bench scripts: started on a free port, its
URL read from the line it logs when it is listening."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path


def start_serve(root: Path, *args: str, timeout_s: float = 300) -> tuple[subprocess.Popen, str]:
    """(process, base URL) of `serve --port 0 --log-level warning ARGS` run from `root`."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "npu_console.cli.main", "serve", "--port", "0", "--log-level",
         "warning", *args],
        cwd=root, env={**os.environ, "PYTHONPATH": str(root)},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        m = re.search(r"at (http://\S+)/v1", line)
        if m:
            return proc, m.group(1)
        if not line and proc.poll() is not None:
            break
    raise SystemExit("serve did not start")
