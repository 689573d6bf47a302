"""An engine that fails loudly: a dead loop refuses new work at once and can be restarted, a
failing command fails only its request, and the queue limit can change while requests wait.
Real engines on the shipped demo model; faults go in through fakes.faults."""

from __future__ import annotations

import threading
import time

import pytest
from fakes.faults import failing_release, failing_submit_command, fatal_fault
from fakes.slow_steps import slowed_steps
from npu_console.engine.runtime.types import (
    EngineStoppedError,
    GenerationRequest,
    InvalidRequestError,
    QueueFullError,
    SamplingParams,
)
from support.api import own_engine


def greedy(n=8):
    return SamplingParams(max_tokens=n, temperature=0.0, ignore_eos=True)


def demo_engine(demo_model_dir, **config):
    return own_engine(demo_model_dir, "demo", timeout=120, **config)


@pytest.fixture
def engine(demo_model_dir):
    with demo_engine(demo_model_dir) as eng:
        yield eng


def test_a_dead_loop_fails_its_requests_and_refuses_new_ones_at_once(engine, demo_model_dir):
    healthy = engine.generate(GenerationRequest(prompt="Once", params=greedy()), timeout=60)
    with fatal_fault(engine):
        doomed = engine.submit(GenerationRequest(prompt="Once", params=greedy()))
        fin = doomed.result(30).finish
    assert fin.finish_reason == "error" and "engine loop crashed" in fin.error
    assert "EngineKilled" in fin.error
    stats = engine.stats()
    assert stats.state == "error" and "the engine thread was killed" in stats.last_error
    assert engine.crash_reason == stats.last_error
    t0 = time.monotonic()
    with pytest.raises(EngineStoppedError, match="engine loop crashed") as err:
        engine.submit(GenerationRequest(prompt="Once", params=greedy()))
    assert time.monotonic() - t0 < 5.0  # at once (a generous bound on a shared machine)
    assert err.value.http_status == 503 and "restart" in err.value.message
    with pytest.raises(EngineStoppedError):
        engine.load(demo_model_dir, name="again")
    # restart: the same weights on a fresh runner and loop, the same answers as before
    engine.restart()
    assert engine.crash_reason is None and engine.stats().state == "ready"
    again = engine.generate(GenerationRequest(prompt="Once", params=greedy()), timeout=60)
    assert again.token_ids == healthy.token_ids


def test_requests_waiting_behind_a_crash_end_with_its_reason(demo_model_dir):
    all_submitted = threading.Event()

    def crash_once_all_wait(seq):
        # the engine thread holds its step until every request is in, so the crash always
        # finds five waiting behind it (on a busy machine the loop once crashed first)
        all_submitted.wait(30)
        return len(seq.output_ids) >= 2

    with demo_engine(demo_model_dir, max_running=1) as eng:
        with fatal_fault(eng, when=crash_once_all_wait):
            handles = [eng.submit(GenerationRequest(prompt=f"Once {i}", params=greedy(32)))
                       for i in range(6)]
            all_submitted.set()
            finishes = [h.result(30).finish for h in handles]
        assert all(f.finish_reason == "error" and "engine loop crashed" in f.error
                   for f in finishes)
        assert eng.stats().waiting == 0


def test_a_runner_whose_cleanup_fails_still_ends_every_request(engine):
    with failing_release(engine, when=lambda seq: seq.request_id == "leaky"):
        leaky = engine.submit(GenerationRequest(prompt="Once", params=greedy(),
                                                request_id="leaky"))
        fin = leaky.result(30).finish
    # the finish reached the caller before the runner's cleanup failed; the step's failure
    # was contained and the loop serves on
    assert fin.finish_reason == "length"
    assert engine.crash_reason is None
    assert engine.generate(GenerationRequest(prompt="Once", params=greedy()),
                           timeout=60).finish.finish_reason == "length"


def test_a_failing_command_fails_that_request_and_the_loop_lives(engine):
    with failing_submit_command(engine, when=lambda seq: seq.request_id == "bad"):
        good = [engine.submit(GenerationRequest(prompt=f"Once {i}", params=greedy()))
                for i in range(3)]
        bad = engine.submit(GenerationRequest(prompt="Once", params=greedy(),
                                              request_id="bad"))
        fin = bad.result(30).finish
        assert fin.finish_reason == "error" and "submit failed" in fin.error
        assert "refused the request" in fin.error
        assert all(h.result(60).finish.finish_reason == "length" for h in good)
    stats = engine.stats()
    assert stats.state == "ready" and engine.crash_reason is None and stats.waiting == 0
    assert engine.generate(GenerationRequest(prompt="Once", params=greedy()),
                           timeout=60).finish.finish_reason == "length"


def test_the_queue_limit_changes_while_requests_wait(demo_model_dir):
    with demo_engine(demo_model_dir, max_running=2, max_waiting=4) as eng:
        with slowed_steps(eng, 0.005):
            first, refused = [], 0
            try:
                while True:  # fill the queue until the limit bites
                    first.append(eng.submit(GenerationRequest(prompt="Once", params=greedy(16))))
            except QueueFullError as exc:
                refused += 1
                assert "4 waiting" in exc.message
            eng.set_max_waiting(1000)
            more = [eng.submit(GenerationRequest(prompt="Once", params=greedy(16)))
                    for _ in range(40)]
            eng.set_max_waiting(1)  # lowered below what waits: those stay, new ones wait
            with pytest.raises(QueueFullError):
                eng.submit(GenerationRequest(prompt="Once", params=greedy(16)))
            results = [h.result(120).finish.finish_reason for h in first + more]
        assert refused == 1 and len(first) >= 4 and set(results) == {"length"}
        assert eng.stats().state == "ready" and eng.stats().max_waiting == 1
        with pytest.raises(InvalidRequestError):
            eng.set_max_waiting(0)


def test_limit_changes_from_another_thread_never_break_the_loop(demo_model_dir):
    stop = threading.Event()
    with demo_engine(demo_model_dir, max_running=4, max_waiting=8) as eng:
        def flip():
            n = 0
            while not stop.is_set():
                eng.set_max_waiting(1 + n % 50)
                n += 1
                time.sleep(0.0005)
        flipper = threading.Thread(target=flip)
        flipper.start()
        handles, refused = [], 0
        try:
            for _ in range(200):
                try:
                    handles.append(eng.submit(GenerationRequest(prompt="Once", params=greedy(4))))
                except QueueFullError:
                    refused += 1
            reasons = {h.result(120).finish.finish_reason for h in handles}
        finally:
            stop.set()
            flipper.join()
        assert handles and reasons == {"length"}
        assert eng.crash_reason is None and eng.stats().waiting == 0
