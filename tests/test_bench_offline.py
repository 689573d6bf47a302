"""`bench offline`: the batch sweep through the real local engine on stories260K."""

from __future__ import annotations

import json
import threading

import pytest
from npu_console.engine.bench import OfflineConfig, run_offline_sweep
from npu_console.engine.bench.hardware import measure_host_bandwidth, spec_bandwidth
from npu_console.engine.kernels.native import available as native_available


def sweep(stories_dir, **kw):
    base = {"model": str(stories_dir), "batch_sizes": (1, 2), "input_len": 16, "output_len": 8,
                "num_threads": 1, "bandwidth_gbps": 25.0}
    return run_offline_sweep(OfflineConfig(**(base | kw)))


@pytest.mark.slow
def test_sweep_reports_every_batch_size(stories_dir):
    res = sweep(stories_dir)
    assert [b.batch_size for b in res.batches] == [1, 2] and not res.cancelled
    # stories260K: 5 layers x 4 KV heads x head_dim 8, K and V, in fp16 (the default cache on
    # CPU with the native kernels) or fp32
    assert res.model["kv_bytes_per_token"] == 2 * 5 * 4 * 8 * (2 if native_available() else 4)
    for b in res.batches:
        assert b.completed == b.batch_size
        assert b.output_tokens == 8 * b.batch_size and b.input_tokens == 16 * b.batch_size
        assert b.output_tokens_per_s == pytest.approx(b.output_tokens / b.wall_s)
        assert b.decode_tokens_per_s == pytest.approx(b.batch_size / (b.tpot_ms_mean / 1000))
        assert 0 < b.ttft_ms_mean < b.wall_s * 1000
        assert b.memory_kind == "rss" and b.peak_memory_bytes > 50 * 2**20
        step = (res.model["decode_weight_bytes"]
                + b.batch_size * (16 + 4) * res.model["kv_bytes_per_token"])
        assert b.bytes_per_step == step
        assert b.roofline_tokens_per_s == pytest.approx(b.batch_size * 25e9 / step)
        assert b.bandwidth_share == pytest.approx(b.decode_tokens_per_s /
                                                  b.roofline_tokens_per_s)
    assert res.bandwidth == {"gbps": 25.0, "source": "given with --bandwidth"}


@pytest.mark.slow
def test_int8_sweep_reads_fewer_weight_bytes(stories_dir):
    float_res = sweep(stories_dir, batch_sizes=(1,))
    q = sweep(stories_dir, batch_sizes=(1,), quant="w8a8-dynamic")
    assert q.model["quantization"] == "w8a8-dynamic"
    assert q.batches[0].output_tokens == 8
    # stories260K's linears shrink 4x; its tied fp32 embedding (128 KiB) stays
    lin_float = float_res.model["decode_weight_bytes"] - 512 * 64 * 4
    lin_q = q.model["decode_weight_bytes"] - 512 * 64 * 4
    assert lin_q < 0.4 * lin_float


@pytest.mark.slow
def test_cancel_stops_between_batches(stories_dir):
    cancel = threading.Event()

    def progress(p):
        if p.message.startswith("batch 2"):
            cancel.set()

    res = run_offline_sweep(OfflineConfig(model=str(stories_dir), batch_sizes=(1, 2, 4),
                                          input_len=8, output_len=200, num_threads=1,
                                          bandwidth_gbps=25.0), progress=progress, cancel=cancel)
    assert res.cancelled
    assert [b.batch_size for b in res.batches] == [1]


@pytest.mark.slow
def test_cli_offline_json_and_files(stories_dir, tmp_path, capsys):
    from npu_console.cli.main import main

    argv = ["bench", "offline", "--model", str(stories_dir), "--device", "cpu",
            "--batch-sizes", "2,1", "--input-len", "8", "--output-len", "4",
            "--bandwidth", "30", "--threads", "1", "--json"]
    rc = main(argv + ["--kv-dtype", "float32", "--out", str(tmp_path / "off")])
    out = capsys.readouterr()
    assert rc == 0, out.err
    doc = json.loads(out.out)
    assert [b["batch_size"] for b in doc["batches"]] == [1, 2]
    # a float16 cache: half the KV bytes per token, as the roofline counts them
    assert main(argv + ["--kv-dtype", "float16"]) == 0
    half = json.loads(capsys.readouterr().out)
    assert half["settings"]["kv_dtype"] == "float16"
    assert half["model"]["kv_bytes_per_token"] * 2 == doc["model"]["kv_bytes_per_token"]
    assert doc["hardware"]["cores"] >= 1 and doc["settings"]["input_len"] == 8
    csv_lines = (tmp_path / "off.csv").read_text().splitlines()
    assert len(csv_lines) == 3 and "bandwidth_share" in csv_lines[0]


@pytest.mark.parametrize("argv, message", [
    (["--batch-sizes", "0,2"], "--batch-sizes must be positive"),
    (["--output-len", "1"], "--output-len at least 2"),
    (["--model", "/no/such/folder"], "no such folder"),
])
def test_cli_offline_errors(stories_dir, capsys, argv, message):
    from npu_console.cli.main import main

    rc = main(["bench", "offline", "--model", str(stories_dir), "--device", "cpu"] + argv)
    err = capsys.readouterr().err
    assert rc == 2 and message in err and "Traceback" not in err


def test_bandwidth_table_and_host_measurement():
    assert spec_bandwidth("NVIDIA H200").gbps == 4800.0
    assert spec_bandwidth("Ascend910B3").gbps == 1600.0
    assert spec_bandwidth("Ascend910B4").gbps == 800.0
    assert spec_bandwidth("Ascend310P3").gbps == 204.8
    assert spec_bandwidth("Some Future Chip") is None
    first = measure_host_bandwidth(size_mb=64, passes=2)
    assert 0.2 < first.gbps < 2000 and "torch.sum" in first.source


def test_host_bandwidth_keeps_the_days_best(tmp_path, monkeypatch):
    """A figure measured while the host was busy must not replace a better one from today."""
    import json
    import time

    monkeypatch.setenv("NPU_CONSOLE_HOME", str(tmp_path))
    from npu_console.engine.bench.hardware import _cache_path

    now = measure_host_bandwidth(size_mb=64, passes=2)
    cache = json.loads(_cache_path().read_text())
    (key,) = cache
    cache[key] = {"gbps": now.gbps * 100, "at": time.time() - 60}  # a quieter hour today
    _cache_path().write_text(json.dumps(cache))
    best = measure_host_bandwidth(size_mb=64, passes=2)
    assert best.gbps == now.gbps * 100 and "best of the last day" in best.source
    cache[key]["at"] = time.time() - 3 * 24 * 3600  # older than a day: measured afresh
    _cache_path().write_text(json.dumps(cache))
    fresh = measure_host_bandwidth(size_mb=64, passes=2)
    assert fresh.gbps < now.gbps * 10 and "torch.sum" in fresh.source
    assert measure_host_bandwidth(size_mb=64, passes=2, use_cache=False).gbps < now.gbps * 10

