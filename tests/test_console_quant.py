"""Quantization wizard on the built-in demo model (real trained weights): run, compare, save, load the INT8 variant
and chat with it; cancel during calibration writes nothing; per-layer sensitivity chart."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

pytest.importorskip("PySide6")
pytest.importorskip("pytestqt")

from npu_console.console.testing import model_names
from PySide6.QtCore import Qt
from support.gui import console_window

WAIT_MS = 240_000
pytestmark = [pytest.mark.slow, pytest.mark.gui]

STORY = ("Once upon a time there was a little girl named Lily . She liked to play with her dog "
         "in the park . One day the sun was big and warm and they ran to the tree")
WORDS = STORY.split(" ")


def write_calib(path, paragraphs: int, words: int = 60):
    rng = random.Random(0)
    path.write_text("\n\n".join(" ".join(rng.choice(WORDS) for _ in range(words))
                                for _ in range(paragraphs)), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def window(qapp, demo_model_dir, tmp_path_factory):
    home = tmp_path_factory.mktemp("quant-home")
    with console_window(qapp, home, "quantize", ((demo_model_dir, "demo"),), wait_ms=WAIT_MS) as win:
        win.home = home
        page = win.page("quantize")
        page.eval_tokens, page.eval_prompts, page.new_tokens = 256, 2, 6
        yield win


@pytest.fixture(scope="module")
def calib(tmp_path_factory):
    return write_calib(tmp_path_factory.mktemp("calib") / "calib.txt", 40)


def _wait(qtbot, page):
    qtbot.waitUntil(lambda: not page.busy(), timeout=WAIT_MS)


def test_wizard_quantizes_compares_saves_and_the_variant_chats(window, calib, qtbot, tmp_path):
    from npu_console.console.quant_runs import runs_dir

    page = window.page("quantize")
    page.set_models(window.ctx.engine_host.models())
    assert page.model_step.model_box.currentData()[0] == "demo"
    qtbot.mouseClick(page.next_btn, Qt.LeftButton)
    assert page.stack.currentIndex() == 1
    page.set_method("w8a8-dynamic", "no-down-proj", int8_head="off")  # saved as msmodelslim
    qtbot.mouseClick(page.next_btn, Qt.LeftButton)
    page.set_calibration(str(calib), 4, 32)
    qtbot.waitUntil(lambda: page.calib_step.calib_info.text().startswith("40 documents"), timeout=10_000)
    page.calib_step.calib_path.setText(str(calib) + ".missing")
    page.update_calib_info()
    qtbot.waitUntil(lambda: "not found" in page.calib_step.calib_info.text(), timeout=10_000)
    page.calib_step.calib_path.setText(str(calib))
    page.go(4)
    assert "All but down_proj" in page.run_step.plan_summary.text()
    qtbot.mouseClick(page.run_step.run_btn, Qt.LeftButton)
    assert page.busy() and page.run_step.run_progress.cancel_btn.isEnabled()
    _wait(qtbot, page)
    run = page.run
    assert run is not None, page.run_step.run_progress.stage.text()
    assert run.quantized_layers == 4 * 6 and run.skipped_layers == 4  # 4 down_proj stay float
    assert run.quant.disk_bytes < run.float.disk_bytes
    assert run.quant.memory_bytes < run.float.memory_bytes
    assert 0.0 <= run.quant.greedy_agreement <= 1.0
    assert 0.9 <= run.quant.top1_agreement <= 1.0  # measured 0.99+ for INT8 on the demo model
    assert page.run_step.table.item(6, 1).text() == f"{100 * run.quant.top1_agreement:.0f}% of tokens"
    assert page.run_step.table.item(4, 2).text() == f"{run.ppl_delta_pct:+.2f}%"
    assert page.run_step.verdict_badge.text() in ("WITHIN BUDGET", "OVER BUDGET")
    assert (page.run_step.verdict_badge.text() == "WITHIN BUDGET") == run.within(page.budget.value())
    assert (runs_dir() / run.out_dir.rsplit("/", 1)[-1] / "npu_quant.json").is_file()
    # kept in the history; the same combination is recognised as measured
    assert page.run_step.history.rowCount() == 1
    assert page.run_step.known_label.text() == ""  # just measured, not "already"
    page._fresh_key, page.run = None, None  # a later session: the stored result is offered
    page.run_step.table.clearContents()
    page._options_changed()
    assert page.run_step.known_label.text().startswith("Already measured")
    assert page.run_step.table.item(4, 2).text() == f"{run.ppl_delta_pct:+.2f}%"

    # auto-loaded next to the float model, and it answers in the chat
    name = "demo-w8a8-dynamic"
    qtbot.waitUntil(lambda: page.loaded_variant == name, timeout=WAIT_MS)
    assert name in model_names(window) and "Loaded as" in page.run_step.save_status.text()
    info = next(m for m in window.ctx.engine_host.models() if m.name == name)
    assert info.quantization == "w8a8-dynamic"
    chat = window.page("chat")
    window.show_page("chat")
    chat.set_models(window.ctx.engine_host.models())
    chat.model_a.setCurrentText(name)
    chat.sampling.max_tokens.setValue(12)
    chat.send("Once upon a time")
    qtbot.waitUntil(lambda: not chat.busy(), timeout=WAIT_MS)
    reply = chat.conv.panes[0].messages[-1]
    assert reply.model == name and reply.stats["completion_tokens"] >= 1

    # the demo view's A/B chat compares float and INT8 side by side
    demo = window.open_demo()
    demo.panes[0][0].setCurrentText("demo")
    demo.panes[1][0].setCurrentText(name)
    assert len(demo.send("The dog")) == 2
    qtbot.waitUntil(lambda: not demo.busy(), timeout=WAIT_MS)
    for _box, pane in demo.panes:
        prompt, answer = pane.toPlainText().split("\n\n", 1)
        assert prompt == "» The dog" and "tokens ·" in answer
    demo.close()
    window.show_page("quantize")

    # save in the vllm-ascend layout
    dest = tmp_path / "ms"
    assert page.save_as("msmodelslim", str(dest)) is not None
    _wait(qtbot, page)
    assert (dest / "quant_model_description.json").is_file(), page.run_step.save_status.text()
    assert "Saved msmodelslim" in page.run_step.save_status.text()


def test_cancel_during_calibration_writes_nothing(window, tmp_path, qtbot):
    from npu_console.console.quant_runs import QuantRunStore, runs_dir

    page = window.page("quantize")
    before = {p.name for p in runs_dir().iterdir()} if runs_dir().exists() else set()
    n_runs = len(QuantRunStore().load())
    big = write_calib(tmp_path / "big.txt", 600)  # plenty of windows: calibration takes a while
    page.set_method("w8a8-static", "all")
    page.set_calibration(str(big), 2048, 16)
    page.auto_load.setChecked(False)
    stages = []

    def on_progress(_f, message):
        stages.append(message)
        if message.startswith("calibrating") and not page.job.cancel_event.is_set():
            qtbot.mouseClick(page.run_step.run_progress.cancel_btn, Qt.LeftButton)

    job = page.start_run()
    assert job is not None
    job.progress.connect(on_progress)
    with qtbot.waitSignal(job.cancelled, timeout=WAIT_MS):
        pass
    _wait(qtbot, page)
    calib_steps = [s for s in stages if s.startswith("calibrating")]
    assert calib_steps and not any(s.startswith(("quantizing", "writing", "measuring"))
                                   for s in stages)
    done, total = calib_steps[-1].split()[-1].split("/")
    assert int(done) < int(total)
    assert "Nothing was written" in page.run_step.run_progress.stage.text()
    after = {p.name for p in runs_dir().iterdir()} if runs_dir().exists() else set()
    assert after == before  # no new folder, no .partial leftovers
    assert len(QuantRunStore().load()) == n_runs


def test_sensitivity_chart_and_recommended_skip_list(window, calib, qtbot):
    page = window.page("quantize")
    page.set_method("w8a8-dynamic", "attention")
    page.set_calibration(str(calib), 4, 32)
    page.budget.setValue(0.0)
    page.go(3)
    job = page.start_sensitivity()
    assert job is not None
    _wait(qtbot, page)
    res = page.sensitivity
    assert res is not None, page.sens_step.sens_progress.stage.text()
    assert len(res.ranking) == 4 * 4  # q/k/v/o of 4 layers
    kls = [kl for _n, kl in res.ranking]
    assert kls == sorted(kls, reverse=True)
    assert len(page.sens_step.sens_chart.labels) == 16 and page.sens_step.sens_chart.values == kls[:16]
    assert page.sens_step.rec_label.text()
    if res.skip:
        qtbot.mouseClick(page.sens_step.use_rec_btn, Qt.LeftButton)
        assert page.preset() == "custom"
        assert res.skip[0] in page.method_step.skip_edit.text()
    else:
        assert res.met and not page.sens_step.use_rec_btn.isEnabled()


def test_int8_head_run_is_smaller_and_saves_only_natively(window, qtbot, tmp_path):
    """The wizard's lm_head choice: auto recommends the int8 head for the demo model (its
    table is 27 % of the weights); the run's INT8 weights shrink by the table's share, the
    folder records the int8 head, the table shows what the head alone costs, and a vLLM format
    is refused with a message instead of an export."""
    import json

    page = window.page("quantize")
    page.go(1)
    box = page.method_step.head_box
    assert box.currentData() == "auto"
    assert box.currentText() == "auto: yes for this model (head = 27 % of the weights)"
    page.method_step.grab().save(str(tmp_path.parent / "quantize_head_step.png"))
    page.set_method("w8a16", "all", int8_head="off")
    page.auto_load.setChecked(False)
    page.go(4)
    plain = page.start_run()
    assert plain is not None
    _wait(qtbot, page)
    without = page.run
    page.set_method("w8a16", "all")  # auto
    page.go(4)
    assert "lm_head: auto" in page.run_step.plan_summary.text()
    assert page.start_run() is not None
    _wait(qtbot, page)
    run = page.run
    assert run is not None and run.key != without.key, page.run_step.run_progress.stage.text()
    meta = json.loads((Path(run.out_dir) / "npu_quant.json").read_text())
    assert meta["int8_head"] == {"head": "lm_head", "embedding": "model.embed_tokens",
                                 "tied": True, "group": 32}
    # demo: 4096 x 256 tied table, fp32 -> int8 plus one scale per 32 values of a row, fp16
    # in the packed copy that x86 builds serve (kernels/packed.py), else fp32
    from npu_console.engine.kernels import packed as packed_kernels

    saved = without.quant.memory_bytes - run.quant.memory_bytes
    scale_bytes = 2 if packed_kernels.available() else 4
    assert saved == 4096 * 256 * 3 - 4096 * (256 // 32) * scale_bytes
    assert run.int8_head and not without.int8_head
    assert run.head_reason.startswith("auto: head = 27 %")
    assert run.head_cost is not None and 0.9 <= run.head_cost["top1_agreement"] <= 1.0
    from npu_console.console.pages.quantize_results import HEAD_ROW

    table = page.run_step.table
    assert table.item(HEAD_ROW, 1).text() == "int8"
    alone = run.head_cost["perplexity_change_pct"]
    assert table.item(HEAD_ROW, 2).text() == f"{alone:+.2f}% alone"
    assert run.head_reason in table.item(HEAD_ROW, 1).toolTip()
    assert "same next token" in table.item(HEAD_ROW, 2).toolTip()
    assert "int8 lm_head (alone" in page.run_step.verdict.text()
    page.run_step.grab().save(str(tmp_path.parent / "quantize_head_result.png"))
    assert page.save_as("msmodelslim", str(tmp_path / "ms")) is None
    assert "read in float" in page.run_step.save_status.text()
    assert not (tmp_path / "ms").exists()
