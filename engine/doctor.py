"""Environment checklist an engineer runs first: each check says what it found and, when it
fails, the one-line fix (in the spirit of Ascend's deployment troubleshooting guides)."""

from __future__ import annotations

import glob
import importlib.metadata as md
import os
import platform
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

ASCEND_ROOT = Path(os.environ.get("ASCEND_ROOT", "/usr/local/Ascend"))


@dataclass(frozen=True)
class Check:
    name: str
    status: str  # "ok", "warn", "fail", "info"
    detail: str
    fix: str | None = None


def _version(dist: str) -> str | None:
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return None


def check_python() -> Check:
    v = sys.version_info
    if v < (3, 10):
        return Check("python", "fail", platform.python_version(), "use Python 3.10 or newer")
    return Check("python", "ok", f"{platform.python_version()} ({sys.executable})")


def check_torch() -> list[Check]:
    out = []
    tv = _version("torch")
    if tv is None:
        return [Check("torch", "fail", "not installed", "pip install torch==2.13.0 (CPU build; see README)")]
    out.append(Check("torch", "ok", tv))
    nv = _version("torch-npu") or _version("torch_npu")
    if nv is None:
        out.append(Check("torch_npu", "info", "not installed (needed only for Ascend NPUs)",
                         "on an Ascend server: pip install torch-npu==<torch version> (see docs/packaging.md)"))
        return out
    base_t = tv.split("+")[0]
    base_n = nv.split(".post")[0].split("+")[0]
    if base_t != base_n:
        out.append(Check("torch_npu", "fail", f"{nv} does not match torch {tv}",
                         f"torch_npu {base_n} needs torch {base_n}: pip install torch=={base_n}"))
    else:
        out.append(Check("torch_npu", "ok", f"{nv} (matches torch {tv})"))
    from .devices import npu_import_error

    err = npu_import_error()
    if err:
        fix = "source /usr/local/Ascend/ascend-toolkit/set_env.sh (CANN not on the library path)" \
            if "lib" in err and ".so" in err else "reinstall torch_npu for this torch and CANN version"
        out.append(Check("torch_npu import", "fail", err, fix))
    return out


def _read_first(paths: list[str], key: str) -> str | None:
    for pattern in paths:
        for p in glob.glob(pattern):
            try:
                for line in Path(p).read_text(errors="replace").splitlines():
                    if line.strip().startswith(key):
                        return line.split("=", 1)[-1].split(":", 1)[-1].strip()
            except OSError:
                continue
    return None


def check_ascend_driver() -> list[Check]:
    out = []
    devs = sorted(glob.glob("/dev/davinci[0-9]*"))
    driver = _read_first([str(ASCEND_ROOT / "driver" / "version.info")], "Version")
    if not devs and driver is None:
        out.append(Check("ascend driver", "info",
                         "no Ascend NPU: no /dev/davinci* devices and no driver under "
                         f"{ASCEND_ROOT}/driver (this machine has no NPU, or its driver is not installed)",
                         "on an Ascend server: install the NPU driver and firmware, then reboot or "
                         "reload the driver"))
        return out
    if not devs:
        out.append(Check("ascend driver", "fail", f"driver {driver} installed but no /dev/davinci* devices",
                         "the driver is not loaded: check `dmesg | grep -i davinci` and reinstall the driver"))
    else:
        out.append(Check("ascend driver", "ok", f"driver {driver or 'unknown version'}, {len(devs)} device node(s)"))
        if not os.access(devs[0], os.R_OK | os.W_OK):
            out.append(Check("device access", "fail", f"no read/write access to {devs[0]}",
                             "add this user to the HwHiAiUser group: sudo usermod -aG HwHiAiUser $USER"))
    return out


def check_cann() -> Check:
    ver = _read_first([str(ASCEND_ROOT / "ascend-toolkit" / "latest" / "*" / "ascend_toolkit_install.info"),
                       str(ASCEND_ROOT / "ascend-toolkit" / "latest" / "version.cfg")], "version")
    home = os.environ.get("ASCEND_HOME_PATH") or os.environ.get("ASCEND_TOOLKIT_HOME")
    if ver is None and home is None:
        return Check("CANN toolkit", "info", f"not found under {ASCEND_ROOT}/ascend-toolkit",
                     "on an Ascend server: install CANN and source /usr/local/Ascend/ascend-toolkit/set_env.sh")
    if home is None:
        return Check("CANN toolkit", "warn", f"{ver} installed but its environment is not set",
                     "source /usr/local/Ascend/ascend-toolkit/set_env.sh")
    return Check("CANN toolkit", "ok", f"{ver or 'unknown version'} at {home}")


def check_npu_smi(binary: str = "npu-smi", timeout: float = 10.0) -> Check:
    path = shutil.which(binary)
    if path is None:
        return Check("npu-smi", "info", "not on PATH (no Ascend driver tools here)",
                     "on an Ascend server: export PATH=$PATH:/usr/local/sbin or install the driver's tools")
    try:
        res = subprocess.run([path, "info"], capture_output=True, text=True, timeout=timeout,
                             check=False)
    except subprocess.TimeoutExpired:
        return Check("npu-smi", "fail", f"`npu-smi info` did not answer within {timeout:.0f} s",
                     "the driver may be hung: check `dmesg`, then restart the driver or the host")
    except OSError as exc:
        return Check("npu-smi", "fail", f"cannot run {path}: {exc}", "check the file's permissions")
    if res.returncode != 0:
        first = (res.stdout + res.stderr).strip().splitlines()
        return Check("npu-smi", "fail", f"exit code {res.returncode}: {first[0] if first else 'no output'}",
                     "device not initialised or busy: check the driver and other processes using it")
    return Check("npu-smi", "ok", f"{path} answers")


def check_nvidia() -> Check:
    if shutil.which("nvidia-smi") is None and _version("nvidia-ml-py") is None:
        return Check("NVIDIA", "info", "no nvidia-smi and no NVML bindings (no NVIDIA GPU expected)")
    try:
        import pynvml

        pynvml.nvmlInit()
        n = pynvml.nvmlDeviceGetCount()
        drv = pynvml.nvmlSystemGetDriverVersion()
        return Check("NVIDIA", "ok", f"driver {drv}, {n} GPU(s)")
    except Exception as exc:  # noqa: BLE001 - NVML raises its own error classes
        return Check("NVIDIA", "warn", f"NVML not usable: {exc}",
                     "install the NVIDIA driver, or pip install npu-console[cuda]")


def check_devices() -> list[Check]:
    from .devices import list_devices
    from .models.memory import format_bytes

    out = []
    for d in list_devices():
        out.append(Check(f"device {d.torch_device}", "ok",
                         f"{d.name}: {format_bytes(d.free_memory)} free of {format_bytes(d.total_memory)}, "
                         f"dtypes {', '.join(d.dtypes)}"))
    if len(out) == 1:
        out.append(Check("accelerator", "info", "none found: the engine runs on the CPU"))
    return out


def check_cpu_kernels() -> Check:
    """Which CPU kernels decode steps use (fp32 and INT8 products); builds the native ones if
    needed."""
    from .kernels import native, packed

    info = native.build()
    flags = native.cpu_flags()
    if native.is_aarch64():
        isa = ("aarch64 NEON + dotprod" if "asimddp" in flags else
               "aarch64 NEON" if "asimd" in flags else "aarch64")
    else:
        isa = ("AVX512-VNNI" if "avx512_vnni" in flags else
               ("AVX2" if "avx2" in flags else "no AVX2"))
    if info.path is not None:
        int8 = {
            "avx512-vnni": ("W8A8 and W8A16 (per-channel or per-group scales) on AVX512-VNNI, "
                            "served W8A16 packed 16 channels per register"
                            if packed.available() else
                            "W8A8 and per-channel W8A16 on AVX512-VNNI, per-group W8A16 on AVX2 "
                            "(NPU_CONSOLE_PACKED_W8A16=0)") + ", fp32 on AVX2",
            "neon-dotprod": "W8A8 on sdot (dotprod), W8A16 (per-channel or per-group scales) "
                            "and fp32 on NEON",
            "neon": "fp32, W8A16 (per-channel or per-group scales) and W8A8 on NEON",
        }.get(native.int8_isa(), "fp32, W8A16 (per-channel or per-group scales) and W8A8 on AVX2")
        return Check("cpu kernels", "ok",
                     f"native kernels: {int8}, on this {isa} CPU ({info.reason}: {info.path})")
    fix = ("install a C compiler (apt-get install gcc libc6-dev) for faster fp32 and INT8 decode"
           if "compiler" in info.reason else None)
    return Check("cpu kernels", "warn" if fix else "info",
                 f"PyTorch's own on this {isa} CPU: W8A8 on fbgemm ({info.reason})", fix)


def check_gguf_cache() -> Check:
    """The GGUF conversion cache: its size against the limit that eviction keeps, and whether
    it is private to this user (it holds weights that get loaded)."""
    from .models import gguf
    from .models.gguf_convert import CACHE_ENV, cache_entries, cache_limit_bytes

    problem = gguf.cache_problem()
    if problem:
        return Check("gguf cache", "fail", f"refused: {problem}",
                     f"remove or chown {gguf.cache_root()} (it must be yours, mode 0700)")
    entries = cache_entries()
    used = sum(size for _, size, _ in entries) / 2**30
    return Check("gguf cache", "info",
                 f"{len(entries)} converted model(s), {used:.1f} GiB of "
                 f"{cache_limit_bytes() / 2**30:.0f} GiB ({CACHE_ENV}) at {gguf.cache_root()}")


def check_disk(path: Path) -> Check:
    usage = shutil.disk_usage(path)
    gib = usage.free / 2**30
    status = "ok" if gib >= 5 else ("warn" if gib >= 1 else "fail")
    fix = None if status == "ok" else "free disk space: models and INT8 exports need several GB"
    return Check("disk", status, f"{gib:.1f} GiB free at {path}", fix)


def check_env() -> Check:
    keys = ["ASCEND_RT_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES", "TORCH_DEVICE_BACKEND_AUTOLOAD",
            "OMP_NUM_THREADS", "PYTORCH_NPU_ALLOC_CONF", "TASK_QUEUE_ENABLE"]
    shown = [f"{k}={os.environ[k]}" for k in keys if k in os.environ]
    return Check("environment", "info", ", ".join(shown) if shown else "no device variables set")


def check_demo_model() -> Check:
    from .models.folder import inspect_model_folder
    from .paths import DEMO_MODEL_DIR

    report = inspect_model_folder(DEMO_MODEL_DIR)
    if not report.ok:
        return Check("demo model", "fail", str(report.problems[0]),
                     "reinstall npu-console, or rebuild it: packaging/train_demo_model.sh")
    return Check("demo model", "ok", f"{report.summary()} at {DEMO_MODEL_DIR}")


def check_model(path: str | Path) -> Check:
    """A model the user brings: whether it loads, and whether it runs batched (our family
    modules) or one request at a time through transformers."""
    from .models.folder import inspect_model_folder

    report = inspect_model_folder(Path(path))
    if not report.ok:
        return Check("model", "fail", str(report.problems[0]))
    if report.unbatched_reason:
        return Check("model", "warn", f"{report.summary()}: {report.unbatched_reason}",
                     "it loads and runs through transformers, one request at a time; "
                     "batching and the native kernels need a family module "
                     "(engine/runtime/families)")
    return Check("model", "ok", f"{report.summary()}: batched")


def check_memory_plan(path: str | Path, context: int | None = None, max_seqs: int = 1) -> Check:
    """The memory plan of a model before any work: weights in each form it can load in (float
    in the device's default dtype; a GGUF also as INT8), the KV cache for the context x batch,
    and the headroom against what the device has free."""
    from .devices import default_dtype, get_device
    from .models.folder import inspect_model_folder
    from .models.memory import GGUF_INT8, estimate_memory, plan_text, planned_kv_dtype

    report = inspect_model_folder(Path(path))
    if not report.ok:
        return Check("memory plan", "info", "no plan: the model does not check out")
    dev = get_device("auto")
    dtype = default_dtype(dev)
    ctx = context or min(report.max_context or 2048, 4096)
    kv = planned_kv_dtype(dtype, dev.torch_device)
    forms = [(f"as {dtype}", None if not report.quantization else report.quantization)]
    if report.int8_bytes is not None:
        forms.append(("as int8", GGUF_INT8))
    lines, fits = [], []
    for form, quant in forms:
        est = estimate_memory(report, dtype, context=ctx, max_seqs=max_seqs, quantization=quant,
                              kv_dtype=kv)
        lines.append(plan_text(est, dev.free_memory, dev.label, form, ctx, max_seqs, kv))
        fits.append(est.total_bytes <= dev.free_memory)
    detail = "; ".join(lines)
    if fits[0]:
        return Check("memory plan", "ok", detail)
    if any(fits):
        return Check("memory plan", "warn", detail, "load it with --load-as int8")
    return Check("memory plan", "fail", detail, "a shorter context, a smaller model, or more "
                                                "memory")


def check_gui_extra() -> Check:
    """Whether the `gui` extra (PySide6, pyqtgraph, qasync) is installed; a headless install
    without it is normal (serve, generate, smi, quantize, eval and bench need no Qt)."""
    from .gui_libs import GUI_MODULES, missing_gui_modules

    missing = missing_gui_modules()
    if missing:
        return Check("gui extra", "info",
                     f"not installed (no {', '.join(missing)}): a headless install; serve, "
                     "generate, chat, smi, quantize, eval and bench work, `npu-console gui` "
                     "does not", "pip install 'npu-console[gui]' for the desktop console")
    dists = {"PySide6": ("PySide6-Essentials", "PySide6"), "pyqtgraph": ("pyqtgraph",),
             "qasync": ("qasync",)}
    found = []
    for module in GUI_MODULES:
        version = next((v for v in map(_version, dists[module]) if v), None)
        found.append(f"{module} {version or '(version unknown)'}")
    return Check("gui extra", "ok", ", ".join(found))


def check_display() -> Check:
    if os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"):
        return Check("display", "ok", "a display is available for the console")
    if os.environ.get("QT_QPA_PLATFORM"):
        return Check("display", "info", f"QT_QPA_PLATFORM={os.environ['QT_QPA_PLATFORM']}")
    return Check("display", "info", "no display: the GUI needs one",
                 "run `xvfb-run npu-console gui`, use ssh -X, or `npu-console serve` for the headless API")


def check_xcb_libraries(os_release: str = "/etc/os-release") -> Check:
    """The system libraries Qt's xcb plugin needs (a missing one aborts `gui` on an X
    display), with the distribution's install line."""
    from . import gui_libs

    missing = gui_libs.missing_xcb_libraries()
    if missing is None:
        return Check("qt xcb libs", "info", "no PySide6 here: nothing to check")
    if not missing:
        return Check("qt xcb libs", "ok", "every library Qt's xcb plugin needs is installed")
    distro = gui_libs.detect_distro(gui_libs.read_os_release(os_release))
    fix = gui_libs.install_command(missing, distro) or (
        "install the packages that provide them with the system's package manager")
    return Check("qt xcb libs", "warn",
                 f"missing {', '.join(missing)}: `gui` on an X display cannot start (offscreen "
                 "screenshots and `serve` work)", fix)


def run_checks(npu_smi: str = "npu-smi", model: str | None = None) -> list[Check]:
    from .paths import state_dir

    checks = [check_python()]
    checks += check_torch()
    checks += check_ascend_driver()
    checks.append(check_cann())
    checks.append(check_npu_smi(npu_smi))
    checks.append(check_nvidia())
    checks += check_devices()
    checks.append(check_cpu_kernels())
    checks.append(check_gguf_cache())
    checks.append(check_env())
    checks.append(check_disk(state_dir()))
    checks.append(check_demo_model())
    if model is not None:
        checks.append(check_model(model))
        checks.append(check_memory_plan(model))
    checks.append(check_gui_extra())
    checks.append(check_xcb_libraries())
    checks.append(check_display())
    return checks


def as_dict(checks: list[Check]) -> dict:
    return {"ok": not any(c.status == "fail" for c in checks), "checks": [asdict(c) for c in checks]}
