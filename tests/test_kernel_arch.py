"""Which native kernel build a CPU gets, and what doctor and /v1/models call it, on the CPUs
this machine is not: an aarch64 host with and without the dot-product extension (Kunpeng 920
has it). The feature lists are /proc/cpuinfo `Features` lines as those kernels print them;
only the CPU is stood in for (native.int8_isa of such a build, the flags): the aarch64 builds
themselves run under qemu in tests/test_kernels_aarch64.py."""

from __future__ import annotations

import pytest
import torch
from npu_console.engine import doctor
from npu_console.engine.kernels import cpu as cpu_kernels
from npu_console.engine.kernels import native
from npu_console.engine.quant.qlinear import QuantLinear

# /proc/cpuinfo `Features` of a Kunpeng 920 (TSV110, Armv8.2) and of a Cortex-A72 (Armv8.0)
KUNPENG_920 = {"fp", "asimd", "evtstrm", "aes", "pmull", "sha1", "sha2", "crc32", "atomics",
               "fphp", "asimdhp", "cpuid", "asimdrdm", "jscvt", "fcma", "dcpop", "asimddp",
               "asimdfhm", "ssbs"}
CORTEX_A72 = {"fp", "asimd", "evtstrm", "aes", "pmull", "sha1", "sha2", "crc32", "cpuid"}


def test_aarch64_builds_for_dotprod_where_cpuinfo_lists_asimddp(monkeypatch):
    monkeypatch.delenv(native.ARCH_ENV, raising=False)
    assert native.default_arch("aarch64", KUNPENG_920) == "armv8.2-a+dotprod"
    assert native.default_arch("aarch64", CORTEX_A72) == "armv8-a"
    assert native.default_arch("x86_64", {"avx2", "fma"}) == "native"
    assert "-march=armv8.2-a+dotprod" in native.build_flags("aarch64", KUNPENG_920)
    # the override builds the plain NEON kernels on a dotprod CPU
    monkeypatch.setenv(native.ARCH_ENV, "armv8-a")
    assert "-march=armv8-a" in native.build_flags("aarch64", KUNPENG_920)
    monkeypatch.setenv(native.ARCH_ENV, "armv8-a; rm -rf /")
    assert "-march=armv8.2-a+dotprod" in native.build_flags("aarch64", KUNPENG_920)


def test_aarch64_cpus_are_no_longer_turned_away(monkeypatch):
    monkeypatch.delenv(native.ENV_SWITCH, raising=False)
    assert native._unavailable_reason(KUNPENG_920, "aarch64") is None
    assert native._unavailable_reason(CORTEX_A72, "aarch64") is None
    assert native._unavailable_reason({"fp"}, "aarch64") == "the CPU lacks NEON (asimd)"
    assert "neither" in native._unavailable_reason(set(), "riscv64")
    assert native._unavailable_reason({"sse2"}, "x86_64") == "the CPU lacks AVX2/FMA"


@pytest.mark.parametrize("isa,method,grouped,want", [
    ("neon-dotprod", "w8a8-dynamic", False, "neon-dotprod"),
    ("neon-dotprod", "w8a8-static", False, "neon-dotprod"),
    ("neon-dotprod", "w8a16", False, "neon"),  # sdot takes int8 x int8 only
    ("neon-dotprod", "w8a16", True, "neon"),
    ("neon", "w8a8-dynamic", False, "neon"),
    ("avx512-vnni", "w8a16", False, "avx512-vnni"),
    ("avx512-vnni", "w8a16", True, "avx512-vnni"),  # on the packed layout
    ("avx2", "w8a8-dynamic", False, "avx2"),
])
def test_each_layer_names_the_instructions_that_run_it(monkeypatch, isa, method, grouped, want):
    monkeypatch.setattr(native, "int8_isa", lambda: isa)
    assert native.layer_isa(method, grouped) == want


def test_models_int8_kernels_name_the_aarch64_build(monkeypatch):
    """/v1/models' int8_kernels is each layer's kernel_name: native-neon-dotprod for W8A8 on a
    Kunpeng 920, native-neon for its W8A16 layers, as x86 says native-avx512-vnni / -avx2."""
    monkeypatch.setattr(native, "available", lambda: True)
    monkeypatch.setattr(native, "int8_isa", lambda: "neon-dotprod")
    backend = cpu_kernels.CpuBackend()
    lin = torch.nn.Linear(64, 8)
    assert backend.kernel_name(QuantLinear.from_linear(lin, "w8a8-dynamic")) == \
        "native-neon-dotprod"
    assert backend.kernel_name(QuantLinear.from_linear(lin, "w8a16")) == "native-neon"
    assert backend.kernel_name(QuantLinear.from_linear(lin, "w8a16", group_size=32)) == \
        "native-neon"


@pytest.mark.parametrize("features,isa,says", [
    (KUNPENG_920, "neon-dotprod", ("W8A8 on sdot (dotprod), W8A16 (per-channel or per-group "
                                  "scales) and fp32 on NEON, on this aarch64 NEON + dotprod CPU")),
    (CORTEX_A72, "neon", ("fp32, W8A16 (per-channel or per-group scales) and W8A8 on NEON, on "
                         "this aarch64 NEON CPU")),
])
def test_doctor_names_the_aarch64_kernels(monkeypatch, tmp_path, features, isa, says):
    so = tmp_path / "cpu_gemm-0.so"
    monkeypatch.setattr(native, "is_aarch64", lambda machine=None: True)
    monkeypatch.setattr(native, "cpu_flags", lambda: features)
    monkeypatch.setattr(native, "build", lambda: native.BuildInfo(so, "cached"))
    monkeypatch.setattr(native, "int8_isa", lambda: isa)
    check = doctor.check_cpu_kernels()
    assert check.status == "ok" and says in check.detail, check.detail


def test_a_build_past_its_time_stops_the_whole_compiler_not_just_the_driver(monkeypatch,
                                                                           tmp_path):
    """`cc` is a driver: cc1 and as run as its children. A timed-out build must stop them too,
    or a hung compile keeps a core busy for minutes after the product gave up on it."""
    import os
    import time

    pid_file = tmp_path / "cc1.pid"
    compiler = tmp_path / "cc"
    compiler.write_text(f"#!/bin/sh\nsleep 120 &\necho $! > {pid_file}\nwait\n")
    compiler.chmod(0o755)
    monkeypatch.setenv("CC", str(compiler))
    monkeypatch.setenv("NPU_CONSOLE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(native, "BUILD_TIMEOUT_S", 1.0)
    info = native.build()
    assert info.path is None and "timed out" in info.reason, info
    child = int(pid_file.read_text())
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        pytest.fail(f"the compiler's child {child} outlived the timed-out build")
