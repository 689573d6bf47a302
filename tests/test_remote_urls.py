"""One normalize_base_url for every OpenAI client here (RemoteEngine, bench serve): the stricter
of the two it replaced, which refuses a URL without an http(s) scheme instead of passing it on."""

from __future__ import annotations

import pytest
from npu_console.engine.remote.urls import normalize_base_url


@pytest.mark.parametrize(("url", "want"), [
    ("http://127.0.0.1:8000", "http://127.0.0.1:8000"),
    (" https://host/v1/ ", "https://host"),
    ("http://host:8000/v1", "http://host:8000"),
    ("http://host/api/v1//", "http://host/api"),
])
def test_normalized(url, want):
    assert normalize_base_url(url) == want


@pytest.mark.parametrize("url", ["localhost:8000", "ftp://host", "//host/v1", "", "host/v1"])
def test_a_url_without_an_http_scheme_is_refused(url):
    with pytest.raises(ValueError, match="http:// or https://"):
        normalize_base_url(url)


def test_the_benchmark_and_the_remote_engine_use_the_same_one():
    from npu_console.engine.bench import serving
    from npu_console.engine.remote import client

    assert serving.normalize_base_url is client.normalize_base_url is normalize_base_url
