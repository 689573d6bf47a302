"""/v1/admin on a real `npu-console serve --allow-admin` (loopback, API key): listing the roots,
loading with progress then answering, unloading, quantizing into the output root and loading
the result, cancelling a quantization (nothing left on disk), and every refusal: admin off,
no key, and paths outside the roots (.., absolute, a link leading out, a separator in
out_name). Driven with httpx and with the Qt-free client engine.remote.admin, as the GUI will."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import httpx
import pytest
from npu_console.engine.remote.admin import AdminError, RemoteAdmin
from npu_console.engine.remote.errors import RemoteAuthError
from support.api import STORY_PROMPT, engine_for, running_server
from support.cli import run_cli
from support.serve import Serve

pytestmark = pytest.mark.slow

KEY = "adm1n-key"
AUTH = {"Authorization": f"Bearer {KEY}"}


@pytest.fixture(scope="module")
def roots(tmp_path_factory, demo_model_dir, stories_dir):
    """zoo/ (a copy of the demo model, a link leading outside, a folder that is no model),
    the shared models folder as a second root, and out/ for quantize outputs."""
    base = tmp_path_factory.mktemp("admin")
    zoo = base / "zoo"
    shutil.copytree(demo_model_dir, zoo / "demo")
    (zoo / "escape").symlink_to(demo_model_dir.parent / "demo-think", target_is_directory=True)
    (zoo / "notes").mkdir()
    (zoo / "notes" / "readme.txt").write_text("not a model")
    outside = base / "outside"
    outside.mkdir()
    return {"base": base, "zoo": zoo, "shared": stories_dir.parent, "out": base / "out",
            "outside": outside}


@pytest.fixture(scope="module")
def server(roots):
    srv = Serve("--model", str(roots["zoo"] / "demo"), "--name", "base", "--api-key", KEY,
                "--allow-admin", "--model-root", str(roots["zoo"]), "--model-root",
                str(roots["shared"]), "--output-root", str(roots["out"]),
                "--telemetry-source", "off", "--grace", "5")
    yield srv
    assert srv.stop() == 0, "".join(srv.lines)[-2000:]


@pytest.fixture
def admin(server):
    with RemoteAdmin(server.url, KEY, timeout=120) as client:
        yield client


@pytest.fixture
def http(server):
    with httpx.Client(base_url=server.url, headers=AUTH, timeout=120) as client:
        yield client


def _follow(admin: RemoteAdmin, job_id: str) -> list:
    states = list(admin.events(job_id, timeout=300))
    assert states and states[-1].done, states
    fractions = [s.fraction for s in states]
    assert fractions == sorted(fractions), fractions  # the bar never goes back
    return states


def _complete(http: httpx.Client, model: str) -> httpx.Response:
    return http.post("/v1/completions", json={"model": model, "prompt": STORY_PROMPT,
                                              "max_tokens": 4, "temperature": 0})


# ---------------------------------------------------------------------------------- refusals
def test_admin_routes_are_403_without_allow_admin_and_not_in_the_schema(stories_dir):
    with running_server(engine_for(stories_dir)) as (_, url), \
            httpx.Client(base_url=url, timeout=60) as client:
        for method, route, body in (("GET", "/v1/admin/models", None),
                                    ("POST", "/v1/admin/load", {"path": "x/y"}),
                                    ("POST", "/v1/admin/quantize", {"path": "x", "out_name": "y"}),
                                    ("GET", "/v1/admin/jobs", None),
                                    ("DELETE", "/v1/admin/jobs/job-1", None)):
            reply = client.request(method, route, json=body)
            assert reply.status_code == 403, (route, reply.text)
            err = reply.json()["error"]
            assert err["code"] == "admin_disabled" and "--allow-admin" in err["message"]
        paths = client.get("/openapi.json").json()["paths"]
        assert not [p for p in paths if p.startswith("/v1/admin")]
        with RemoteAdmin(url) as admin:
            assert admin.allowed() is False
            with pytest.raises(AdminError) as off:
                admin.models()
            assert off.value.status == 403 and off.value.code == "admin_disabled"


def test_admin_routes_need_the_key(server):
    with httpx.Client(base_url=server.url, timeout=60) as client:
        for headers in ({}, {"Authorization": "Bearer wrong"}):
            reply = client.get("/v1/admin/models", headers=headers)
            assert reply.status_code == 401
            reply = client.post("/v1/admin/load", headers=headers,
                                json={"path": "models/stories260K", "name": "sneaky"})
            assert reply.status_code == 401
        jobs = client.get("/v1/admin/jobs", headers=AUTH).json()["data"]
        assert not [j for j in jobs if j["params"].get("name") == "sneaky"]
    with RemoteAdmin(server.url, "wrong") as bad, pytest.raises(RemoteAuthError):
        bad.models()


@pytest.mark.parametrize("path", [
    "../zoo/demo", "zoo/../../outside", "zoo/demo/../../..", "/etc", "ABSOLUTE_DEMO",
    "zoo/escape", "~/models", "zoo\\..\\demo",
])
def test_paths_outside_the_roots_are_403(http, roots, path):
    if path == "ABSOLUTE_DEMO":  # absolute even when it lies inside a root
        path = str(roots["zoo"] / "demo")
    before = len(http.get("/v1/admin/jobs").json()["data"])
    for route, body in (("/v1/admin/load", {"path": path, "name": "x"}),
                        ("/v1/admin/quantize", {"path": path, "out_name": "x"})):
        reply = http.post(route, json=body)
        assert reply.status_code == 403, (route, path, reply.text)
        assert reply.json()["error"]["code"] == "path_outside_roots"
    assert len(http.get("/v1/admin/jobs").json()["data"]) == before  # no job was started
    assert "x" not in [m["id"] for m in http.get("/v1/models").json()["data"]]


@pytest.mark.parametrize("out_name", ["../evil", "a/b", "/tmp/evil", ".hidden", ".."])
def test_out_name_is_one_plain_folder_name(http, roots, out_name):
    reply = http.post("/v1/admin/quantize", json={"path": "models/stories260K",
                                                  "out_name": out_name})
    assert reply.status_code == 403, reply.text
    assert "single folder name" in reply.json()["error"]["message"]
    assert not (roots["base"] / "evil").exists() and not (roots["out"] / "a").exists()


def test_calibration_text_outside_the_roots_is_403(http, roots):
    secret = roots["outside"] / "secret.txt"
    secret.write_text("private text " * 50)
    reply = http.post("/v1/admin/quantize", json={
        "path": "models/stories260K", "out_name": "never", "calib_path": str(secret)})
    assert reply.status_code == 403
    assert not (roots["out"] / "never").exists()


def test_unknown_root_model_job_and_a_non_json_body(http):
    assert http.post("/v1/admin/load", json={"path": "nowhere/demo"}).status_code == 404
    assert http.post("/v1/admin/load", json={"path": "zoo/missing"}).status_code == 404
    assert http.get("/v1/admin/jobs/job-nope").json()["error"]["code"] == "job_not_found"
    assert http.delete("/v1/admin/jobs/job-nope").status_code == 404
    assert http.post("/v1/admin/unload", json={"name": "not-loaded"}).status_code == 404
    # what a cross-site form can send: refused before anything starts
    reply = http.post("/v1/admin/load", content=json.dumps({"path": "zoo/demo"}),
                      headers={"content-type": "text/plain"})
    assert reply.status_code == 415  # not declared JSON (cross_site.py)
    reply = http.post("/v1/admin/load", json={"path": "zoo/demo", "typo": 1})
    assert reply.status_code == 400 and "typo" in reply.json()["error"]["message"]


# ---------------------------------------------------------------------------------- listing
def test_listing_shows_the_models_with_relative_paths_only(http, admin, roots):
    reply = http.get("/v1/admin/models")
    assert reply.status_code == 200
    for folder in (roots["zoo"], roots["shared"], roots["out"], roots["base"]):
        assert str(folder) not in reply.text  # no absolute path leaves the server
    assert admin.allowed()
    listing = admin.models()
    assert set(listing.roots) == {"zoo", "models", "out"} and listing.output_root == "out"
    by_path = {m.path: m for m in listing.models}
    demo, stories = by_path["zoo/demo"], by_path["models/stories260K"]
    assert demo.ok and demo.format == "hf" and demo.architecture == "LlamaForCausalLM"
    assert demo.loaded_as == ("base",)  # the model serve started with
    assert stories.parameters == 260032 and "0.3M params" in stories.summary
    assert "zoo/escape" not in by_path and "zoo/notes" not in by_path
    assert next(m for m in listing.loaded if m["name"] == "base")["path"] == "zoo/demo"
    paths = http.get("/openapi.json").json()["paths"]
    assert {"/v1/admin/models", "/v1/admin/load", "/v1/admin/jobs/{job_id}"} <= set(paths)


# ---------------------------------------------------------------------------------- load
def test_load_with_progress_then_it_answers_then_unload(http, admin):
    job = admin.load("models/stories260K", "st")
    assert job.kind == "load" and job.state == "running"
    states = _follow(admin, job.id)
    assert states[-1].state == "done", states[-1]
    assert len({s.message for s in states}) >= 3  # the loader's stages came through
    assert states[-1].result["name"] == "st" and states[-1].result["path"] == \
        "models/stories260K"
    assert admin.job(job.id).state == "done"
    reply = _complete(http, "st")
    assert reply.status_code == 200 and reply.json()["choices"][0]["text"]
    with pytest.raises(AdminError) as taken:
        admin.load("models/stories260K", "st")
    assert taken.value.status == 400  # the name is in use
    admin.unload("st")
    assert _complete(http, "st").status_code == 404
    assert _complete(http, "base").status_code == 200  # the other model serves on


# ---------------------------------------------------------------------------------- quantize
def test_quantize_with_progress_then_the_output_loads(http, admin, roots):
    job = admin.quantize("models/stories260K", "st-w8a16", method="w8a16", recipe="plain",
                         evaluate=True)
    assert job.kind == "quantize"
    states = _follow(admin, job.id)
    final = states[-1]
    assert final.state == "done", final
    assert {"load", "quantize", "export", "evaluate"} <= {s.stage for s in states}
    float_row, int8_row = final.result["comparison"]  # measured as the wizard measures
    assert float_row["method"] == "float" and int8_row["method"] == "w8a16"
    assert int8_row["weight_bytes"] < float_row["weight_bytes"]
    assert final.result["path"] == "out/st-w8a16" and final.result["method"] == "w8a16"
    assert "out_dir" not in final.result and str(roots["out"]) not in json.dumps(final.result)
    assert (roots["out"] / "st-w8a16" / "npu_quant.json").is_file()
    listed = {m.path: m for m in admin.models().models}["out/st-w8a16"]
    assert listed.ok and listed.quantization
    loaded = _follow(admin, admin.load("out/st-w8a16", "st-int8").id)[-1]
    assert loaded.state == "done", loaded
    assert loaded.result["quantization"] == "w8a16"
    assert _complete(http, "st-int8").status_code == 200
    admin.unload("st-int8")
    with pytest.raises(AdminError) as exists:  # no silent overwrite
        admin.quantize("models/stories260K", "st-w8a16", method="w8a16", recipe="plain")
    assert exists.value.status == 400 and "already exists" in exists.value.message


def test_a_remote_quantization_can_ask_for_the_rotation(admin, roots):
    job = admin.quantize("models/stories260K", "st-rotated", method="w8a16", recipe="plain",
                         rotate="on")
    final = _follow(admin, job.id)[-1]
    assert final.state == "done", final
    assert final.result["rotation"] == {"mode": "on", "rotated": True,
                                        "reason": "asked for, before w8a16 (the head is "
                                                  "untied from the embedding)"}
    config = json.loads((roots["out"] / "st-rotated" / "config.json").read_text())
    assert config["tie_word_embeddings"] is False
    with pytest.raises(AdminError) as bad:
        admin.quantize("models/stories260K", "st-x", method="w8a16", rotate="sometimes")
    assert bad.value.status == 400 and "rotate" in bad.value.message


def test_cancel_a_quantization_stops_it_and_leaves_nothing(http, admin, roots):
    # the auto recipe on many long samples: far longer than the cancel takes
    job = admin.quantize("models/stories260K", "st-cancelled", method="w8a8-dynamic",
                         recipe="auto", samples=512, seq_len=256)
    with pytest.raises(AdminError) as busy:  # one quantization at a time
        admin.quantize("models/stories260K", "st-other", method="w8a16", recipe="plain")
    assert busy.value.status == 409 and job.id in busy.value.message
    for state in admin.events(job.id, timeout=300):
        assert state.state == "running", state
        if state.stage and state.stage != "load":
            break  # past loading, into calibration
    reply = http.delete(f"/v1/admin/jobs/{job.id}")
    assert reply.status_code == 200, reply.text  # it ended within the server's wait
    final = reply.json()
    assert final["state"] == "cancelled" and final["cancel_requested"]
    assert admin.job(job.id).state == "cancelled"
    assert not (roots["out"] / "st-cancelled").exists()
    assert not [p for p in roots["out"].iterdir() if "st-cancelled" in p.name]
    # the events of a finished job: its final state at once, then the end
    assert [s.state for s in admin.events(job.id)] == ["cancelled"]
    assert http.delete(f"/v1/admin/jobs/{job.id}").json()["state"] == "cancelled"
    next_job = admin.quantize("models/stories260K", "st-other", method="w8a16", recipe="plain")
    assert _follow(admin, next_job.id)[-1].state == "done"


def test_stopping_the_server_cancels_its_jobs(stories_dir, tmp_path):
    with running_server(engine_for(stories_dir), allow_admin=True,
                        model_roots=(str(stories_dir.parent),),
                        output_root=str(tmp_path / "out")) as (controller, url), \
            RemoteAdmin(url, timeout=120) as admin:
        job = admin.quantize("models/stories260K", "long", method="w8a8-dynamic",
                             recipe="auto", samples=512, seq_len=256)
        for state in admin.events(job.id, timeout=300):
            if state.stage and state.stage != "load":
                break
    final = controller.app.state.admin.jobs.get(job.id)
    assert final.state == "cancelled", final.snapshot()
    assert not list((tmp_path / "out").iterdir())


# ---------------------------------------------------------------------------------- CLI
def test_remote_cli_lists_and_reports_refusals(server):
    def cli(*args):
        return run_cli("remote", "--base-url", server.url, "--api-key", KEY, *args, timeout=120)

    res = cli("models")
    assert res.returncode == 0, res.stderr
    assert "zoo/demo" in res.stdout and "serving as base" in res.stdout
    res = cli("load", "../etc")
    assert res.returncode == 1 and "'..' may not appear" in res.stderr


def test_serve_checks_the_admin_flags_before_loading(tmp_path):
    def serve(*args):
        return subprocess.run([sys.executable, "-m", "npu_console.cli.main", "serve",
                               "--port", "0", *args], capture_output=True, text=True,
                              timeout=120, check=False)

    res = serve("--allow-admin", "--model-root", str(tmp_path / "missing"))
    assert res.returncode == 2 and "no such folder" in res.stderr
    res = serve("--model-root", str(tmp_path))
    assert res.returncode == 2 and "only matter with --allow-admin" in res.stderr


# ---------------------------------------------------------------------------------- fuzz
@pytest.mark.parametrize("mode", ["positive", "negative"])
def test_generated_admin_requests_never_fail_the_server(stories_dir, tmp_path, mode):
    """schemathesis over the admin routes of a server whose roots hold no model (so nothing
    generated can start real work): no answer is a 5xx, every error is the API's shape."""
    schemathesis = pytest.importorskip("schemathesis")
    from hypothesis import HealthCheck, given, settings

    (tmp_path / "empty").mkdir()
    with running_server(engine_for(stories_dir), allow_admin=True,
                        model_roots=(str(tmp_path / "empty"),),
                        output_root=str(tmp_path / "out")) as (_, url):
        schema = schemathesis.openapi.from_url(url + "/openapi.json")
        operations = [r.ok() for r in schema.get_all_operations()
                      if r.ok().path.startswith("/v1/admin")]
        assert len(operations) == 8
        statuses = []
        for op in operations:
            if mode == "negative" and op.method.upper() != "POST":
                continue  # nothing to make invalid: no body, and any string is a valid job id
            strategy = op.as_strategy(generation_mode=schemathesis.GenerationMode(mode))

            @given(case=strategy)
            @settings(max_examples=10, deadline=None, derandomize=True, database=None,
                      suppress_health_check=list(HealthCheck))
            def check(case):
                response = case.call(timeout=60)
                statuses.append(response.status_code)
                assert response.status_code < 500, (case.method, case.path, case.body,
                                                     response.text[:500])
                if response.status_code >= 400:
                    assert response.json()["error"]["message"]

            check()
        assert {403, 404} & set(statuses) if mode == "positive" else {400} & set(statuses)
        assert not list((tmp_path / "out").iterdir())  # nothing was written
