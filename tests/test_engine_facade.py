"""LocalEngine as a thin facade (engine/runtime/engine.py): checks and tokenizing on the
caller's thread, nothing queued for a refused request, one load path with progress and
cancel, and one cancellation exception across the engine."""

from __future__ import annotations

import pytest
from npu_console.engine.runtime.types import (
    Cancelled,
    EngineError,
    GenerationRequest,
    InvalidRequestError,
    SamplingParams,
)
from support.api import own_engine


def test_one_cancellation_exception():
    from npu_console.engine.models import LoadCancelled
    from npu_console.engine.quant.calib import Cancelled as QuantCancelled

    assert LoadCancelled is Cancelled and QuantCancelled is Cancelled
    assert issubclass(Cancelled, EngineError) and str(Cancelled()) == "cancelled"


@pytest.fixture(scope="module")
def eng(stories_dir):
    import torch

    n = torch.get_num_threads()
    with own_engine(None) as e:  # loaded here: the load's progress is checked
        progress = []
        job = e.load(stories_dir, name="stories")
        job.add_progress_callback(lambda f, m: progress.append(f))
        job.result(60)
        assert progress[-1] == 1.0 and progress == sorted(progress)
        yield e
    torch.set_num_threads(n)


def test_refused_requests_never_reach_the_core(eng):
    bad = GenerationRequest(prompt="Hi", params=SamplingParams(temperature=-1))
    with pytest.raises(InvalidRequestError):
        eng.validate(bad)
    with pytest.raises(InvalidRequestError):
        eng.submit(bad)
    assert eng.stats().waiting == 0 and not eng._core.inbox


def test_encode_is_what_submit_sends(eng):
    req = GenerationRequest(prompt="Once upon a time",
                            params=SamplingParams(max_tokens=2, temperature=0.0))
    ids = eng.encode(req)
    done = eng.generate(req, timeout=30)
    assert done.finish.usage.prompt_tokens == len(ids)
    eng.cancel("no-such-request")  # a no-op


def test_a_cancelled_load_raises_the_one_exception(eng, stories_dir):
    job = eng.load(stories_dir, name="cancelled")
    job.add_progress_callback(lambda f, m: job.cancel())
    with pytest.raises(Cancelled, match="cancel"):
        job.result(60)
    assert "cancelled" not in eng.stats().models
