"""The engine's output side (engine/runtime/output.py) on its own: tokens -> TokenEvents pushed
to the caller's handle, endings -> one FinishEvent with usage and timings, metrics recorded.
Pure Python: no model, no engine thread."""

from __future__ import annotations

import threading
import time

import pytest
from npu_console.engine.runtime.handle import LocalRequestHandle
from npu_console.engine.runtime.metrics import EngineMetrics
from npu_console.engine.runtime.output import RequestOutputs, TokenOutput, finish_event
from npu_console.engine.runtime.sequence import Sequence
from npu_console.engine.runtime.types import FinishEvent, TokenEvent


class _Processor:
    """Stands in for OutputProcessor: token 7 ends the request with "stop"."""

    def step(self, tok, num_output, now):
        return TokenOutput(text=f"<{tok}>", finish="stop" if tok == 7 else None,
                           stop_reason=7 if tok == 7 else None)

    def annotate(self, fin, arrival_mono):
        return fin


def _open(outputs: RequestOutputs, rid: str) -> tuple[Sequence, LocalRequestHandle]:
    seq = Sequence(request_id=rid, prompt_ids=[1, 2, 3])
    seq.extra["out"] = _Processor()
    handle = LocalRequestHandle(rid, "m", lambda _rid: None)
    outputs.handles[rid] = handle
    return seq, handle


def test_tokens_stream_then_one_finish_with_usage_and_timings():
    metrics = EngineMetrics(64)
    outputs = RequestOutputs(threading.Condition(), metrics)
    seq, handle = _open(outputs, "a")
    assert outputs.token(seq, 5) == (None, [])  # pushed at once
    time.sleep(0.01)
    finish, events = outputs.token(seq, 7)
    assert finish == "stop" and [e.text for e in events] == ["<7>"]
    assert seq.stop_reason == 7
    fin = outputs.finish(seq, "m", finish, pre_events=events)
    got = handle.drain()
    assert [type(e) for e in got] == [TokenEvent, TokenEvent, FinishEvent]
    assert got[-1] is fin and fin.finish_reason == "stop" and fin.stop_reason == 7
    assert fin.usage.prompt_tokens == 3 and fin.usage.completion_tokens == 2
    assert fin.timings.ttft_s is not None and fin.timings.tpot_s >= 0.009
    assert "a" not in outputs.handles
    assert outputs.take_finished() == [fin] and outputs.take_finished() == []
    assert metrics.requests_finished == 1 and metrics.requests_failed == 0


def test_unscheduled_and_abandoned_requests_end_as_failures():
    metrics = EngineMetrics(64)
    outputs = RequestOutputs(threading.Condition(), metrics)
    seq, h1 = _open(outputs, "a")
    _seq2, h2 = _open(outputs, "b")
    outputs.finish_unscheduled(seq, "m", "error", "model 'm' was unloaded")
    assert h1.result(1).finish.error == "model 'm' was unloaded"
    outputs.abandon_all("cancelled", "the engine shut down")
    assert h2.result(1).finish.finish_reason == "cancelled"
    assert outputs.handles == {} and metrics.requests_failed == 2


def test_finish_event_without_tokens_has_no_ttft():
    seq = Sequence(request_id="x", prompt_ids=[1])
    fin = finish_event(seq, "m", "cancelled", None)
    assert fin.timings.ttft_s is None and fin.timings.e2e_s >= 0
    assert fin.usage.completion_tokens == 0


def test_a_stream_waiting_for_its_tick_wakes_when_the_request_finishes():
    """wait_finish (what a stream on the 20 ms grid sleeps with): a finish pushed from the
    engine thread ends the wait at once, so the last chunk and the usage never wait for the
    next tick; without a finish it is a plain sleep; after a finish it does not wait at all."""
    import asyncio

    handle = LocalRequestHandle("w", "m", lambda _rid: None)

    async def scenario():
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        await handle.wait_finish(0.05)  # nothing happens: sleeps its time
        slept = loop.time() - t0
        threading.Timer(0.05, lambda: handle._abandon("error", "engine stopped")).start()
        await asyncio.wait_for(handle.wait_finish(60.0), 30.0)  # woken, not timed out
        await asyncio.wait_for(handle.wait_finish(60.0), 1.0)  # already finished
        return slept

    assert asyncio.run(scenario()) >= 0.04
    assert handle.done and not handle._finish_waiters


def test_result_waits_for_the_finish_and_no_token_wakes_it():
    """A thread blocked in result() returns with the whole completion once the finish arrives
    (not before, and TimeoutError without one); meanwhile it does not wait on the condition
    that every token push notifies, so a step's tokens wake nobody."""
    metrics = EngineMetrics(64)
    outputs = RequestOutputs(threading.Condition(), metrics)
    seq, handle = _open(outputs, "r")
    got: list = []
    waiter = threading.Thread(target=lambda: got.append(handle.result(timeout=30)))
    waiter.start()
    for tok in (4, 5, 6):
        time.sleep(0.05)  # the waiter is blocked (again) by now
        # CPython's Condition lists its blocked waiters in _waiters: none, so no token wakes
        # the thread (before, each one did, once a step, to find the request unfinished)
        assert not handle._cond._waiters
        outputs.token(seq, tok)
    time.sleep(0.05)
    assert waiter.is_alive() and not got
    finish, events = outputs.token(seq, 7)
    outputs.finish(seq, "m", finish, pre_events=events)
    waiter.join(10)
    assert not waiter.is_alive()
    (completion,) = got
    assert completion.text == "<4><5><6><7>" and completion.token_ids == (4, 5, 6, 7)
    assert completion.finish.finish_reason == "stop"

    _, other = _open(outputs, "t")
    t0 = time.monotonic()
    with pytest.raises(TimeoutError, match="did not finish"):
        other.result(timeout=0.05)
    assert time.monotonic() - t0 >= 0.04
