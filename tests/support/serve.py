"""`npu-console serve` as a child process for the API tests: started on a free port, its URL read
from the line it logs when it listens, the rest of its stderr kept (drained on a thread)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time

_URL_RE = re.compile(r" at (http://\S+)/v1")


def read_url(proc: subprocess.Popen, timeout: float, lines: list[str] | None = None) -> str | None:
    """The base URL `serve` logs once it listens, read from `proc`'s stderr (every line read is
    kept in `lines`); None when it exits or `timeout` passes first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            if proc.poll() is not None:
                return None
            continue
        if lines is not None:
            lines.append(line)
        m = _URL_RE.search(line)
        if m:
            return m.group(1)
    return None


class Serve:
    """`npu-console serve --port 0 --threads 1 --log-level warning ARGS`."""

    def __init__(self, *args: str, timeout: float = 240.0):
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "npu_console.cli.main", "serve", "--port", "0",
             "--threads", "1", "--log-level", "warning", *args],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
            env={**os.environ, "TOKENIZERS_PARALLELISM": "false"})
        self.lines: list[str] = []
        self.url = self._wait_for_url(timeout)
        threading.Thread(target=self._drain, daemon=True).start()

    def _wait_for_url(self, timeout: float) -> str:
        url = read_url(self.proc, timeout, self.lines)
        if url:
            return url
        self.proc.kill()
        raise AssertionError(f"serve did not start: {''.join(self.lines)[-2000:]}")

    def _drain(self) -> None:
        for line in self.proc.stderr:
            self.lines.append(line)

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        return self.proc.returncode
