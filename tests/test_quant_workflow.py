"""engine.quant.workflow, the one quantization workflow (CLI, wizard, bench, server): its stage
events, cancel at any stage, all-or-nothing output, and one-line errors for bad input. Real
stories260K weights, real files."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
from fakes.stories_text import sampled_text, write_text_file
from npu_console.engine.quant.calib import Cancelled
from npu_console.engine.quant.config import QuantError
from npu_console.engine.quant.report import EvalSpec
from npu_console.engine.quant.workflow import STAGES, QuantizeRequest, StageEvent, run_workflow

SMALL_EVAL = EvalSpec(max_tokens=256, n_prompts=2, new_tokens=6, ctx=128, batch8=False,
                      kl=False)


@pytest.fixture(scope="module")
def calib_file(stories_dir, tmp_path_factory):
    return str(write_text_file(tmp_path_factory.mktemp("calib") / "calib.txt",
                               sampled_text(stories_dir, 3, 8, 120)))


def request(stories_dir, out, **kw) -> QuantizeRequest:
    base = {"model_dir": str(stories_dir), "out_dir": str(out) if out else None,
            "method": "w8a8-static", "recipe": "plain", "samples": 4, "seq_len": 32}
    return QuantizeRequest(**(base | kw))


def stage_order(events: list[StageEvent]) -> list[str]:
    order: list[str] = []
    for e in events:
        if not order or order[-1] != e.stage:
            order.append(e.stage)
    return order


def leftovers(folder: Path) -> list[str]:
    """Hidden staging / partial folders a run could leave beside its output."""
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


def test_every_stage_reports_in_order_and_the_result_is_complete(stories_dir, calib_file,
                                                                 tmp_path, capsys):
    events: list[StageEvent] = []
    req = request(stories_dir, tmp_path / "q", calib_file=calib_file, evaluate=SMALL_EVAL,
                  report=str(tmp_path / "report"))
    res = run_workflow(req, on_event=events.append)
    assert stage_order(events) == list(STAGES)
    fractions = [e.fraction for e in events]
    assert fractions == sorted(fractions) and fractions[0] == 0.0 and fractions[-1] == 1.0
    assert all(e.message for e in events)
    steps = {(e.step, e.done, e.total) for e in events}
    assert ("calibrate", 4, 4) in steps and ("quantize", 35, 35) in steps
    assert ("export", 1, 1) in steps
    assert any(e.stage == "evaluate" and "perplexity" in e.message for e in events)
    # the checkpoint, its comparison with the float model, and the report files
    assert (tmp_path / "q" / "npu_quant.json").is_file()
    assert res.calib_samples == 4 and len(res.info.quantized) == 35
    flt, q = res.comparison.rows
    assert (flt.method, q.method, q.name) == ("float", "w8a8-static", "q")
    assert q.weight_bytes < flt.weight_bytes and q.disk_bytes < flt.disk_bytes
    assert 0.0 <= q.greedy_agreement <= 1.0 and 0.0 <= q.top1_agreement <= 1.0
    assert q.ppl_delta_pct == pytest.approx(100 * (q.perplexity / flt.perplexity - 1))
    assert res.comparison.tokens == 256 and set(res.stages) == set(STAGES)
    doc = json.loads((tmp_path / "report.json").read_text())
    assert [v["method"] for v in doc["variants"]] == ["float", "w8a8-static"]
    assert "| q | w8a8-static |" in (tmp_path / "report.md").read_text()
    assert res.report_files == [str(tmp_path / "report.md"), str(tmp_path / "report.json")]
    assert leftovers(tmp_path) == []
    assert capsys.readouterr().out == ""  # a library: events, never prints


def test_stages_a_request_skips_are_not_reported(stories_dir, tmp_path):
    events: list[StageEvent] = []
    res = run_workflow(request(stories_dir, tmp_path / "d", method="w8a8-dynamic"),
                       on_event=events.append)
    assert stage_order(events) == ["load", "quantize", "export"]  # plain dynamic: no calibration
    assert res.comparison is None and res.calibration is None and res.model is None


def test_in_memory_run_returns_the_quantized_model_and_writes_nothing(stories_dir, tmp_path):
    events: list[StageEvent] = []
    res = run_workflow(request(stories_dir, None, method="w8a16"), on_event=events.append)
    assert stage_order(events) == ["load", "quantize"]
    assert res.out_dir is None and res.model.npu_quant.method == "w8a16"
    assert res.quant_weight_bytes < res.float_weight_bytes
    with pytest.raises(QuantError, match="give an output folder"):
        run_workflow(request(stories_dir, None, evaluate=SMALL_EVAL))


@pytest.mark.parametrize("stop_at", ["calibrate", "quantize", "evaluate"])
def test_cancel_stops_promptly_and_leaves_no_output(stories_dir, calib_file, tmp_path, stop_at):
    """Cancelled while calibrating, quantizing, or measuring the already exported checkpoint:
    Cancelled comes at the next step, and no folder (nor a hidden staging one) is left."""
    cancel = threading.Event()
    events: list[StageEvent] = []

    def on_event(e: StageEvent) -> None:
        events.append(e)
        hit = "perplexity" in e.message if stop_at == "evaluate" else e.done >= 1
        if e.stage == stop_at and hit and not cancel.is_set():
            cancel.set()
            seen.append(len(events))

    seen: list[int] = []
    req = request(stories_dir, tmp_path / "out", calib_file=calib_file, samples=8,
                  evaluate=SMALL_EVAL)
    with pytest.raises(Cancelled):
        run_workflow(req, on_event=on_event, cancel=cancel)
    assert seen == [len(events)]  # the event that saw the flag was the last one
    assert events[-1].stage == stop_at
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no folder, no hidden staging


def test_a_cancelled_run_keeps_the_folder_it_was_to_replace(stories_dir, calib_file, tmp_path):
    old = tmp_path / "out"
    run_workflow(request(stories_dir, old, method="w8a16"))
    before = (old / "npu_quant.json").read_text()
    cancel = threading.Event()

    def on_event(e: StageEvent) -> None:
        if e.stage == "evaluate":
            cancel.set()

    with pytest.raises(Cancelled):
        run_workflow(request(stories_dir, old, method="w8a8-dynamic", overwrite=True,
                             evaluate=SMALL_EVAL), on_event=on_event, cancel=cancel)
    assert (old / "npu_quant.json").read_text() == before  # still the w8a16 model
    assert leftovers(tmp_path) == []


def test_bad_model_paths_give_one_line_errors_before_any_work(stories_dir, tmp_path):
    def error(model_dir) -> str:
        events: list[StageEvent] = []
        with pytest.raises(Exception) as info:
            run_workflow(request(stories_dir, tmp_path / "o", model_dir=str(model_dir)),
                         on_event=events.append)
        assert not [e for e in events if e.stage != "load"]
        assert not (tmp_path / "o").exists()
        text = str(info.value)
        assert text and "\n" not in text and "Traceback" not in text
        return text

    assert "model not found" in error(tmp_path / "no-such-model")
    empty = tmp_path / "empty"
    empty.mkdir()
    assert "not a model folder" in error(empty)
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text("{not json")
    assert "config.json" in error(broken)
    quantized = tmp_path / "int8"
    run_workflow(request(stories_dir, quantized, method="w8a16"))
    assert "already quantized" in error(quantized)


@pytest.mark.parametrize("kw, message", [
    ({"method": "w4a4"}, "unknown method"),
    ({"fmt": "onnx"}, "unknown format"),
    ({"recipe": "best"}, "unknown recipe"),
    ({"recipe": "auto", "calib_file": "/no/such.txt"}, "file not found"),
    ({"evaluate": EvalSpec(data="/no/such.txt")}, "evaluation text not found"),
    ({"evaluate": EvalSpec(max_tokens=8)}, "max_tokens >= 64"),
])
def test_bad_requests_fail_before_loading(stories_dir, tmp_path, kw, message):
    events: list[StageEvent] = []
    with pytest.raises(QuantError, match=message):
        run_workflow(request(stories_dir, tmp_path / "o", **kw), on_event=events.append)
    assert events == [] and not (tmp_path / "o").exists()


def test_a_cancel_after_the_last_write_keeps_the_finished_checkpoint(stories_dir, tmp_path):
    """Without an evaluation the export is the last step: a cancel that arrives as it ends
    cannot undo it, so the run reports success rather than a cancel with a folder on disk."""
    cancel = threading.Event()

    def on_event(e: StageEvent) -> None:
        if e.step == "export" and e.done == 1:
            cancel.set()

    res = run_workflow(request(stories_dir, tmp_path / "o", method="w8a8-dynamic"),
                       on_event=on_event, cancel=cancel)
    assert cancel.is_set() and (tmp_path / "o" / "npu_quant.json").is_file()
    assert res.out_dir == str(tmp_path / "o")
