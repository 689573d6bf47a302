"""`npu-console quantize` and `npu-console eval` as a user runs them (real model, real files)."""

from __future__ import annotations

import json
import threading

import pytest
from fakes.stories_text import sampled_text, write_text_file
from npu_console.cli.main import main
from npu_console.engine.quant.calib import Cancelled
from npu_console.engine.quant.workflow import QuantizeRequest, run_quantize
from support.cli import cli_in_process, run_cli


@pytest.fixture(scope="module")
def calib_file(stories_dir, tmp_path_factory):
    return write_text_file(tmp_path_factory.mktemp("calib") / "calib.txt",
                           sampled_text(stories_dir, 2, 8, 120))


@pytest.fixture(scope="module")
def heldout_file(stories_dir, tmp_path_factory):
    return write_text_file(tmp_path_factory.mktemp("held") / "held.txt",
                           sampled_text(stories_dir, 1, 4, 120))


@pytest.mark.slow
def test_quantize_then_eval_end_to_end(stories_dir, calib_file, heldout_file, tmp_path, capsys):
    out = tmp_path / "w8a8"
    r = run_cli("quantize", "--model", stories_dir, "--method", "w8a8-static", "--smoothquant",
             "0.5", "--calib", calib_file, "--samples", "8", "--seq-len", "64",
             "--format", "msmodelslim", "--skip", "*.down_proj", "--out", out, "--json")
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    assert res["method"] == "w8a8-static" and res["calib_samples"] == 8
    # 35 linear layers: the 5 down_proj skipped as asked, and any the static recipe keeps float
    # (its most sensitive ones, each named with its reason) skipped beside them
    keep_float = res["config"]["recipe"]["keep_float"]
    downs = {f"model.layers.{i}.mlp.down_proj" for i in range(5)}
    assert set(res["skipped"]) == downs | set(keep_float)
    assert len(res["quantized"]) + len(res["skipped"]) == 35
    assert not set(res["quantized"]) & set(res["skipped"])
    assert "calibrate: 8/8" in r.stderr and "export: 1/1" in r.stderr  # progress on stderr
    assert (out / "quant_model_description.json").is_file()
    evals = {}
    for name, model in (("float", stories_dir), ("int8", out)):
        e = cli_in_process(capsys, "eval", "--model", model, "--data", heldout_file, "--json", "--device", "cpu",
                 "--dtype", "float32")
        assert e.returncode == 0, e.stderr
        evals[name] = json.loads(e.stdout)
        assert evals[name]["tokens"] > 100
    assert evals["int8"]["quantization"] == "w8a8-static"
    ratio = evals["int8"]["perplexity"] / evals["float"]["perplexity"]
    assert 0.98 < ratio < 1.05


@pytest.mark.parametrize("extra,msg", [
    (["--method", "w4a4"], "unknown method"),
    (["--method", "w8a16", "--skip", "*.nothing_here"], "matches no layer"),
    (["--method", "w8a8-static", "--calib", "EMPTY"], "contains no text"),
    (["--method", "w8a16", "--format", "compressed-tensors"], "compressed-tensors"),
    (["--method", "w8a8-dynamic", "--format", "onnx"], "unknown format"),
])
def test_bad_input_one_line_error_nothing_written(stories_dir, tmp_path, capsys, extra, msg):
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n")
    extra = [str(empty) if a == "EMPTY" else a for a in extra]
    out = tmp_path / "out"
    rc = main(["quantize", "--model", str(stories_dir), "--out", str(out), *extra])
    err = capsys.readouterr().err.strip()
    last = err.splitlines()[-1]  # earlier lines are progress
    assert rc == 2 and last.startswith("error: ") and msg in last and "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty.txt"]


def test_non_model_folder_is_refused(tmp_path, capsys):
    rc = main(["quantize", "--model", str(tmp_path), "--method", "w8a16",
               "--out", str(tmp_path / "o")])
    assert rc == 2 and "not a model folder" in capsys.readouterr().err


def test_job_api_progress_and_cancel(stories_dir, calib_file, tmp_path):
    req = QuantizeRequest(model_dir=str(stories_dir), out_dir=str(tmp_path / "o"),
                          method="w8a8-dynamic", fmt="compressed-tensors", samples=4, seq_len=32)
    seen = []
    res = run_quantize(req, progress=lambda *a: seen.append(a))
    assert res.info.method == "w8a8-dynamic" and res.quant_weight_bytes < res.float_weight_bytes
    assert ("quantize", 35, 35) in seen and seen[-1] == ("export", 1, 1)
    cancel = threading.Event()

    def progress(stage, done, total):
        if stage == "calibrate" and done == 2:
            cancel.set()

    req2 = QuantizeRequest(model_dir=str(stories_dir), out_dir=str(tmp_path / "c"),
                           method="w8a8-static", calib_file=str(calib_file), samples=6,
                           seq_len=32)
    with pytest.raises(Cancelled):
        run_quantize(req2, progress=progress, cancel=cancel)
    assert not (tmp_path / "c").exists()
