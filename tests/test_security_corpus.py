"""Every request of the fuzz corpus (tests/data/bad_requests.json, also mixed into the soak)
gets its 4xx with an OpenAI-shaped message from a real server, and the server still serves.
A real engine on the demo model behind a real uvicorn on loopback."""

from __future__ import annotations

import httpx
import pytest
from support.api import own_engine, running_server
from support.bad_requests import load_corpus, request_args

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def url(demo_model_dir):
    with own_engine(demo_model_dir, "demo") as eng, running_server(eng) as (_, base):
        yield base


def test_the_corpus_is_answered_with_4xx_and_a_message(url):
    corpus = load_corpus()
    assert len(corpus) >= 30
    with httpx.Client(base_url=url, timeout=60) as client:
        for entry in corpus:
            r = client.request(**request_args(entry))
            assert r.status_code in entry["expect"], (entry["name"], r.status_code, r.text[:300])
            assert r.json()["error"]["message"], entry["name"]
        ok = client.post("/v1/completions", json={"prompt": "Once", "max_tokens": 2})
        assert ok.status_code == 200
