"""`npu-console serve` as a real child process on loopback that a test can kill (SIGKILL, as a
crashed or unplugged server) and start again on the same port: the fleet tests' servers
(tests/test_fleet.py, tests/test_console_fleet.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from urllib.parse import urlsplit

from support.serve import read_url


class ServeProcess:
    """One `serve` process; `start()` launches it, `wait_ready()` reads its URL from the line it
    logs once it listens (its stderr is then drained on a thread, kept in `lines`)."""

    def __init__(self, *args: str, port: int = 0):
        self.args = args
        self.port = port
        self.proc: subprocess.Popen | None = None
        self.url: str | None = None
        self.lines: list[str] = []

    def start(self) -> ServeProcess:
        self.lines = []
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "npu_console.cli.main", "serve", "--host", "127.0.0.1",
             "--port", str(self.port), "--threads", "1", "--log-level", "warning", *self.args],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
            env={**os.environ, "TOKENIZERS_PARALLELISM": "false"})
        return self

    def wait_ready(self, timeout: float = 240.0) -> str:
        assert self.proc is not None and self.proc.stderr is not None
        url = read_url(self.proc, timeout, self.lines)
        if url:
            self.url = url
            self.port = urlsplit(self.url).port or self.port  # a restart reuses it
            threading.Thread(target=self._drain, args=(self.proc,), daemon=True).start()
            return self.url
        raise AssertionError(f"serve did not start: {''.join(self.lines)[-2000:]}")

    def _drain(self, proc: subprocess.Popen) -> None:
        for line in proc.stderr:
            self.lines.append(line)

    def kill(self) -> None:
        """SIGKILL: the server vanishes without closing anything, as in a crash."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.kill()
