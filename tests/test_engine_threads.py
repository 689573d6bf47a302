"""Threads and OpenMP teams: torch work on a fresh thread leaves no team behind, and an idle
engine ends its thread (and team) and starts a new one for the next request."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from npu_console.engine.runtime import EngineConfig, LocalEngine
from npu_console.engine.runtime.threads import run_in_fresh_thread
from npu_console.engine.runtime.types import GenerationRequest, SamplingParams
from support.api import own_engine

ROOT = Path(__file__).resolve().parents[1]


def test_run_in_fresh_thread_returns_and_raises_on_another_thread():
    caller = threading.get_ident()
    assert run_in_fresh_thread(lambda a, b=0: (a + b, threading.get_ident()), 2, b=3)[0] == 5
    assert run_in_fresh_thread(threading.get_ident) != caller
    with pytest.raises(KeyError, match="missing"):
        run_in_fresh_thread(lambda: {}["missing"])


def test_a_fresh_thread_takes_its_openmp_team_with_it():
    """The premise of run_in_fresh_thread: a parallel torch op on the calling thread leaves a
    worker thread behind for good, the same op on a fresh thread leaves nothing."""
    script = textwrap.dedent("""
        import os, sys, time
        sys.path.insert(0, sys.argv[1])
        import torch
        from npu_console.engine.runtime.threads import run_in_fresh_thread
        torch.set_num_threads(2)
        tasks = lambda: len(os.listdir("/proc/self/task"))
        def work():
            a = torch.randn(600, 600)
            return float((a @ a).sum())
        before = tasks()
        run_in_fresh_thread(work)
        time.sleep(0.2)
        fresh = tasks()
        work()
        print(before, fresh, tasks())
    """)
    out = subprocess.run([sys.executable, "-c", script, str(ROOT)], capture_output=True, check=False,
                         text=True, timeout=120, env=os.environ | {"OMP_NUM_THREADS": "2"})
    assert out.returncode == 0, out.stderr
    before, fresh, after = map(int, out.stdout.split())
    assert fresh == before
    assert after > before  # the main thread now owns a team that lives as long as it does


def _greedy(n=12):
    return SamplingParams(max_tokens=n, temperature=0.0, ignore_eos=True)


def test_an_idle_engine_ends_its_thread_and_the_next_request_starts_one(stories_dir):
    from npu_console.engine.models import load_model

    loaded = load_model(stories_dir, device="cpu", dtype="float32", name="stories")
    with own_engine(loaded, timeout=60, idle_thread_s=0.2) as eng:
        req = GenerationRequest(prompt="Once upon a time", params=_greedy())
        first = eng.generate(req, timeout=60)
        worker = eng._thread
        worker.join(10)
        assert not worker.is_alive(), "the idle engine kept its thread"
        assert eng._thread is None
        assert eng.stats().state == "ready"
        again = eng.generate(GenerationRequest(prompt="Once upon a time", params=_greedy()),
                             timeout=60)
        assert again.token_ids == first.token_ids
        assert eng.stats().running == 0
    assert eng._thread is not None and not eng._thread.is_alive()
    assert eng.stats().state == "stopped"


def test_shutdown_of_an_idle_engine_fails_queued_work_cleanly(stories_dir):
    eng = LocalEngine(EngineConfig(num_threads=1, idle_thread_s=0.1))
    time.sleep(0.5)  # retired before any model
    assert eng._thread is None
    eng.shutdown()
    with pytest.raises(Exception, match="shut down"):
        eng.submit(GenerationRequest(prompt="x", params=_greedy()))
