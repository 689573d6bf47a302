"""Models page: folder summary, memory estimate, broken-folder dialog, load / unload / cancel."""

from __future__ import annotations

import shutil

import pytest

pytest.importorskip("PySide6")
pytest.importorskip("pytestqt")

pytestmark = [pytest.mark.slow, pytest.mark.gui]
WAIT_MS = 90_000


@pytest.fixture(scope="module")
def window(qapp, tmp_path_factory):
    from npu_console.console.testing import make_window

    home = tmp_path_factory.mktemp("models-home")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("NPU_CONSOLE_HOME", str(home))
        win = make_window(home, model="", replay=[])
        win.ctx.engine_host.start()
        win.show_page("models")
        yield win
        win.close()


def _broken_copy(src, dst):
    shutil.copytree(src, dst)
    weights = dst / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[: len(data) // 3])  # truncated download
    return dst


def test_broken_folder_shows_error_dialog_and_app_carries_on(window, qtbot, stories_dir,
                                                            tmp_path):
    from PySide6.QtWidgets import QMessageBox

    page = window.page("models")
    broken = _broken_copy(stories_dir, tmp_path / "broken")
    assert page.open_folder(str(broken)) is False
    box = page.findChild(QMessageBox, "ModelErrorDialog")
    assert box is not None and box.isVisible()
    assert "model.safetensors" in box.informativeText()
    assert not box.isModal() or box.windowModality() != 2  # opened with open(), not exec()
    box.button(QMessageBox.Ok).click()
    qtbot.waitUntil(lambda: not box.isVisible(), timeout=5_000)
    # still usable: a good folder opens and shows its summary
    assert page.open_folder(str(stories_dir))
    assert page.fields["arch"].text() == "LlamaForCausalLM"
    assert page.fields["ctx"].text() == "512"
    assert page.load_btn.isEnabled()


def test_not_a_folder_is_reported(window, tmp_path):
    from PySide6.QtWidgets import QMessageBox

    page = window.page("models")
    assert page.open_folder(str(tmp_path / "missing")) is False
    box = page.error_box
    assert isinstance(box, QMessageBox) and "no such folder" in box.informativeText()
    box.close()


def test_memory_estimate_against_free_memory(window, qtbot, stories_dir):
    page = window.page("models")
    qtbot.waitUntil(lambda: bool(window.ctx.engine_host.devices), timeout=WAIT_MS)
    page.open_folder(str(stories_dir))
    text = page.estimate.text()
    assert "Needs about" in text and "free on cpu" in text
    page.dtype_box.setCurrentText("bfloat16")
    assert page.estimate.text() != text  # recomputed for the dtype


def test_load_with_progress_then_unload(window, qtbot, stories_dir):
    page = window.page("models")
    page.open_folder(str(stories_dir))
    page.name_edit.setText("tiny")
    page.dtype_box.setCurrentText("float32")
    progress = []
    window.ctx.engine_host.load_progress.connect(lambda j, f, s: progress.append(f))
    page.load_btn.click()
    assert page.cancel_btn.isEnabled() and not page.load_btn.isEnabled()
    qtbot.waitUntil(lambda: page.table.rowCount() == 1, timeout=WAIT_MS)
    assert page.table.item(0, 0).text() == "tiny"
    assert page.table.item(0, 3).text() == "float"
    # the row says which runner and kernels serve it: float32 decode steps as one native call
    # where the kernels build, else PyTorch (stories' 64-wide products are PyTorch's either way)
    from npu_console.engine.kernels import native
    assert page.table.item(0, 4).toolTip() == (
        "batched runner; decode steps: one native call for all layers" if native.available()
        else "batched runner; float decode products on PyTorch")
    assert progress and max(progress) >= 0.9
    assert "tiny" in window.model_label.text() and "float32" in window.model_label.text()
    # recent list remembers the folder
    assert page.recent.findData(str(stories_dir)) >= 0
    page.table.selectRow(0)
    page.unload_btn.click()
    qtbot.waitUntil(lambda: page.table.rowCount() == 0, timeout=WAIT_MS)
    assert window.model_label.text() == "no model"


def test_cancel_a_load(window, qtbot, stories_dir, monkeypatch):
    from support.loading import held_loads

    page = window.page("models")
    page.open_folder(str(stories_dir))
    page.name_edit.setText("cancelled-one")
    host = window.ctx.engine_host
    release = held_loads(monkeypatch)  # the load cannot finish before the cancel lands
    job = host.load(stories_dir, name="cancelled-one")
    qtbot.waitUntil(lambda: page.job is not None and page.job.job_id == job.job_id,
                    timeout=WAIT_MS)
    page.cancel_btn.click()  # as the user cancels it
    qtbot.waitUntil(lambda: page.job is None, timeout=WAIT_MS)
    release.set()
    assert "cancelled-one" not in [m.name for m in host.models()]
    assert page.status.text() == "Loading cancelled."
    assert page.load_btn.isEnabled() and not page.cancel_btn.isEnabled()


def test_a_gguf_opens_from_its_header_and_its_conversion_can_be_cancelled(window, qtbot,
                                                                         tmp_path, monkeypatch,
                                                                         smollm2_gguf):
    monkeypatch.setenv("NPU_CONSOLE_CACHE", str(tmp_path))  # nothing converted yet
    page = window.page("models")
    assert page.open_folder(str(smollm2_gguf))
    assert page.fields["arch"].text() == "LlamaForCausalLM"
    assert page.fields["ctx"].text() == "8,192" and page.fields["layers"].text() == "30"
    assert "Q4_1" in page.fields["ckpt"].text() and "GGUF" in page.fields["ckpt"].text()
    assert page.name_edit.text() == smollm2_gguf.stem
    stages = []
    window.ctx.engine_host.load_progress.connect(lambda j, f, s: stages.append(s))
    page.load_btn.click()
    # the child process imports torch and transformers before its first stage: ~10 s on a
    # quiet 2-core machine, 74 s seen under a load average of 10
    qtbot.waitUntil(lambda: "reading the tokenizer" in stages, timeout=4 * WAIT_MS)
    page.cancel_btn.click()
    qtbot.waitUntil(lambda: page.job is None, timeout=WAIT_MS)
    assert "cancel" in page.status.text().lower()
    assert smollm2_gguf.stem not in [m.name for m in window.ctx.engine_host.models()]
    entries = [p for p in (tmp_path / "gguf").iterdir() if not p.name.endswith(".header.json")]
    assert entries == []  # the child was killed and its half-written folder removed


def test_the_row_tooltip_names_the_int8_kernels():
    """An INT8 variant's row says which instructions run its int8 products (native-avx512-vnni
    on a VNNI CPU, native-avx2 elsewhere, fbgemm without the native kernels)."""
    import dataclasses

    from npu_console.console.pages.models import kernels_tip
    from npu_console.engine.runtime.types import ModelInfo

    base = ModelInfo(name="m", path="/m", architecture="LlamaForCausalLM", dtype="float32",
                     quantization=None, device="cpu", max_context=8, num_parameters=1,
                     weight_bytes=1, kv_bytes=1, path_kind="batched", created=0.0,
                     decode_step="native")
    assert kernels_tip(base) == "batched runner; decode steps: one native call for all layers"
    q = dataclasses.replace(base, quantization="w8a8-dynamic", int8_kernels="native-avx512-vnni")
    assert kernels_tip(q).endswith("; int8 products on native-avx512-vnni")
    torch_q = dataclasses.replace(q, decode_step="torch", int8_kernels="fbgemm")
    assert kernels_tip(torch_q) == ("batched runner; float decode products on PyTorch; "
                                    "int8 products on fbgemm")


def test_a_gguf_launched_in_int8_opens_in_int8_and_float_is_one_choice_away(qapp, qtbot, tmp_path,
                                                                            demo_model_dir,
                                                                            monkeypatch):
    """`gui --model X.gguf --load-as int8` (what `make run` does): the model loads as W8A16
    straight from the file, the Weights box shows it and the status bar says how to get float;
    choosing Float and loading again gives a float model. A Hugging Face folder offers no INT8
    here (the Quantize page makes one)."""
    from npu_console.engine import atomic_files
    from support.gguf import write_model_gguf
    from support.gui import console_window
    from support.models import tiny

    gguf_path = write_model_gguf(tiny("llama").model, tmp_path / "tiny.gguf", "Q8_0")
    # damaged files that earlier tests in this process set aside would be this window's first
    # status message: a fresh process (what a user launches) has reported none
    monkeypatch.setattr(atomic_files, "_reported", [])
    with console_window(qapp, tmp_path / "home", "models", model=str(gguf_path),
                        load_as="int8") as win:
        host, page = win.ctx.engine_host, win.page("models")
        qtbot.waitUntil(lambda: len(host.models()) == 1, timeout=WAIT_MS)
        assert host.models()[0].quantization == "w8a16"
        assert page.weights_box.currentData() == "int8"
        assert "INT8" in win.statusBar().currentMessage()
        qtbot.waitUntil(lambda: "INT8" in win.model_badge.text(), timeout=10_000)
        page.weights_box.setCurrentIndex(page.weights_box.findData("float"))
        page.name_edit.setText("tiny-float")
        page.start_load()
        qtbot.waitUntil(lambda: len(host.models()) == 2, timeout=WAIT_MS)
        floats = [m for m in host.models() if m.name == "tiny-float"]
        assert floats and floats[0].quantization is None
        # the KV cache as the engine holds it, and as the plan counted it: fp16 on this CPU
        from npu_console.engine.kernels.native import available

        kv = "float16" if available() else "float32"
        # the table follows the engine's model list on a signal: wait for both rows
        qtbot.waitUntil(lambda: page.table.rowCount() == 2
                        and all(page.table.item(r, 7) is not None for r in range(2)),
                        timeout=10_000)
        assert all(page.table.item(r, 7).text().endswith(f" ({kv})") for r in range(2))
        assert f"tokens, {kv})" in page.estimate.text()
        assert page.open_folder(str(demo_model_dir))
        assert page.weights_box.currentData() == "float"
        assert not page.weights_box.model().item(1).isEnabled()
