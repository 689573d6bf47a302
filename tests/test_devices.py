from __future__ import annotations

import pytest
from npu_console.engine import devices


def test_cpu_is_always_listed_last():
    devs = devices.list_devices()
    assert devs[-1].kind == "cpu" and devs[-1].total_memory > devs[-1].free_memory > 0
    assert "float32" in devs[-1].dtypes


@pytest.mark.parametrize("soc,bf16", [("Ascend910B3", True), ("Ascend910_9392", True),
                                      ("Ascend310P3", False), ("Ascend910A", False)])
def test_npu_dtype_rules(soc, bf16):
    assert ("bfloat16" in devices.npu_dtypes(soc)) is bf16
    assert "float16" in devices.npu_dtypes(soc)


def test_get_device_resolves_and_refuses():
    assert devices.get_device("cpu").torch_device == "cpu"
    assert devices.get_device("auto") == devices.list_devices()[0]
    with pytest.raises(ValueError, match="not available"):
        devices.get_device("npu:7")


def test_timer_measures():
    import time

    with devices.Timer("cpu") as t:
        time.sleep(0.01)
    assert t.elapsed >= 0.01
