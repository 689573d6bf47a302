"""The engine on a CUDA device (marker `gpu`; skipped without one): device memory from
`torch.cuda.mem_get_info`, the INT8 kernels against the reference backend, greedy equality with
transformers (float and INT8 with an int8 head), all on the GPU. tests/device/gpu_check.sh runs
these with `-m gpu`; on a machine without CUDA they skip."""

from __future__ import annotations

import pytest
import torch

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")]


def test_cuda_device_memory_comes_from_mem_get_info():
    from npu_console.engine.devices import get_device, list_devices

    dev = get_device("cuda:0")
    free, total = torch.cuda.mem_get_info(0)
    assert dev.kind == "cuda" and dev.total_memory == total
    assert abs(dev.free_memory - free) < 2**30  # other allocations may come and go
    assert any(d.kind == "cuda" for d in list_devices())


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("method", ["w8a16", "w8a8-dynamic", "w8a8-static"])
def test_int8_kernels_match_the_reference_backend(method, dtype):
    import gpu_kernels

    for m, k, n, bias in gpu_kernels.SHAPES:
        case = gpu_kernels.compare(method, m, k, n, bias, dtype, "cuda")
        assert case["ok"], case


def test_int8_head_and_its_tied_embedding_run_on_cuda():
    import gpu_kernels

    case = gpu_kernels.head_case("cuda")
    assert case["ok"], case


@pytest.mark.parametrize("model", ["demo", "stories260K"])
def test_engine_greedy_equals_transformers_on_cuda(model, request):
    import gpu_parity
    from npu_console.engine.models import load_model

    folder = request.getfixturevalue("demo_model_dir" if model == "demo" else "stories_dir")
    loaded = load_model(folder, device="cuda", dtype="float32")
    assert next(loaded.model.parameters()).device.type == "cuda"
    res = gpu_parity.check(loaded, max_tokens=32)
    assert res["ok"], res


def test_int8_model_with_int8_head_keeps_greedy_equality_on_cuda(demo_model_dir):
    import gpu_parity
    from npu_console.engine.models import load_model
    from npu_console.engine.quant import QuantConfig, prepare_for_serving, quantize_model

    loaded = load_model(demo_model_dir, device="cuda", dtype="float32")
    quantize_model(loaded.model, QuantConfig(method="w8a8-dynamic", int8_head=True))
    prepare_for_serving(loaded.model)
    loaded.quantization = "w8a8-dynamic"
    res = gpu_parity.check(loaded, max_tokens=32)
    assert res["ok"], res
