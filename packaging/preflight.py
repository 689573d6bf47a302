"""Check an offline server before installing a bundle, and say exactly what is missing.

Runs on the target machine with nothing but the standard library (it travels inside the bundle
next to install.sh and bundle.json). Exit status 0 when nothing blocks the install, 1 otherwise;
each check prints one line: `ok`, `warn` (works, but read this) or `MISSING` (blocks the install).

    python3.11 preflight.py [--bundle DIR] [--ascend-root DIR] [--prefix DIR] [--json]
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import json
import os
import platform
import re
import shutil
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import ascend_pairs  # sits next to this file, in the bundle and in packaging/

OK, WARN, MISSING = "ok", "warn", "MISSING"
# Where CANN lands: the classic toolkit layout, the 8.5+ `cann` layout, and per-user installs
CANN_ROOT_GLOBS = (
    "/usr/local/Ascend/ascend-toolkit/latest",
    "/usr/local/Ascend/cann",
    "/usr/local/Ascend/cann-*",
    "~/Ascend/ascend-toolkit/latest",
    "~/Ascend/cann",
)


@dataclass
class Check:
    status: str
    what: str
    detail: str


@dataclass
class CannInstall:
    version: str
    root: str
    source: str  # the file the version was read from


def read_cann_version(root: Path, machine: str) -> CannInstall | None:
    """CANN's version from its install records, or None when `root` holds no toolkit."""
    infos = [root / f"{machine}-linux" / "ascend_toolkit_install.info"]
    infos += sorted(Path(p) for p in glob.glob(str(root / "*" / "ascend_toolkit_install.info")))
    for info in infos:
        if info.is_file():
            m = re.search(r"^version=(\S+)", info.read_text(errors="replace"), re.MULTILINE)
            if m:
                return CannInstall(m.group(1), str(root), str(info))
    cfg = root / "version.cfg"
    if cfg.is_file():
        text = cfg.read_text(errors="replace")
        # running version when present, else the last entry of the installed list
        # (lines look like: toolkit_installed_version=[7.0.0.5.242:7.0.RC1][7.3.0.1.231:8.0.RC2])
        for key in ("toolkit_running_version", "toolkit_installed_version"):
            m = re.search(rf"^\s*{key}=(\[.*\])", text, re.MULTILINE)
            if m:
                entries = re.findall(r"\[[^:\]]*:([^\]]+)\]", m.group(1))
                if entries:
                    return CannInstall(entries[-1], str(root), str(cfg))
    return None


def find_cann(machine: str, explicit: str | None = None) -> tuple[CannInstall | None, list[str]]:
    """First toolkit found, and every place looked (for the message when there is none)."""
    if explicit:
        candidates = [explicit]
    else:
        candidates = [os.environ.get(v, "") for v in ("ASCEND_TOOLKIT_HOME", "ASCEND_HOME_PATH")]
        for pattern in CANN_ROOT_GLOBS:
            candidates += sorted(glob.glob(os.path.expanduser(pattern)), reverse=True)
    looked = []
    for cand in candidates:
        if not cand or cand in looked:
            continue
        looked.append(cand)
        found = read_cann_version(Path(cand), machine)
        if found:
            return found, looked
    return None, looked


def _glibc() -> tuple[int, int] | None:
    try:
        name, version = os.confstr("CS_GNU_LIBC_VERSION").split()
    except (ValueError, OSError, AttributeError):
        return None
    nums = version.split(".")
    return (int(nums[0]), int(nums[1])) if name == "glibc" and len(nums) >= 2 else None


def check_python(manifest: dict) -> Check:
    want = manifest["python"]
    have = "{}.{}".format(*sys.version_info[:2])
    where = f"{platform.python_version()} at {sys.executable}"
    if platform.python_implementation() != "CPython":
        return Check(
            MISSING,
            "python",
            f"need CPython {want}; this is {platform.python_implementation()} {where}",
        )
    if have != want:
        return Check(
            MISSING,
            "python",
            f"the wheels are for CPython {want}; this is {where}: install "
            f"python{want} (and python{want}-venv) or run install.sh --python /path/to/python{want}",
        )
    return Check(OK, "python", where)


def check_venv() -> Check:
    try:
        import ensurepip  # noqa: F401
        import venv  # noqa: F401
    except ImportError as exc:
        v = "{}.{}".format(*sys.version_info[:2])
        return Check(
            MISSING, "venv", f"{exc}: install python{v}-venv (Debian/Ubuntu) or python3-virtualenv"
        )
    return Check(OK, "venv", "venv and ensurepip available")


def check_machine(manifest: dict) -> list[Check]:
    machine = platform.machine().replace("arm64", "aarch64").replace("AMD64", "x86_64")
    out = []
    if machine != manifest["target"]:
        out.append(
            Check(
                MISSING,
                "machine",
                f"bundle is for {manifest['target']}, this machine is {machine}: "
                f"build one with bundle.py --target {machine}",
            )
        )
    else:
        out.append(Check(OK, "machine", machine))
    need = manifest.get("glibc_min")
    have = _glibc()
    if need and have:
        need_t = tuple(int(x) for x in need.split("."))
        if have < need_t:
            out.append(
                Check(
                    MISSING,
                    "glibc",
                    f"the wheels need glibc >= {need}, this system has "
                    f"{have[0]}.{have[1]}: rebuild the bundle with bundle.py --glibc {have[0]}.{have[1]}",
                )
            )
        else:
            out.append(Check(OK, "glibc", f"{have[0]}.{have[1]} (wheels need >= {need})"))
    return out


def check_wheels(bundle: Path, manifest: dict) -> Check:
    missing, corrupt = [], []
    for name, digest in manifest["wheels"].items():
        path = bundle / "wheels" / name
        if not path.is_file():
            missing.append(name)
            continue
        h = hashlib.sha256()
        with path.open("rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        if h.hexdigest() != digest:
            corrupt.append(name)
    if missing or corrupt:
        detail = "; ".join(
            filter(
                None,
                [
                    f"missing: {', '.join(missing)}" if missing else "",
                    f"checksum mismatch (copy it again): {', '.join(corrupt)}" if corrupt else "",
                ],
            )
        )
        return Check(MISSING, "wheels", detail)
    return Check(OK, "wheels", f"{len(manifest['wheels'])} wheels, checksums match")


def check_disk(prefix: str, manifest: dict) -> Check:
    # unpacked wheels (torch above all) take about three times their compressed size
    need = 3 * manifest.get("wheels_bytes", 0)
    probe = Path(prefix).resolve()
    while not probe.exists():
        probe = probe.parent
    free = shutil.disk_usage(probe).free
    if free < need:
        return Check(
            WARN,
            "disk",
            f"{free >> 20} MiB free at {probe}, the install needs about {need >> 20} MiB",
        )
    return Check(OK, "disk", f"{free >> 20} MiB free at {probe}")


def check_prefix(prefix: str) -> Check:
    target = Path(prefix).resolve()
    if (target / "bin" / "python").exists():
        where, verb = target, "upgrade"
    else:
        where, verb = target, "create"
        while not where.exists():
            where = where.parent
    if not os.access(where, os.W_OK | os.X_OK):
        return Check(
            MISSING,
            "prefix",
            f"cannot write to {where}: run install.sh as root, or pass --prefix DIR",
        )
    return Check(OK, "prefix", f"will {verb} {target}")


def check_ascend(manifest: dict, explicit_root: str | None) -> list[Check]:
    out = []
    machine = manifest["target"]
    npu_version = manifest.get("torch_npu")
    torch_version = manifest.get("torch") or ""
    if not npu_version:
        return [
            Check(
                MISSING,
                "torch_npu",
                "the bundle holds no torch_npu wheel: rebuild it with --flavour ascend",
            )
        ]
    pair = ascend_pairs.pair_for(npu_version)
    public, local = ascend_pairs.split_torch_version(torch_version)
    want_torch = pair.torch_requirement(machine).split("==", 1)[1]
    if public != pair.torch or (machine == "x86_64" and local != "cpu"):
        out.append(
            Check(
                MISSING,
                "torch pairing",
                f"torch_npu {npu_version} requires torch {want_torch}, "
                f"the bundle holds torch {torch_version}: rebuild the bundle",
            )
        )
    else:
        out.append(Check(OK, "torch pairing", f"torch {torch_version} + torch_npu {npu_version}"))

    cann, looked = find_cann(machine, explicit_root)
    if cann is None:
        out.append(
            Check(
                MISSING,
                "CANN",
                f"no CANN toolkit found (looked in {', '.join(looked) or 'nothing'}): "
                f"install Ascend-cann-toolkit {pair.cann or '(see docs/packaging.md)'} for {machine}, "
                f"or pass --ascend-root / set ASCEND_TOOLKIT_HOME",
            )
        )
    elif pair.cann is None:
        out.append(
            Check(
                WARN,
                "CANN",
                f"CANN {cann.version} at {cann.root}; the pairing for torch_npu "
                f"{npu_version} is not in our table, so it is unchecked",
            )
        )
    elif ascend_pairs.normalize_cann(cann.version) != ascend_pairs.normalize_cann(pair.cann):
        instead = ascend_pairs.pairs_for_cann(cann.version)
        hint = (
            f"or rebuild the bundle with --torch-npu {instead[0].torch_npu} (built for CANN {cann.version})"
            if instead
            else "no torch_npu release in our table is built for it"
        )
        out.append(
            Check(
                MISSING,
                "CANN",
                f"torch_npu {npu_version} is built for CANN {pair.cann}, found "
                f"{cann.version} at {cann.root} ({cann.source}): install CANN {pair.cann}, {hint}",
            )
        )
    else:
        out.append(Check(OK, "CANN", f"{cann.version} at {cann.root}"))
    if (
        cann is not None
        and not Path(cann.root, "set_env.sh").is_file()
        and not Path(cann.root).parent.joinpath("set_env.sh").is_file()
    ):
        out.append(
            Check(
                WARN,
                "CANN env",
                f"no set_env.sh next to {cann.root}: the service must set "
                "LD_LIBRARY_PATH and ASCEND_* itself",
            )
        )

    devices = sorted(glob.glob("/dev/davinci[0-9]*"))
    if not devices or not os.path.exists("/dev/davinci_manager"):
        out.append(
            Check(
                WARN,
                "NPU driver",
                "no /dev/davinci* devices: install the Ascend driver and firmware "
                "(npu-smi info must list the cards) before serving",
            )
        )
    else:
        out.append(Check(OK, "NPU driver", f"{len(devices)} device(s): {', '.join(devices)}"))
    try:
        import grp

        grp.getgrnam("HwHiAiUser")
        out.append(Check(OK, "HwHiAiUser", "group exists: add the service user to it"))
    except (ImportError, KeyError):
        out.append(
            Check(
                WARN,
                "HwHiAiUser",
                "group HwHiAiUser not found: the Ascend driver install creates it; "
                "the service user needs it to open /dev/davinci*",
            )
        )
    return out


def check_cuda() -> Check:
    try:
        line = Path("/proc/driver/nvidia/version").read_text().splitlines()[0]
    except (OSError, IndexError):
        return Check(
            WARN,
            "NVIDIA driver",
            "not loaded (/proc/driver/nvidia/version absent): the console "
            "will fall back to the CPU",
        )
    return Check(OK, "NVIDIA driver", line.strip())


def run_checks(bundle: Path, explicit_root: str | None, prefix: str) -> list[Check]:
    manifest = json.loads((bundle / "bundle.json").read_text())
    checks = [check_python(manifest), check_venv()]
    checks += check_machine(manifest)
    checks.append(check_wheels(bundle, manifest))
    checks.append(check_prefix(prefix))
    checks.append(check_disk(prefix, manifest))
    if manifest["flavour"] == "ascend":
        checks += check_ascend(manifest, explicit_root)
    elif manifest["flavour"] == "cuda":
        checks.append(check_cuda())
    return checks


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Check this server for an offline npu-console bundle."
    )
    parser.add_argument(
        "--bundle",
        default=str(Path(__file__).resolve().parent),
        help="unpacked bundle directory (default: where this script is)",
    )
    parser.add_argument(
        "--ascend-root", help="CANN toolkit directory (default: search the usual places)"
    )
    parser.add_argument(
        "--prefix", default="/opt/npu-console", help="where install.sh will install"
    )
    parser.add_argument("--json", action="store_true", help="print the checks as JSON")
    args = parser.parse_args(argv)
    bundle = Path(args.bundle)
    if not (bundle / "bundle.json").is_file():
        print(f"error: {bundle} is not an unpacked bundle (no bundle.json)", file=sys.stderr)
        return 2
    checks = run_checks(bundle, args.ascend_root, args.prefix)
    if args.json:
        print(json.dumps([asdict(c) for c in checks], indent=2))
    else:
        for c in checks:
            print(f"{c.status:<8}{c.what}: {c.detail}")
    blocking = [c for c in checks if c.status == MISSING]
    if blocking and not args.json:
        print(
            f"{len(blocking)} problem(s) block the install; fix them and run again.",
            file=sys.stderr,
        )
    return 1 if blocking else 0


if __name__ == "__main__":
    sys.exit(main())
