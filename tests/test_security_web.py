"""A web page in the user's browser must not drive a loopback server (issue 35): writes need a
JSON body whatever FastAPI does, cross-site Origin / Sec-Fetch-Site are refused, a request
without Host is refused, '*' CORS needs a key, and /v1/admin can have its own key.

A real engine on the demo model behind a real uvicorn on loopback. These tests also run against
the lowest FastAPI the project allows (docs/security.md says how)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from urllib.parse import urlparse

import httpx
import pytest
from npu_console.engine.api.settings import ApiSettings, UnsafeSettingsError
from support.api import own_engine, running_server

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def engine(demo_model_dir):
    with own_engine(demo_model_dir, "demo") as eng:
        yield eng


@pytest.fixture(scope="module")
def admin_server(engine, tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    with running_server(engine, allow_admin=True, model_roots=(str(root),),
                        cors_origins=("http://app.example",)) as (_, url):
        yield url


def completion(**kw) -> bytes:
    return json.dumps({"prompt": "Once upon a time", "max_tokens": 2, **kw}).encode()


def error_of(r, status, code):
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert err["code"] == code, err
    assert err["message"]
    return err


# ----------------------------------------------------------------------------- content type


@pytest.mark.parametrize("headers", [{}, {"Content-Type": "text/plain"},
                                     {"Content-Type": "application/x-www-form-urlencoded"},
                                     {"Content-Type": "multipart/form-data; boundary=x"}])
def test_writes_without_a_json_content_type_get_415_on_every_route(admin_server, headers):
    # what fetch(url, {method: "POST", mode: "no-cors", body}) sends: no preflight
    for path, raw in (("/v1/completions", completion()),
                      ("/v1/admin/quantize", json.dumps({"path": "x", "out_name": "y"}).encode()),
                      ("/v1/admin/unload", json.dumps({"name": "demo"}).encode())):
        r = httpx.post(admin_server + path, content=raw, headers=headers)
        err = error_of(r, 415, "unsupported_media_type")
        assert "application/json" in err["message"]
    r = httpx.request("DELETE", admin_server + "/v1/admin/jobs/nope", content=b"{}",
                      headers=headers)
    error_of(r, 415, "unsupported_media_type")
    # a DELETE without a body has nothing to declare (curl -X DELETE)
    error_of(httpx.delete(admin_server + "/v1/admin/jobs/nope"), 404, "job_not_found")
    # the same requests declared as JSON go through to the routes
    r = httpx.post(admin_server + "/v1/completions", content=completion(),
                   headers={"Content-Type": "application/json; charset=utf-8"})
    assert r.status_code == 200, r.text
    r = httpx.delete(admin_server + "/v1/admin/jobs/nope",
                     headers={"Content-Type": "application/json"})
    error_of(r, 404, "job_not_found")


# ----------------------------------------------------------------------------- cross-site


def test_a_cross_site_origin_is_refused_on_writes(admin_server):
    for origin in ("http://evil.example", "null", "http://localhost:1"):
        r = httpx.post(admin_server + "/v1/completions", content=completion(),
                       headers={"Content-Type": "application/json", "Origin": origin})
        err = error_of(r, 403, "cross_site_refused")
        assert "--cors" in err["message"]
    r = httpx.post(admin_server + "/v1/admin/unload", json={"name": "demo"},
                   headers={"Origin": "http://evil.example"})
    error_of(r, 403, "cross_site_refused")
    # reads are not writes: a page cannot read the answer without CORS anyway
    assert httpx.get(admin_server + "/v1/models",
                     headers={"Origin": "http://evil.example"}).status_code == 200


def test_sec_fetch_site_cross_site_is_refused_without_an_allowed_origin(admin_server):
    r = httpx.post(admin_server + "/v1/completions", content=completion(),
                   headers={"Content-Type": "application/json", "Sec-Fetch-Site": "cross-site"})
    error_of(r, 403, "cross_site_refused")
    for site in ("same-origin", "none"):
        r = httpx.post(admin_server + "/v1/completions", content=completion(),
                       headers={"Content-Type": "application/json", "Sec-Fetch-Site": site})
        assert r.status_code == 200, r.text


def test_the_servers_own_origin_and_the_cors_origins_may_write(admin_server):
    own = "http://" + urlparse(admin_server).netloc
    for origin, site in ((own, "same-origin"), ("http://app.example", "cross-site")):
        r = httpx.post(admin_server + "/v1/completions", content=completion(),
                       headers={"Content-Type": "application/json", "Origin": origin,
                                "Sec-Fetch-Site": site})
        assert r.status_code == 200, (origin, r.text)


# ----------------------------------------------------------------------------- Host


def test_a_request_without_a_host_header_is_refused(admin_server):
    port = urlparse(admin_server).port
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        # HTTP/1.0 lets a client leave Host out; h11 insists on it only for 1.1
        s.sendall(b"GET /v1/models HTTP/1.0\r\n\r\n")
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    head, _, payload = data.partition(b"\r\n\r\n")
    assert head.split(b" ", 2)[1] == b"400", head
    assert json.loads(payload)["error"]["code"] == "invalid_host"


# ----------------------------------------------------------------------------- keys


def test_a_wildcard_cors_origin_needs_an_api_key():
    with pytest.raises(UnsafeSettingsError, match="--api-key"):
        ApiSettings(cors_origins=("*",)).check_safe()
    ApiSettings(cors_origins=("*",), api_key="k").check_safe()
    r = subprocess.run([sys.executable, "-m", "npu_console.cli.main", "serve",
                        "--model", "nowhere", "--cors", "*"], capture_output=True, text=True,
                       timeout=120, env={"PATH": "/usr/bin:/bin", "HOME": "/tmp"}, check=False)
    assert r.returncode != 0
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "--cors '*'" in lines[0] and "--api-key" in lines[0], r.stderr


def test_the_admin_key_opens_admin_and_the_api_key_opens_inference(engine, tmp_path):
    with running_server(engine, api_key="infer", admin_key="admin", allow_admin=True,
                        model_roots=(str(tmp_path),)) as (_, url):
        def get(path, key):
            return httpx.get(url + path, headers={"Authorization": f"Bearer {key}"})

        assert get("/v1/models", "infer").status_code == 200
        assert get("/v1/models", "admin").status_code == 401
        assert get("/v1/admin/jobs", "admin").status_code == 200
        r = get("/v1/admin/jobs", "infer")
        assert r.status_code == 401 and "admin key" in r.json()["error"]["message"]
    # an admin key alone: inference stays open on loopback, admin is keyed
    with running_server(engine, admin_key="admin", allow_admin=True,
                        model_roots=(str(tmp_path),)) as (_, url):
        assert httpx.get(url + "/v1/models").status_code == 200
        assert httpx.get(url + "/v1/admin/jobs").status_code == 401
    # without one, admin takes the API key as before
    with running_server(engine, api_key="infer", allow_admin=True,
                        model_roots=(str(tmp_path),)) as (_, url):
        assert httpx.get(url + "/v1/admin/jobs",
                         headers={"Authorization": "Bearer infer"}).status_code == 200


def test_serve_help_says_which_key_opens_what():
    r = subprocess.run([sys.executable, "-m", "npu_console.cli.main", "serve", "--help"],
                       capture_output=True, text=True, timeout=120, check=False)
    text = " ".join(r.stdout.split())
    assert "--admin-key" in text
    assert "/v1/admin unless --admin-key" in text
    assert "the --api-key then opens only inference" in text
