"""Slow a LocalEngine's steps for tests that act on a generation while it runs (stop, cancel,
close): the test models decode hundreds of tokens in well under a second on the native decode
step, faster than a test can act, so each step is held for `delay_s` (fakes.faults wraps the
real runner, calling the delay for every scheduled sequence)."""

from __future__ import annotations

import contextlib
import time

from fakes.faults import before_each_sequence


@contextlib.contextmanager
def slowed_steps(engine, delay_s: float = 0.01):
    with before_each_sequence(engine, lambda seq: time.sleep(delay_s)):
        yield
