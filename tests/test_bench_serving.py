"""`bench serve` against a real npu-console server on loopback (stories260K): the load
generator's client-side metrics must agree with the server's own per-request timings."""

from __future__ import annotations

import json
import threading

import pytest
from npu_console.engine.bench import ServingConfig, run_serving_benchmark
from npu_console.engine.bench.arrivals import send_offsets
from support.api import own_engine, running_server

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def server(stories_dir):
    finishes = {}

    def on_step(stats):
        for fin in stats.finished:
            finishes[fin.request_id] = fin

    with own_engine(stories_dir, "stories", timeout=120, max_running=4) as engine:
        engine.add_listener(on_step)
        # one chunk per token, so the client's ITL can be checked token by token
        with running_server(engine, stream_interval_ms=0) as (_, url):
            yield url, finishes


def close(client: float, server: float, rel: float, slack: float) -> bool:
    return abs(client - server) <= rel * server + slack


def test_concurrency_run_agrees_with_server_timings(server):
    url, finishes = server
    result = run_serving_benchmark(ServingConfig(
        base_url=url, num_prompts=8, concurrency=4, input_len=24, output_len=16, seed=1))
    m = result.metrics
    assert (m.completed, m.failed) == (8, 0)
    assert 2 <= m.max_concurrency_seen <= 4
    assert m.total_output_tokens == 8 * 16
    server_fins = [finishes[r.request_id] for r in result.requests]
    assert m.total_input_tokens == sum(f.usage.prompt_tokens for f in server_fins)
    assert m.request_throughput == pytest.approx(8 / m.duration_s)
    for r, f in zip(result.requests, server_fins):
        assert r.usage_reported and r.output_tokens == f.usage.completion_tokens == 16
        st = f.timings
        # the client's clock starts before the server's and stops after it
        assert r.ttft_s >= st.ttft_s - 0.002
        # client and server clocks agree within what a shared machine's scheduling adds: a
        # generous bound that still catches a wrong definition (TTFT in TPOT: whole steps)
        assert close(r.ttft_s, st.ttft_s, 0.25, 0.5)
        assert close(r.e2el_s, st.e2e_s, 0.25, 0.5)
        # the decode part is timed between two token chunks on both sides
        assert close(r.tpot_s, st.tpot_s, 0.25, 0.02)
        # the response's own timings field carries the same numbers
        assert r.server_timings["ttft_ms"] == pytest.approx(st.ttft_s * 1000, abs=0.01)
    mean_server_tpot_ms = sum(f.timings.tpot_s for f in server_fins) / 8 * 1000
    assert close(m.tpot_ms.mean, mean_server_tpot_ms, 0.25, 10.0)
    assert m.itl_ms.count == 8 * 15
    assert close(m.itl_ms.mean, mean_server_tpot_ms, 0.25, 10.0)


def test_rate_run_sends_on_the_seeded_schedule(server):
    url, _ = server
    result = run_serving_benchmark(ServingConfig(
        base_url=url, num_prompts=6, rate=8.0, burstiness=1.0, input_len=8, output_len=4,
        seed=5))
    assert result.metrics.completed == 6
    due = send_offsets(6, 8.0, 1.0, seed=5)
    for r in result.requests:
        # sent at its due time, never early, at most a scheduling hiccup late
        assert due[r.index] - 0.005 <= r.start_s <= due[r.index] + 0.25


def test_cancel_keeps_what_finished(server):
    url, _ = server
    cancel = threading.Event()
    reports = []

    def progress(p):
        reports.append(p)
        if p.done >= 2:
            cancel.set()

    result = run_serving_benchmark(ServingConfig(
        base_url=url, num_prompts=30, concurrency=1, input_len=8, output_len=12),
        progress=progress, cancel=cancel)
    assert result.cancelled
    assert 2 <= result.metrics.completed < 30
    assert result.metrics.completed == len(result.requests)
    assert reports[0].total == 30 and reports[0].done == 1


def test_tokenizer_gives_exact_prompt_lengths(server, stories_dir):
    url, _ = server
    result = run_serving_benchmark(ServingConfig(
        base_url=url, num_prompts=3, concurrency=3, input_len=20, output_len=3,
        tokenizer=str(stories_dir)))
    assert result.metrics.completed == 3
    # the server's count: the 20 random tokens plus the BOS it adds to completions
    assert {r.prompt_len for r in result.requests} == {21}


def test_chat_endpoint_with_a_jsonl_dataset(server, tmp_path):
    url, finishes = server
    ds = tmp_path / "prompts.jsonl"
    ds.write_text("\n".join(json.dumps({"prompt": p, "output_len": n})
                            for p, n in (("Tell me about a cat.", 5), ("A dog ran.", 9))))
    result = run_serving_benchmark(ServingConfig(
        base_url=url, endpoint="chat", num_prompts=4, concurrency=2, dataset=str(ds)))
    assert result.metrics.completed == 4
    assert sorted(r.output_tokens for r in result.requests) == [5, 5, 9, 9]
    for r in result.requests:
        assert finishes[r.request_id].usage.prompt_tokens == r.prompt_len


def test_cli_bench_serve_writes_json_and_csv(server, tmp_path, capsys):
    from npu_console.cli.main import main

    url, _ = server
    rc = main(["bench", "serve", "--base-url", url + "/v1", "--model", "stories",
               "--num-prompts", "4", "--concurrency", "2", "--input-len", "16",
               "--output-len", "6", "--slo-ttft-ms", "100000", "--slo-tpot-ms", "0.001",
               "--out", str(tmp_path / "run")])
    out = capsys.readouterr()
    assert rc == 0, out.err
    assert "Successful requests:" in out.out and "Time to first token" in out.out
    doc = json.loads((tmp_path / "run.json").read_text())
    assert doc["metrics"]["completed"] == 4
    assert doc["settings"]["model"] == "stories" and "api_key" not in doc["settings"]
    assert doc["hardware"]["client"]["cores"] >= 1
    # no answer meets a 1-microsecond TPOT objective
    assert doc["metrics"]["good_requests"] == 0
    rows = (tmp_path / "run_requests.csv").read_text().splitlines()
    assert len(rows) == 5 and rows[0].startswith("index,success")
    assert (tmp_path / "run.csv").read_text().count("\n") == 2


@pytest.mark.parametrize("argv, message", [
    (["--base-url", "http://127.0.0.1:1"], "cannot reach"),
    (["--model", "nope"], "not served"),
    (["--concurrency", "0"], "--concurrency must be at least 1"),
    (["--base-url", "localhost:8000"], "must start with http"),
])
def test_cli_errors_are_one_line(server, capsys, argv, message):
    from npu_console.cli.main import main

    url, _ = server
    base = ["bench", "serve", "--base-url", url, "--num-prompts", "2", "--concurrency", "1"]
    rc = main(base + argv)
    err = capsys.readouterr().err
    assert rc == 2
    assert message in err and "Traceback" not in err


def test_ctrl_c_stops_the_cli_and_still_writes_results(server, tmp_path):
    import signal
    import subprocess
    import sys
    import time

    url, _ = server
    prefix = tmp_path / "interrupted"
    proc = subprocess.Popen(
        [sys.executable, "-m", "npu_console.cli.main", "bench", "serve", "--base-url", url,
         "--num-prompts", "200", "--concurrency", "1", "--input-len", "8", "--output-len", "10",
         "--out", str(prefix)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    err = ""
    # wait until requests are finishing (progress lines on stderr), then press Ctrl-C
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        err += line
        if "requests (" in line and not line.startswith("[  0%]"):
            break
    proc.send_signal(signal.SIGINT)
    out, rest = proc.communicate(timeout=60)
    err += rest
    assert proc.returncode == 130, err
    assert "stopping" in err and "Traceback" not in err
    doc = json.loads((prefix.with_name("interrupted.json")).read_text())
    assert doc["cancelled"] is True
    assert 1 <= doc["metrics"]["completed"] < 200
    assert "stopped early" in out
