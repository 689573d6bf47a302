"""Benchmark arithmetic: vLLM's metric definitions, arrival processes, prompt sources, files."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest
from npu_console.engine.bench.arrivals import send_offsets
from npu_console.engine.bench.progress import write_outputs
from npu_console.engine.bench.prompts import DatasetError, load_dataset, random_word_prompts
from npu_console.engine.bench.stats import SLO, RequestRecord, compute_metrics, peak_concurrency


def rec(i, ttft, e2el, out, itl=(), ok=True, start=0.0, prompt=10):
    return RequestRecord(index=i, success=ok, prompt_len=prompt, output_tokens=out,
                         start_s=start, ttft_s=ttft, e2el_s=e2el, itl_s=list(itl))


def test_tpot_excludes_the_first_token_and_single_token_answers():
    r = rec(0, ttft=0.2, e2el=1.2, out=11)
    assert r.tpot_s == pytest.approx(0.1)
    assert rec(1, 0.2, 0.2, out=1).tpot_s is None


def test_metrics_follow_vllm_definitions():
    records = [rec(0, 0.1, 1.1, 11, itl=[0.1] * 10, start=0.0),
               rec(1, 0.3, 2.3, 21, itl=[0.1] * 20, start=0.5),
               rec(2, 0.2, 0.2, 1, start=1.0),
               rec(3, None, None, 0, ok=False, start=1.5)]
    m = compute_metrics(records, duration_s=4.0)
    assert (m.completed, m.failed) == (3, 1)
    assert m.total_output_tokens == 33 and m.total_input_tokens == 30
    assert m.request_throughput == pytest.approx(3 / 4.0)
    assert m.output_throughput == pytest.approx(33 / 4.0)
    assert m.total_token_throughput == pytest.approx(63 / 4.0)
    # TPOT only over answers longer than one token
    assert m.tpot_ms.count == 2 and m.tpot_ms.mean == pytest.approx(100.0)
    ttfts = np.array([0.1, 0.3, 0.2]) * 1000
    assert m.ttft_ms.p50 == pytest.approx(np.percentile(ttfts, 50))
    assert m.ttft_ms.p99 == pytest.approx(np.percentile(ttfts, 99))
    assert m.itl_ms.count == 30  # every gap of every request, pooled
    assert m.e2el_ms.max == pytest.approx(2300.0)
    assert m.request_goodput is None


def test_goodput_counts_requests_meeting_every_slo():
    records = [rec(0, 0.1, 1.1, 11), rec(1, 0.3, 2.3, 21), rec(2, 0.05, 0.05, 1)]
    m = compute_metrics(records, 2.0, SLO(ttft_ms=250))
    assert m.good_requests == 2 and m.request_goodput == pytest.approx(1.0)
    # a one-token answer counts with TPOT 0, as vLLM does
    m = compute_metrics(records, 2.0, SLO(tpot_ms=50))
    assert m.good_requests == 1
    m = compute_metrics(records, 2.0, SLO(ttft_ms=250, e2el_ms=1000))
    assert m.good_requests == 1


def test_peak_concurrency_from_send_and_end_times():
    records = [rec(0, 0.1, 1.0, 2, start=0.0), rec(1, 0.1, 1.0, 2, start=0.5),
               rec(2, 0.1, 1.0, 2, start=1.0), rec(3, 0.1, 0.2, 2, start=3.0)]
    assert peak_concurrency(records) == 2  # request 2 starts as request 0 ends


def test_poisson_arrivals_have_the_asked_rate_and_are_seeded():
    offs = send_offsets(20001, rate=50.0, burstiness=1.0, seed=3)
    assert offs[0] == 0.0
    gaps = np.diff(offs)
    assert gaps.mean() == pytest.approx(1 / 50.0, rel=0.03)
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, rel=0.05)  # exponential: CV 1
    assert send_offsets(50, 50.0, 1.0, seed=3) == offs[:50]
    assert send_offsets(50, 50.0, 1.0, seed=4) != offs[:50]


def test_burstiness_changes_the_spread_not_the_rate():
    for b in (0.25, 4.0):
        gaps = np.diff(send_offsets(20001, rate=10.0, burstiness=b, seed=1))
        assert gaps.mean() == pytest.approx(0.1, rel=0.05)
        assert gaps.std() / gaps.mean() == pytest.approx(1 / np.sqrt(b), rel=0.06)


def test_without_rate_everything_is_due_at_once_and_bad_values_fail():
    assert send_offsets(4, None) == [0.0] * 4
    assert send_offsets(3, float("inf")) == [0.0] * 3
    with pytest.raises(ValueError):
        send_offsets(3, 0.0)
    with pytest.raises(ValueError):
        send_offsets(3, 1.0, burstiness=0.0)


def test_random_word_prompts_are_distinct_and_seeded():
    a = random_word_prompts(5, 40, 8, seed=1, tokens_per_word=2.0)
    assert len({p.text for p in a}) == 5
    assert all(len(p.text.split()) == 20 for p in a)
    assert [p.text for p in a] == [p.text for p in random_word_prompts(5, 40, 8, 1, 2.0)]


def test_dataset_txt_and_jsonl(tmp_path):
    txt = tmp_path / "p.txt"
    txt.write_text("first prompt\n\nsecond prompt\n")
    got = load_dataset(txt, 5, 7, seed=0)
    assert len(got) == 5 and {p.text for p in got} == {"first prompt", "second prompt"}
    assert all(p.output_len == 7 for p in got)
    jl = tmp_path / "p.jsonl"
    jl.write_text(json.dumps({"prompt": "a b c", "output_len": 3}) + "\n"
                  + json.dumps({"prompt": "d e"}) + "\n")
    got = load_dataset(jl, 2, 9, seed=0)
    assert sorted((p.text, p.output_len) for p in got) == [("a b c", 3), ("d e", 9)]


@pytest.mark.parametrize("content, message", [
    ("{not json}\n", "not valid JSON"),
    (json.dumps({"text": "x"}) + "\n", "string \"prompt\""),
    (json.dumps({"prompt": "x", "output_len": 0}) + "\n", "positive integer"),
    ("\n\n", "no prompts"),
])
def test_bad_datasets_give_one_line_errors(tmp_path, content, message):
    f = tmp_path / "bad.jsonl"
    f.write_text(content)
    with pytest.raises(DatasetError, match=message):
        load_dataset(f, 3, 8, seed=0)
    with pytest.raises(DatasetError, match="no such file"):
        load_dataset(tmp_path / "missing.txt", 3, 8, seed=0)


def test_write_outputs_json_and_csv(tmp_path):
    paths = write_outputs(tmp_path / "out" / "run", {"a": float("nan"), "b": [1, 2]},
                          {"": [{"x": 1, "y": None}], "rows": [{"x": 1}, {"x": 2, "z": 3}]})
    assert [p.name for p in paths] == ["run.json", "run.csv", "run_rows.csv"]
    assert json.loads(paths[0].read_text()) == {"a": None, "b": [1, 2]}
    rows = list(csv.DictReader(paths[2].open()))
    assert rows == [{"x": "1", "z": ""}, {"x": "2", "z": "3"}]
