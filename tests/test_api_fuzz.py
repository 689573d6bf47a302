"""Property-based run: schemathesis generates requests (valid and invalid) from the app's own
OpenAPI schema and hypothesis drives them against the real server; no answer may be a 5xx.

(schemathesis' pytest plugin does not work with this pytest, so the strategies are driven by
hypothesis' @given directly.)
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from support.api import engine_for, running_server

schemathesis = pytest.importorskip("schemathesis")

pytestmark = pytest.mark.slow

EXAMPLES = 12  # per operation and mode


@pytest.fixture(scope="module")
def api_schema(stories_dir):
    # a short context keeps every generated request cheap: a large max_tokens is then a 400
    engine = engine_for(stories_dir, max_model_len=48, max_running=8)
    with running_server(engine, max_n=4) as (_, url):
        yield schemathesis.openapi.from_url(url + "/openapi.json")


def _operations(schema):
    return [result.ok() for result in schema.get_all_operations()]


@pytest.mark.parametrize("mode", ["positive", "negative"])
def test_no_input_makes_the_server_fail(api_schema, mode):
    operations = _operations(api_schema)
    paths = {op.path for op in operations}
    assert {"/v1/chat/completions", "/v1/completions", "/chat", "/health"} <= paths
    calls = []
    for op in operations:
        if mode == "negative" and op.method.upper() == "GET":
            continue  # nothing to make invalid: no body, and any string is a valid model id
        strategy = op.as_strategy(generation_mode=schemathesis.GenerationMode(mode))

        @given(case=strategy)
        @settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                  suppress_health_check=list(HealthCheck))
        def check(case):
            response = case.call(timeout=60)
            calls.append(response.status_code)
            assert response.status_code < 500, (case.method, case.path, case.body,
                                                response.text[:500])
            if response.status_code >= 400 and response.text.startswith("{"):
                body = response.json()
                if "error" in body:  # /health's 503 is a status, not an error
                    assert body["error"]["message"] and "Traceback" not in response.text

        check()
    assert len(calls) >= len(operations)
