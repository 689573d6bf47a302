"""Slow a LocalEngine's steps for tests that act on a generation while it runs (stop, cancel,
close): the test models decode hundreds of tokens in well under a second on the native decode
step, faster than a test can act, so each step is held for `delay_s` through the runner's
test hook (runner.fault_hook, called for every scheduled sequence)."""

from __future__ import annotations

import contextlib
import time


@contextlib.contextmanager
def slowed_steps(engine, delay_s: float = 0.01):
    runners = [v.runner for v in engine._variants.values()]
    for r in runners:
        r.fault_hook = lambda seq: time.sleep(delay_s)
    try:
        yield
    finally:
        for r in runners:
            r.fault_hook = None
