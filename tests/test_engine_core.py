"""EngineCore (engine/runtime/core.py) driven directly, without the LocalEngine facade: commands
through its inbox, schedule -> execute -> update steps on its thread, queue limit, cancel,
shutdown. On the real stories260K model."""

from __future__ import annotations

import pytest
from npu_console.engine.runtime import EngineConfig
from npu_console.engine.runtime.core import EngineCore
from npu_console.engine.runtime.handle import Job, LocalRequestHandle
from npu_console.engine.runtime.metrics import EngineMetrics
from npu_console.engine.runtime.output import output_for
from npu_console.engine.runtime.sequence import Sequence
from npu_console.engine.runtime.types import (
    EngineStoppedError,
    GenerationRequest,
    InvalidRequestError,
    QueueFullError,
    SamplingParams,
)
from npu_console.engine.runtime.variant import build_variant


@pytest.fixture(scope="module")
def stories(stories_dir):
    from npu_console.engine.models import load_model

    return load_model(stories_dir, device="cpu", dtype="float32", name="stories")


@pytest.fixture
def core(stories):
    import torch

    n = torch.get_num_threads()
    config = EngineConfig(num_threads=1, max_waiting=4)
    c = EngineCore(config, EngineMetrics(256))
    variant = build_variant(stories, "stories", config)
    job = Job("add")
    with c.lock:
        c.post(("add", variant, job, True, False))
    job.result(30)
    yield c
    c.shutdown(5)
    torch.set_num_threads(n)


def _request(core, rid, n=8):
    variant = core.variants["stories"]
    req = GenerationRequest(prompt="Once upon a time", request_id=rid,
                            params=SamplingParams(max_tokens=n, temperature=0.0, ignore_eos=True))
    ids = variant.encoder.encode(req)
    seq = Sequence(request_id=rid, prompt_ids=ids, params=req.params)
    seq.extra["out"] = output_for(variant, req, ids, req.params)
    handle = LocalRequestHandle(rid, "stories", core.abort_request)
    return seq, variant, handle


def test_a_request_runs_to_its_length_and_steps_are_reported(core):
    steps = []
    core.listeners = [steps.append]
    seq, variant, handle = _request(core, "r1", n=6)
    core.add_request(seq, variant, handle)
    done = handle.result(30)
    assert done.finish.finish_reason == "length" and len(done.token_ids) == 6
    assert done.text and core.num_waiting == 0
    assert sum(s.decode_tokens + (s.prefill_tokens > 0) for s in steps) >= 6
    assert any(f.request_id == "r1" for s in steps for f in s.finished)


def test_queue_limit_and_duplicate_ids_are_refused_before_the_inbox(core):
    seq, variant, handle = _request(core, "dup", n=400)
    core.add_request(seq, variant, handle)
    with pytest.raises(InvalidRequestError):
        core.add_request(*_request(core, "dup"))
    with core.lock:
        core.num_waiting = core.config.max_waiting  # as if the queue were full
    try:
        with pytest.raises(QueueFullError):
            core.add_request(*_request(core, "more"))
    finally:
        with core.lock:
            core.num_waiting = 0
    core.abort_request("dup")
    assert handle.result(30).finish.finish_reason == "cancelled"
    assert "dup" not in core.outputs.handles


def test_shutdown_ends_open_requests_and_refuses_new_work(core):
    seq, variant, handle = _request(core, "long", n=400)
    core.add_request(seq, variant, handle)
    core.shutdown(10)
    assert handle.result(5).finish.finish_reason == "cancelled"
    assert core.stopped
    with pytest.raises(EngineStoppedError):
        core.add_request(*_request(core, "late"))


def test_a_callback_added_while_events_arrive_gets_each_once_in_order():
    """The console's bridge adds its callback on a submit thread while the engine thread may
    already be pushing: the events made before it and after it arrive once each, in order."""
    import threading
    import time

    from npu_console.engine.runtime.types import TokenEvent

    for _ in range(5):
        handle = LocalRequestHandle("r", "m", lambda rid: None)
        got: list[int] = []
        started = threading.Event()

        def produce(h=handle, s=started):
            for i in range(200):
                h._push([TokenEvent("r", str(i), (i,))])
                if i == 10:
                    s.set()
                time.sleep(0.0002)

        def take(events, g=got):
            if len(events) > 1:  # the events made before: a slow first delivery
                time.sleep(0.005)
            g.extend(e.token_ids[0] for e in events)

        t = threading.Thread(target=produce)
        t.start()
        started.wait(5)
        handle.add_callback(take)
        t.join(10)
        assert got == list(range(200))


def test_a_progress_callback_never_hears_an_older_fraction_after_a_newer_one():
    """Job.add_progress_callback replays the progress so far: a report the worker makes while
    that replay is under way must reach the callback after it, not before (the console's load
    bar once went 19 % -> 2 %). The replay below lets the worker report from inside it and
    waits up to 0.5 s for that report to arrive first."""
    import threading

    job = Job("load")
    job._report(0.1, "reading")
    heard: list[float] = []
    arrived = threading.Event()
    worker: list[threading.Thread] = []

    def fn(fraction: float, _message: str) -> None:
        if not worker:  # the replay: the worker reports meanwhile
            worker.append(threading.Thread(target=job._report, args=(0.5, "converting")))
            worker[0].start()
            arrived.wait(0.5)
        else:
            arrived.set()
        heard.append(fraction)

    job.add_progress_callback(fn)
    worker[0].join(5)
    assert heard == [0.1, 0.5]
