"""The native kernels' aarch64 builds (Kunpeng 920 hosts of Ascend servers), cross-compiled here
with Debian's aarch64 gcc, with the flags native.py passes on such a CPU, and run under
qemu-user: the NEON build on a Cortex-A53 (Armv8.0, no dot-product extension) and the dotprod
build on a Neoverse-N1 (Armv8.2 with it, as Kunpeng 920). Every product (fp32, W8A16 per
channel and per group, W8A8 per token and static, the int8 head's int16 rows, RMSNorm, weight
sums) and two whole decode steps of a mixed-precision model give the AVX2 build's floats bit
for bit (tests/support/kernel_harness.c drives all three builds on the same inputs), and W8A8
equals exact integer math. Speed is not measured: qemu says nothing about a real core's.

Needs: apt-get install gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user
"""

from __future__ import annotations

import shutil
import struct
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch
from npu_console.engine.kernels import native, qmath

pytestmark = pytest.mark.dist

ROOT = Path(__file__).resolve().parent.parent
HARNESS = ROOT / "tests" / "support" / "kernel_harness.c"
KERNELS = native.SOURCE.parent
CROSS = "aarch64-linux-gnu-gcc"
QEMU = "qemu-aarch64"
OPS = {"f32": 0, "w8a16": 1, "w8a8": 2, "tok": 3, "rmsnorm": 4, "rowsums": 5}
# qemu CPU models: Armv8.0 without the dot-product extension, and Armv8.2 with it
PLAIN_CPU, DOTPROD_CPU = "cortex-a53", "neoverse-n1"


def _compile(cc: str, flags: tuple[str, ...], out: Path, *extra: str) -> Path:
    # the kernels' own flags, for an executable instead of a shared object
    flags = tuple(f for f in flags if f not in ("-shared", "-fPIC"))
    cmd = [cc, *flags, *extra, f"-I{KERNELS}", "-o", str(out), str(HARNESS), "-lm"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


@pytest.fixture(scope="module")
def builds(tmp_path_factory) -> dict[str, list[str]]:
    """name -> the command that runs that build: the AVX2 reference here, both aarch64 builds
    under qemu on their CPU models."""
    missing = [t for t in (CROSS, QEMU, "gcc") if shutil.which(t) is None]
    if missing:
        pytest.fail(f"{', '.join(missing)} missing: apt-get install gcc-aarch64-linux-gnu "
                    "libc6-dev-arm64-cross qemu-user")
    d = tmp_path_factory.mktemp("harness")
    # what native.py builds on an AVX2 CPU (the reference), on a Kunpeng 920, on an Armv8.0 core
    x86_flags = native.build_flags("x86_64", {"avx2", "fma"})
    avx2 = _compile("gcc", tuple(f.replace("-march=native", "-march=haswell") for f in x86_flags),
                    d / "avx2", "-mno-avx512f")
    dot_flags = native.build_flags("aarch64", {"fp", "asimd", "asimddp"})
    plain_flags = native.build_flags("aarch64", {"fp", "asimd"})
    assert "-march=armv8.2-a+dotprod" in dot_flags and "-march=armv8-a" in plain_flags
    # static: qemu-user then needs no aarch64 sysroot at run time
    dot = _compile(CROSS, dot_flags, d / "a64-dotprod", "-static")
    plain = _compile(CROSS, plain_flags, d / "a64-neon", "-static")
    return {"avx2": [str(avx2)],
            "neon-dotprod": [QEMU, "-cpu", DOTPROD_CPU, str(dot)],
            "neon": [QEMU, "-cpu", PLAIN_CPU, str(plain)],
            "dotprod-on-plain-cpu": [QEMU, "-cpu", PLAIN_CPU, str(dot)]}


def _run(cmd: list[str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*cmd, *args], capture_output=True, text=True, timeout=600,
                          check=False)


# ---------------------------------------------------------------- the product cases


def _cases() -> list[dict]:
    """Decode (1-4 rows: streamed weights) and prefill (5+: tiles) row counts, inputs with and
    without a partial last vector, per-group scales of 1, 2, 3 and 4 blocks, 1 and 2 threads,
    and rows with NaN, infinity, zeros and tiny values."""
    shapes = [(1, 5, 16), (2, 3, 64), (3, 7, 100), (4, 9, 33), (5, 6, 96), (9, 11, 130),
              (17, 5, 128)]
    out = []
    for m, n, k in shapes:
        for nt in (1, 2):
            out.append({"op": "f32", "m": m, "n": n, "k": k, "nt": nt, "bias": True})
            out.append({"op": "w8a16", "m": m, "n": n, "k": k, "nt": nt})
            out.append({"op": "w8a8", "m": m, "n": n, "k": k, "nt": nt, "per_token": 1})
            out.append({"op": "w8a8", "m": m, "n": n, "k": k, "nt": nt, "per_token": 0,
                        "arg": 0.05})
            out.append({"op": "tok", "m": m, "n": n, "k": k, "nt": nt})
        out.append({"op": "rmsnorm", "m": m, "n": 1, "k": k, "nt": 1, "arg": 1e-5})
        out.append({"op": "rowsums", "m": 1, "n": n, "k": k, "nt": 1})
    for group, k in ((32, 96), (64, 128), (96, 192), (128, 256)):
        for m in (1, 3, 6):
            out.append({"op": "w8a16", "m": m, "n": 7, "k": k, "nt": 2, "group": group})
    for op in ("w8a16", "w8a8", "tok", "f32"):
        out.append({"op": op, "m": 3, "n": 6, "k": 96, "nt": 1, "special": True, "per_token": 1})
    return out


def _inputs(case: dict, gen: torch.Generator) -> dict[str, torch.Tensor]:
    m, n, k = case["m"], case["n"], case["k"]
    x = torch.randn(m, k, generator=gen) * 3
    if case.get("special"):
        x[0, 3] = float("nan")  # its block (W8A16) and row become NaN, nothing else
        x[1, 40:72] = 0.0  # an all-zero block
        x[1, 5] = float("inf")
        x[2, :32] *= 1e-36  # a block below the smallest block scale
    inp = {"x": x}
    if case["op"] in ("f32", "rmsnorm"):
        inp["w"] = torch.randn(n, k, generator=gen) * 0.3
    else:
        inp["w"] = torch.randint(-127, 128, (n, k), generator=gen, dtype=torch.int8)
    if case["op"] in ("w8a16", "w8a8", "tok"):
        group = case.get("group", 0)
        shape = (n, k // group) if group else (n,)
        inp["scale"] = torch.rand(shape, generator=gen) * 0.01 + 1e-3
    if case.get("bias"):
        inp["bias"] = torch.randn(n, generator=gen)
    return inp


def _write_cases(path: Path, cases: list[dict]) -> list[dict]:
    gen = torch.Generator().manual_seed(38)
    with path.open("wb") as f:
        for case in cases:
            inp = case["inputs"] = _inputs(case, gen)
            f.write(struct.pack("<8qd", OPS[case["op"]], case["m"], case["n"], case["k"],
                                case.get("group", 0), case.get("per_token", 1), case["nt"],
                                int("bias" in inp), case.get("arg", 0.0)))
            for key in ("x", "w", "scale", "bias"):
                if key in inp:
                    f.write(inp[key].contiguous().numpy().tobytes())
    return cases


def _outputs(data: bytes, cases: list[dict]) -> list[tuple[int, bytes]]:
    """Per case: (return code, the output's raw bytes)."""
    out, at = [], 0
    for case in cases:
        size = {"rmsnorm": case["m"] * case["k"], "rowsums": case["n"]}.get(
            case["op"], case["m"] * case["n"]) * 4
        (rc,) = struct.unpack_from("<i", data, at)
        out.append((rc, data[at + 4: at + 4 + size]))
        at += 4 + size
    assert at == len(data), (at, len(data))
    return out


@pytest.fixture(scope="module")
def products(builds, tmp_path_factory) -> tuple[list[dict], dict[str, list]]:
    d = tmp_path_factory.mktemp("products")
    cases = _write_cases(d / "in.bin", _cases())
    results = {}
    for name in ("avx2", "neon-dotprod", "neon"):
        res = _run(builds[name], "products", str(d / "in.bin"), str(d / f"{name}.out"))
        assert res.returncode == 0, (name, res.stderr[-2000:])
        results[name] = _outputs((d / f"{name}.out").read_bytes(), cases)
    return cases, results


# ---------------------------------------------------------------- tests


def test_each_build_names_its_int8_instructions(builds):
    for name in ("avx2", "neon-dotprod", "neon"):
        res = _run(builds[name], "isa")
        assert res.returncode == 0 and res.stdout.strip() == name, (name, res.stderr)


def test_the_dotprod_build_runs_sdot_which_an_armv8_0_core_lacks(builds, tmp_path):
    """sdot really is on the W8A8 path: the dotprod build dies of an illegal instruction on a
    core without the extension (which is why native.py picks the -march from /proc/cpuinfo),
    the NEON build runs there."""
    cases = _write_cases(tmp_path / "in.bin", [{"op": "w8a8", "m": 2, "n": 4, "k": 64, "nt": 1}])
    bad = _run(builds["dotprod-on-plain-cpu"], "products", str(tmp_path / "in.bin"),
               str(tmp_path / "out"))
    assert bad.returncode != 0 and "Illegal instruction" in bad.stderr, bad.stderr[-500:]
    ok = _run(builds["neon"], "products", str(tmp_path / "in.bin"), str(tmp_path / "out"))
    assert ok.returncode == 0 and len(_outputs((tmp_path / "out").read_bytes(), cases)) == 1
    dis = subprocess.run(["aarch64-linux-gnu-objdump", "-d", builds["neon"][-1]],
                         capture_output=True, text=True, check=False)
    assert dis.returncode == 0 and "\tsdot\t" not in dis.stdout


@pytest.mark.parametrize("build", ["neon-dotprod", "neon"])
def test_every_product_gives_the_avx2_builds_floats_bit_for_bit(products, build):
    cases, results = products
    assert len(results[build]) == len(cases) >= 100
    for case, want, got in zip(cases, results["avx2"], results[build], strict=True):
        label = {k: v for k, v in case.items() if k != "inputs"}
        assert got[0] == want[0] == 0, label
        assert got[1] == want[1], label


def test_w8a8_on_aarch64_equals_exact_integer_math(products):
    """The dotprod build's W8A8 against the reference backend's quantization (qmath) and an
    exact integer product, then the kernels' two fp32 multiplies: equal, not close."""
    cases, results = products
    checked = 0
    for case, (rc, raw) in zip(cases, results["neon-dotprod"], strict=True):
        if case["op"] != "w8a8" or case.get("special"):
            continue
        inp = case["inputs"]
        x, w, s = inp["x"], inp["w"], inp["scale"]
        sx = (qmath.per_token_scale(x) if case["per_token"]
              else torch.full((x.shape[0], 1), float(np.float32(case["arg"]))))
        q = qmath.quantize_act(x, sx).to(torch.int64)
        acc = (q @ w.to(torch.int64).t()).to(torch.float32)  # exact: |acc| < 2^24
        want = acc * sx * s  # fp32, the kernels' order: (sum * sx) * sw
        got = torch.from_numpy(np.frombuffer(raw, dtype=np.float32).reshape(want.shape).copy())
        assert rc == 0 and torch.equal(got, want), {k: v for k, v in case.items()
                                                    if k != "inputs"}
        checked += 1
    assert checked >= 20


def test_special_values_stay_where_the_avx2_build_puts_them(products):
    """NaN and infinity blocks (W8A16: NaN outputs for their row only), zero and tiny blocks:
    the NEON translation keeps x86's max / min rules, so these agree too (and are finite
    elsewhere)."""
    cases, results = products
    for case, (_, raw) in zip(cases, results["neon"], strict=True):
        if case.get("special") and case["op"] == "w8a16":
            y = np.frombuffer(raw, dtype=np.float32).reshape(case["m"], case["n"])
            assert np.isnan(y[0]).all() and np.isnan(y[1]).all() and np.isfinite(y[2]).all()


def test_two_decode_steps_of_a_mixed_model_match_bit_for_bit(builds, tmp_path):
    """npc_decode_layers end to end (RMSNorm, q/k norms, partial rotary with two tables, the KV
    write, windowed and full attention with soft-capped scores and its exp, SiLU then GELU,
    sandwich norms, residuals; fp32, W8A16 and W8A8 layers mixed; a turned down_proj input):
    hidden states and KV caches of two steps, three sequences, two threads."""
    out = {}
    for name in ("avx2", "neon-dotprod", "neon"):
        res = _run(builds[name], "decode", str(tmp_path / name))
        assert res.returncode == 0, (name, res.stderr[-2000:])
        out[name] = (tmp_path / name).read_bytes()
    head = np.frombuffer(out["avx2"][:4 + 3 * 64 * 4], dtype=np.float32)
    assert np.isfinite(head[1:]).all() and np.abs(head[1:]).max() > 0
    assert out["neon-dotprod"] == out["avx2"]
    assert out["neon"] == out["avx2"]
