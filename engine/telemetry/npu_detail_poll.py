"""The slow lane of the npu-smi provider: `info -t usages|board|ecc|health` on a thread of its own.

The table (`npu-smi info`) is read every poll; the sub-commands cost one call per card (health:
per chip) and change slowly, so `DetailRefresher` runs them every `interval_s`, each with its
own timeout, and keeps the answers. The table reader only reads that cache: a hung or failing
sub-command never delays the table. A failed call keeps the previous answer and says why in
`ChipDetail.errors`; after two timeouts in one round the rest of the round is skipped (npu-smi
is hung; the next round tries again).
"""

from __future__ import annotations

import logging
import subprocess
import threading
import time
from collections.abc import Callable, Sequence

from .npu_details import (
    LIVE_COMMANDS,
    SubOutput,
    argv_for,
    build_details,
)
from .types import ChipDetail

log = logging.getLogger(__name__)

DEFAULT_DETAIL_INTERVAL_S = 30.0
DEFAULT_DETAIL_TIMEOUT_S = 5.0
MAX_TIMEOUTS_PER_ROUND = 2

Runner = Callable[[Sequence[str], float], tuple[int, str]]  # (argv, timeout) -> (rc, output)


class DetailRefresher:
    def __init__(
        self,
        binary: Callable[[], str | None],
        run: Runner,
        interval_s: float = DEFAULT_DETAIL_INTERVAL_S,
        timeout_s: float = DEFAULT_DETAIL_TIMEOUT_S,
    ):
        self.binary = binary  # the resolved npu-smi path, or None when it is gone
        self.run = run
        self.interval_s = float(interval_s)
        self.timeout_s = float(timeout_s)
        self.rounds = 0  # finished refresh rounds
        self._lock = threading.Lock()
        self._chips: tuple[tuple[int, int], ...] = ()
        self._outputs: dict[tuple[str, int, int | None], SubOutput] = {}
        self._details: dict[str, ChipDetail] = {}
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def want(self, chips: Sequence[tuple[int, int]]) -> None:
        """The chips the table shows now; a new set is refreshed at once (starts the thread)."""
        chips = tuple(chips)
        with self._lock:
            changed = chips != self._chips
            self._chips = chips
            if self._thread is None and not self._stop.is_set():
                self._thread = threading.Thread(
                    target=self._loop, name="npu-smi-details", daemon=True
                )
                self._thread.start()
        if changed:
            self._wake.set()

    def details(self) -> dict[str, ChipDetail]:
        with self._lock:
            return dict(self._details)

    def close(self) -> None:
        """Stop after the call in flight (bounded by its timeout); does not wait for it."""
        self._stop.set()
        self._wake.set()

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.interval_s)
            self._wake.clear()
            if self._stop.is_set():
                break
            try:
                self.refresh_once()
            except Exception:  # a parser bug must not end the slow lane
                log.exception("npu-smi sub-command refresh failed")

    def refresh_once(self) -> None:
        with self._lock:
            chips = self._chips
        path = self.binary()
        timeouts = 0
        for npu in sorted({n for n, _ in chips}):
            jobs = [(c, npu, None) for c in LIVE_COMMANDS if not c.endswith("-c")]
            jobs += [(c, npu, chip) for c in LIVE_COMMANDS if c.endswith("-c")
                     for n, chip in chips if n == npu]
            for command, n, chip in jobs:
                if self._stop.is_set():
                    return
                argv = argv_for(command, n, chip)
                if path is None:
                    error, text = "npu-smi not found", None
                elif timeouts >= MAX_TIMEOUTS_PER_ROUND:
                    error, text = "skipped: npu-smi timed out twice in this round", None
                else:
                    error, text = self._call(path, argv)
                    timeouts += error is not None and error.startswith("timed out")
                key = (command, n, chip)
                prev = self._outputs.get(key)
                if error is not None:  # keep the last good answer, say why it is not newer
                    text = prev.text if prev is not None else None
                self._outputs[key] = SubOutput(
                    command, text, n, chip, "npu-smi " + " ".join(argv), error
                )
            self._publish(chips)  # card by card: the first cards show before the round ends
        with self._lock:
            self.rounds += 1

    def _call(self, path: str, argv: list[str]) -> tuple[str | None, str | None]:
        try:
            rc, out = self.run([path, *argv], self.timeout_s)
        except subprocess.TimeoutExpired:
            return f"timed out after {self.timeout_s:g} s", None
        except OSError as exc:
            return f"cannot run npu-smi: {exc.strerror or exc}", None
        if rc != 0:
            last = next((ln.strip() for ln in reversed(out.splitlines()) if ln.strip()), "")
            return f"exit status {rc}" + (f": {last[:160]}" if last else ""), None
        return None, out

    def _publish(self, chips: tuple[tuple[int, int], ...]) -> None:
        wanted = {n for n, _ in chips}
        outputs = [o for (_c, n, _chip), o in self._outputs.items() if n in wanted]
        details, warnings = build_details(outputs, chips, updated_at=time.time())
        for w in warnings:
            log.debug("npu-smi details: %s", w)
        with self._lock:
            if chips == self._chips:
                self._details = details
