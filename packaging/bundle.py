"""Build an offline install bundle: the project's wheel, every dependency wheel, and install.sh.

    python packaging/bundle.py --target x86_64 --python 3.11 --flavour cpu --out dist/

writes dist/npu-console-<version>-<flavour>-<target>-py311.tar.gz. Copy it to a server with no
network, unpack it, run ./install.sh (see docs/packaging.md). `--server` leaves Qt out (the engine,
the CLI and `serve`: npu-console-<version>-<flavour>-server-<target>-py311.tar.gz) and installs
on glibc 2.28. For this machine's own platform, with no --glibc, the wheels come from `pip wheel`
(so a dependency published only as an sdist still works); for another platform or Python, or
with --glibc, from `pip download --only-binary=:all: --platform ...` with manylinux tags no newer
than that glibc, and the build fails if any wheel would need more.

torch is found first, on its own: for the cpu and ascend flavours its CPU build, which lives on
the PyTorch CPU index (x86_64 and aarch64 `+cpu` wheels; PyPI's Linux torch is the CUDA build on
both), or in a --find-links folder. pip resolves it without downloading it (`pip install
--dry-run --report`), and when all it finds is a CUDA build the bundle stops there, before any
download, with one line naming the index.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
import ascend_pairs

TARGETS = ("x86_64", "aarch64")
FLAVOURS = ("cpu", "cuda", "ascend")
DEFAULT_TORCH = "2.13.0"  # the release this project is developed and tested against
# Where torch's CPU builds are published, x86_64 and aarch64 (`torch-X+cpu-...`): consulted for
# torch alone in the cpu and ascend flavours (--torch-index), so no other package comes from it
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
# Oldest server glibc for foreign targets: 2.28 = RHEL 8 / openEuler 20.03 / Kylin V10. No PySide6 in
# our range has an aarch64 wheel below manylinux_2_31 (6.8.0.2; 6.11 needs 2.39), hence 2.31 for a
# desktop bundle there; a server bundle (no Qt) goes down to 2.28 on both.
DEFAULT_GLIBC = {"x86_64": "2.28", "aarch64": "2.31"}
SERVER_GLIBC = "2.28"
# Project extras a desktop bundle carries besides the flavour's: the console (PySide6 is the `gui`
# extra since issue 25). A server bundle (--server) leaves it out: engine, CLI and `serve` only.
BUNDLE_EXTRAS = ("gui",)
# what a server bundle must not carry (wheel file names, lower case)
QT_WHEELS = ("pyside6", "shiboken6", "pyqtgraph", "qasync")
# Files copied from packaging/ into every bundle (the two Python ones run on the server)
BUNDLE_TOOLS = ("install.sh", "preflight.py", "ascend_pairs.py")


class BundleError(Exception):
    """A user-facing failure: printed as one line."""


@dataclass
class Plan:
    target: str
    python: str  # "3.11"
    flavour: str
    torch_req: str  # "torch==2.13.0+cpu"
    extra_reqs: list[str]  # ["torch-npu==2.12.0"]
    extras: list[str]  # project extras: ["npu"]
    native: bool  # this machine's platform and Python: pip wheel, no --platform
    platforms: list[str] = field(default_factory=list)
    cann: str | None = None
    torch_npu: str | None = None
    server: bool = False  # no Qt: the engine, the CLI and `serve`
    glibc: str | None = None  # the floor asked for; None: whatever this machine builds against

    @property
    def project_extras(self) -> list[str]:
        return [*(() if self.server else BUNDLE_EXTRAS), *self.extras]

    @property
    def name_suffix(self) -> str:
        kind = "-server" if self.server else ""
        return f"{self.flavour}{kind}-{self.target}-py{self.python.replace('.', '')}"


def host_machine() -> str:
    return platform.machine().replace("arm64", "aarch64").replace("AMD64", "x86_64")


def manylinux_platforms(target: str, glibc: str) -> list[str]:
    """Every manylinux tag a server with this glibc accepts, newest first (pip takes any of them)."""
    m = re.fullmatch(r"(\d+)\.(\d+)", glibc)
    major, minor = (int(m.group(1)), int(m.group(2))) if m else (0, 0)
    if major != 2 or minor < 17:
        raise BundleError(f"--glibc {glibc}: give a glibc version such as 2.28 (2.17 or newer)")
    tags = [f"manylinux_2_{m}_{target}" for m in range(minor, 16, -1)]
    return tags + [f"manylinux2014_{target}"]


def make_plan(
    target: str,
    python: str,
    flavour: str,
    torch: str | None,
    torch_npu: str | None,
    glibc: str | None = None,
    server: bool = False,
) -> Plan:
    if target not in TARGETS:
        raise BundleError(f"--target {target}: choose one of {', '.join(TARGETS)}")
    if flavour not in FLAVOURS:
        raise BundleError(f"--flavour {flavour}: choose one of {', '.join(FLAVOURS)}")
    if not re.fullmatch(r"3\.\d+", python):
        raise BundleError(f"--python {python}: give a CPython minor version such as 3.11")
    if torch_npu and flavour != "ascend":
        raise BundleError("--torch-npu only makes sense with --flavour ascend")
    host_python = "{}.{}".format(*sys.version_info[:2])
    # An explicit --glibc is honoured for every target, this machine's own included: the wheels
    # are then fetched by manylinux tag (pip download) instead of built here (pip wheel), whose
    # wheels would only promise this machine's glibc.
    native = (target == host_machine() and python == host_python and sys.platform == "linux"
              and glibc is None)
    glibc = glibc or (SERVER_GLIBC if server else DEFAULT_GLIBC[target])
    platforms = [] if native else manylinux_platforms(target, glibc)
    floor = None if native else glibc
    if flavour == "ascend":
        try:
            pair = ascend_pairs.pair_for(torch_npu or ascend_pairs.DEFAULT_TORCH_NPU)
        except ValueError as exc:
            raise BundleError(str(exc)) from None
        if torch and ascend_pairs.split_torch_version(torch)[0] != pair.torch:
            raise BundleError(
                f"torch_npu {pair.torch_npu} requires torch {pair.torch}, not {torch}; "
                "drop --torch or pick another --torch-npu"
            )
        if pair.pythons and python not in pair.pythons:
            raise BundleError(
                f"torch_npu {pair.torch_npu} has no wheels for Python {python} "
                f"(it has {', '.join(pair.pythons)})"
            )
        return Plan(
            target,
            python,
            flavour,
            pair.torch_requirement(target),
            [f"torch-npu=={pair.torch_npu}"],
            ["npu"],
            native,
            platforms,
            pair.cann,
            pair.torch_npu,
            server,
            floor,
        )
    version = torch or DEFAULT_TORCH
    if flavour == "cpu":
        # PyPI's x86_64 torch is the multi-GB CUDA build; the CPU build carries the +cpu label.
        # aarch64: the public release, which matches its +cpu build (PEP 440 ignores the local
        # label) and, for releases before the +cpu aarch64 wheels, the unlabelled CPU build;
        # find_torch picks one and refuses a CUDA build.
        public = ascend_pairs.split_torch_version(version)[0]
        req = f"torch=={public}+cpu" if target == "x86_64" else f"torch=={public}"
        return Plan(target, python, flavour, req, [], [], native, platforms, server=server,
                    glibc=floor)
    return Plan(target, python, flavour, f"torch=={version}", [], ["cuda"], native, platforms,
                server=server, glibc=floor)


def _run(
    cmd: list[str],
    what: str,
    verbose: bool,
    cwd: Path | None = None,
    hints: dict[str, str] | None = None,
) -> None:
    """Run a step quietly; on failure show pip's last lines and, if a known cause shows, its fix."""
    if verbose:
        print("+ " + " ".join(cmd), file=sys.stderr)
    proc = subprocess.run(
        cmd,
        check=False,
        cwd=cwd,
        text=True,
        stdout=None if verbose else subprocess.PIPE,
        stderr=None if verbose else subprocess.STDOUT,
    )
    if proc.returncode != 0:
        tail = (proc.stdout or "").strip().splitlines()[-15:]
        if tail:
            print("\n".join(tail), file=sys.stderr)
        hint = next((h for cue, h in (hints or {}).items() if cue in (proc.stdout or "")), "")
        raise BundleError(
            f"{what} failed (exit {proc.returncode}){hint}; rerun with --verbose for the full log"
        )


def build_project_wheel(plan: Plan, work: Path, verbose: bool, isolated: bool = True) -> Path:
    """sdist -> unpack -> record the flavour -> wheel, so the wheel in the bundle knows its build.
    isolated=False (--no-index): with this Python's own setuptools, as no build environment can
    be downloaded."""
    dist = work / "dist"
    iso = [] if isolated else ["--no-isolation"]
    _run(
        [sys.executable, "-m", "build", *iso, "--sdist", "--outdir", str(dist), str(ROOT)],
        "building the sdist",
        verbose,
    )
    sdists = sorted(dist.glob("*.tar.gz"))
    if len(sdists) != 1:
        raise BundleError(f"expected one sdist in {dist}, found {len(sdists)}")
    src_parent = work / "src"
    with tarfile.open(sdists[0]) as tar:
        if hasattr(tarfile, "data_filter"):  # 3.10.12+ / 3.11.4+: refuse odd members
            tar.extractall(src_parent, filter="data")
        else:
            tar.extractall(src_parent)
    (src,) = [p for p in src_parent.iterdir() if p.is_dir()]
    torch_version = plan.torch_req.split("==", 1)[1]
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    (src / "engine" / "_build_flavour.py").write_text(
        '"""Written by packaging/bundle.py: what this build was made for (read by engine.build_info)."""\n\n'
        f"FLAVOUR = {plan.flavour!r}\nTARGET = {plan.target!r}\nPYTHON = {plan.python!r}\n"
        f"TORCH = {torch_version!r}\nTORCH_NPU = {plan.torch_npu!r}\nBUILT = {stamp!r}\n"
    )
    wheels = work / "project"
    _run(
        [sys.executable, "-m", "build", *iso, "--wheel", "--outdir", str(wheels), str(src)],
        "building the wheel",
        verbose,
    )
    (wheel,) = wheels.glob("*.whl")
    return wheel


def _platform_args(plan: Plan) -> list[str]:
    """pip's options for a foreign platform and Python (none for this machine's own)."""
    if plan.native:
        return []
    abi = "cp" + plan.python.replace(".", "")
    cmd = ["--python-version", plan.python, "--implementation", "cp", "--abi", abi]
    for tag in plan.platforms:
        cmd += ["--platform", tag]
    return cmd


def _index_args(find_links: list[str], extra_index_urls: list[str], no_index: bool) -> list[str]:
    cmd = ["--no-index"] if no_index else []
    for link in find_links:
        cmd += ["--find-links", link]
    if not no_index:
        for url in extra_index_urls:
            cmd += ["--extra-index-url", url]
    return cmd


def torch_index_for(plan: Plan, torch_index: str | None) -> str | None:
    """The index consulted for torch alone: the CPU index for cpu and ascend bundles unless
    --torch-index says otherwise ("none": only pip's own indexes and --find-links)."""
    if plan.flavour == "cuda":
        return None
    if torch_index is None:
        return CPU_INDEX
    return None if torch_index.lower() == "none" else torch_index


def torch_query_cmd(plan: Plan, report: Path, find_links: list[str], extra_index_urls: list[str],
                    no_index: bool, torch_index: str | None) -> list[str]:
    """Resolve torch alone, without downloading it: pip writes the wheel it would take, and that
    wheel's metadata, to `report`."""
    urls = [*extra_index_urls, *([torch_index] if torch_index else [])]
    return [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--no-deps",
            "--only-binary=:all:", "--quiet", "--report", str(report), *_platform_args(plan),
            *_index_args(find_links, urls, no_index), plan.torch_req]


@dataclass(frozen=True)
class TorchChoice:
    version: str  # "2.13.0+cpu"
    url: str  # where pip takes the wheel from
    cuda_requires: tuple[str, ...]  # its nvidia-* / triton requirements: empty for a CPU build

    @property
    def filename(self) -> str:
        return self.url.rsplit("/", 1)[-1].replace("%2B", "+")

    @property
    def is_cuda(self) -> bool:
        local = ascend_pairs.split_torch_version(self.version)[1] or ""
        return bool(self.cuda_requires) or local.startswith(("cu", "rocm"))


def read_torch_report(report: dict) -> TorchChoice:
    (item,) = report["install"]
    meta = item["metadata"]
    names = [re.split(r"[\s;<>=!~\[(]", r.strip(), maxsplit=1)[0].lower().replace("_", "-")
             for r in meta.get("requires_dist") or []]
    cuda = tuple(sorted({n for n in names if n.startswith(("nvidia-", "triton"))}))
    return TorchChoice(meta["version"], item["download_info"]["url"], cuda)


def cuda_torch_message(plan: Plan, choice: TorchChoice) -> str:
    public = ascend_pairs.split_torch_version(choice.version)[0]
    cuda = choice.cuda_requires
    why = (f"requires {len(cuda)} CUDA wheels: {', '.join(cuda[:3])}"
           f"{' ...' if len(cuda) > 3 else ''}" if cuda else "a CUDA build")
    return (f"the only torch {public} for {plan.target} / CPython {plan.python} that pip finds is "
            f"{choice.filename} ({why}); a {plan.flavour} bundle takes its CPU build from "
            f"{CPU_INDEX}: pass --torch-index {CPU_INDEX}, or --find-links a folder holding "
            f"torch-{public}+cpu-*-{plan.target}.whl")


def find_torch(plan: Plan, work: Path, wheels_dir: Path, find_links: list[str],
               extra_index_urls: list[str], no_index: bool, torch_index: str | None,
               verbose: bool) -> Plan:
    """Pick the torch wheel before anything else is fetched: resolve it alone, refuse a CUDA
    build for a cpu or ascend bundle (one line naming the CPU index), download it into the
    bundle's wheels, and return the plan pinned to exactly that build."""
    report = work / "torch-report.json"
    index = torch_index_for(plan, torch_index)
    where = f"{index} or " if index and not no_index else ""
    _run(torch_query_cmd(plan, report, find_links, extra_index_urls, no_index, index),
         f"finding {plan.torch_req}", verbose,
         hints={"matching distribution": (
             f": no {plan.torch_req} wheel for {plan.target} / CPython {plan.python} in "
             f"{where}the indexes and --find-links pip sees; its CPU build is on {CPU_INDEX} "
             f"(--torch-index), or --find-links a folder holding the wheel")})
    choice = read_torch_report(json.loads(report.read_text()))
    if plan.flavour != "cuda" and choice.is_cuda:
        raise BundleError(cuda_torch_message(plan, choice))
    pinned = replace(plan, torch_req=f"torch=={choice.version}")
    urls = [*extra_index_urls, *([index] if index else [])]
    _run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
          "--progress-bar", "off", "--dest", str(wheels_dir), *_platform_args(pinned),
          *_index_args(find_links, urls, no_index), pinned.torch_req],
         f"downloading {choice.filename}", verbose)
    return pinned


def pip_collect_cmd(
    plan: Plan, project_wheel: Path, dest: Path, find_links: list[str], extra_index_urls: list[str],
    no_index: bool = False,
) -> list[str]:
    extras = plan.project_extras
    project = f"{project_wheel}[{','.join(extras)}]" if extras else str(project_wheel)
    reqs = [project, plan.torch_req, *plan.extra_reqs]
    if plan.native:
        cmd = [sys.executable, "-m", "pip", "wheel", "--wheel-dir", str(dest)]
    else:
        cmd = [sys.executable, "-m", "pip", "download", "--dest", str(dest),
               "--only-binary=:all:", *_platform_args(plan)]
    cmd += ["--progress-bar", "off"]
    return cmd + _index_args(find_links, extra_index_urls, no_index) + reqs


def glibc_needed(wheel_name: str, host_glibc: tuple[int, int] | None) -> tuple[int, int] | None:
    """Oldest glibc a wheel runs on, from its platform tags (any of them is enough)."""
    tags = wheel_name[: -len(".whl")].split("-")[-1].split(".")
    found = []
    for tag in tags:
        m = re.match(r"manylinux_(\d+)_(\d+)_", tag)
        if m:
            found.append((int(m.group(1)), int(m.group(2))))
        elif tag.startswith("manylinux2014_"):
            found.append((2, 17))
        elif tag.startswith("manylinux2010_"):
            found.append((2, 12))
        elif tag.startswith("manylinux1_"):
            found.append((2, 5))
        elif tag.startswith("linux_") and host_glibc:
            found.append(host_glibc)  # built here from an sdist: needs what it was linked against
    return min(found) if found else None


def _host_glibc() -> tuple[int, int] | None:
    try:
        name, version = os.confstr("CS_GNU_LIBC_VERSION").split()
        major, minor = version.split(".")[:2]
        return (int(major), int(minor)) if name == "glibc" else None
    except (ValueError, OSError, AttributeError):
        return None


def wheel_version(wheels: list[Path], project: str) -> str | None:
    norm = project.replace("-", "_").lower()
    for w in wheels:
        name, version = w.name.split("-")[:2]
        if name.lower() == norm:
            return version
    return None


def check_collected(plan: Plan, wheels: list[Path]) -> None:
    torch_have = wheel_version(wheels, "torch")
    torch_want = plan.torch_req.split("==", 1)[1]
    if torch_have != torch_want:
        raise BundleError(f"collected torch {torch_have}, wanted {torch_want}")
    if plan.flavour != "cuda":
        cuda = sorted(w.name for w in wheels if w.name.startswith(("nvidia_", "triton-")))
        if cuda:
            raise BundleError(
                f"a {plan.flavour} bundle must not carry CUDA wheels: {', '.join(cuda)}"
            )
    if plan.server:
        qt = sorted(w.name for w in wheels if w.name.lower().startswith(QT_WHEELS))
        if qt:
            raise BundleError(f"a server bundle must not carry Qt: {', '.join(qt)}")
    if plan.glibc:
        floor = tuple(int(x) for x in plan.glibc.split("."))
        newer = sorted(w.name for w in wheels if (glibc_needed(w.name, None) or (0, 0)) > floor)
        if newer:
            raise BundleError(f"these wheels need a glibc newer than {plan.glibc}: "
                              f"{', '.join(newer)}")


def write_bundle_dir(plan: Plan, bundle: Path, wheels_dir: Path, version: str) -> dict:
    wheels = sorted(wheels_dir.glob("*.whl"))
    check_collected(plan, wheels)
    for name in BUNDLE_TOOLS:
        shutil.copy2(HERE / name, bundle / name)
    (bundle / "install.sh").chmod(0o755)
    shutil.copytree(HERE / "systemd", bundle / "systemd")
    if not plan.server:
        desktop = bundle / "desktop"
        desktop.mkdir()
        shutil.copy2(HERE / "npu-console.desktop", desktop)
        shutil.copy2(HERE / "install_desktop.sh", desktop)
        shutil.copytree(ROOT / "assets" / "icons", desktop / "icons")
    doc = ROOT / "docs" / "packaging.md"
    if doc.is_file():
        shutil.copy2(doc, bundle / "README.md")

    extras = plan.project_extras
    project = f"npu-console[{','.join(extras)}]" if extras else "npu-console"
    requirements = [f"{project}=={version}", plan.torch_req, *plan.extra_reqs]
    (bundle / "requirements.txt").write_text("\n".join(requirements) + "\n")
    host = _host_glibc() if plan.native else None
    needs = [g for g in (glibc_needed(w.name, host) for w in wheels) if g]
    manifest = {
        "name": bundle.name,
        "version": version,
        "flavour": plan.flavour,
        "server": plan.server,
        "target": plan.target,
        "python": plan.python,
        "torch": wheel_version(wheels, "torch"),
        "torch_npu": wheel_version(wheels, "torch_npu"),
        "cann": plan.cann,
        "glibc_min": "{}.{}".format(*max(needs)) if needs else None,
        "requirements": requirements,
        "wheels": {w.name: _sha256(w) for w in wheels},
        "wheels_bytes": sum(w.stat().st_size for w in wheels),
        "built": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "plan": asdict(plan),
    }
    (bundle / "bundle.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def archive(bundle: Path, out: Path) -> Path:
    target = out / f"{bundle.name}.tar.gz"
    partial = target.with_suffix(".gz.partial")
    # wheels are zip-compressed already: a harder gzip level costs minutes and saves ~1 %
    try:
        with tarfile.open(partial, "w:gz", compresslevel=1) as tar:
            tar.add(bundle, arcname=bundle.name)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    partial.replace(target)
    return target


def project_version() -> str:
    text = (ROOT / "engine" / "__init__.py").read_text()
    m = re.search(r'^__version__ = "([^"]+)"', text, re.MULTILINE)
    if not m:
        raise BundleError("engine/__init__.py has no __version__")
    return m.group(1)


def add_chat_model(bundle: Path) -> Path:
    """SmolLM2-135M-Instruct (the GGUF `make run` opens, sha256-checked) under models/."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from npu_console.engine.models.starter import FetchError, fetch

    try:
        return fetch(bundle / "models" / "smollm2-135m-instruct")
    except FetchError as exc:
        raise BundleError(f"--chat-model: {exc}") from None


def build(args: argparse.Namespace) -> Path:
    plan = make_plan(args.target, args.python, args.flavour, args.torch, args.torch_npu, args.glibc,
                     args.server)
    version = project_version()
    name = f"npu-console-{version}-{plan.name_suffix}"
    index = torch_index_for(plan, args.torch_index)
    if args.dry_run:
        print(json.dumps(asdict(plan), indent=2))
        print(" ".join(torch_query_cmd(plan, Path("<report>"), args.find_links,
                                       args.extra_index_url, args.no_index, index)))
        print(" ".join(pip_collect_cmd(plan, Path(f"<{name}.whl>"), Path("<wheels>"),
                                       [*args.find_links, "<wheels>"], args.extra_index_url,
                                       args.no_index)))
        return Path(args.out)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="npu-bundle-") as tmp:
        work = Path(tmp)
        bundle = work / name
        wheels_dir = bundle / "wheels"
        wheels_dir.mkdir(parents=True)
        step = "[%d/5] %s"
        t0 = time.monotonic()
        build_kind = "CUDA" if plan.flavour == "cuda" else "CPU"
        what = (f"finding torch ({plan.torch_req}, the {build_kind} build) for {plan.target} / "
                f"CPython {plan.python}")
        print(step % (1, what), file=sys.stderr)
        plan = find_torch(plan, work, wheels_dir, args.find_links, args.extra_index_url,
                          args.no_index, args.torch_index, args.verbose)
        print(
            step % (2, f"building the npu-console {version} wheel ({plan.flavour} flavour)"),
            file=sys.stderr,
        )
        project_wheel = build_project_wheel(plan, work, args.verbose, isolated=not args.no_index)
        t_wheel = time.monotonic()
        how = (
            "pip wheel"
            if plan.native
            else f"pip download for {plan.target} / CPython {plan.python}"
        )
        print(
            step % (3, f"collecting dependency wheels with {how} ({plan.torch_req})"),
            file=sys.stderr,
        )
        hints = {}
        hints["matching distribution found for"] = (
            f": some dependency has no wheel for {plan.target} / CPython {plan.python} / glibc "
            f"{plan.glibc or 'of this machine'}; a newer --glibc may help"
        )
        _run(
            # the torch wheel find_torch fetched is found in the bundle's own wheels folder
            pip_collect_cmd(plan, project_wheel, wheels_dir, [*args.find_links, str(wheels_dir)],
                            args.extra_index_url, args.no_index),
            "collecting wheels",
            args.verbose,
            hints=hints,
        )
        # pip copies the project wheel as given; make sure the flavoured build is the one shipped
        shutil.copy2(project_wheel, wheels_dir / project_wheel.name)
        t_collect = time.monotonic()
        print(
            step % (4, "writing install.sh, preflight, systemd and desktop files"), file=sys.stderr
        )
        manifest = write_bundle_dir(plan, bundle, wheels_dir, version)
        if args.chat_model:
            add_chat_model(bundle)
        if args.no_archive:
            dest = out / name
            if dest.exists():
                shutil.rmtree(dest)
            shutil.move(str(bundle), dest)
            print(dest)
            return dest
        size = manifest["wheels_bytes"] >> 20
        print(
            step % (5, f"archiving {len(manifest['wheels'])} wheels ({size} MiB)"), file=sys.stderr
        )
        result = archive(bundle, out)
    t_end = time.monotonic()
    print(
        f"built in {t_end - t0:.0f} s (project wheel {t_wheel - t0:.0f} s, dependency wheels "
        f"{t_collect - t_wheel:.0f} s, archive {t_end - t_collect:.0f} s)",
        file=sys.stderr,
    )
    print(result)
    return result


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="Build an offline npu-console install bundle (tar.gz).")
    p.add_argument(
        "--target", default=host_machine(), choices=TARGETS, help="server CPU architecture"
    )
    p.add_argument(
        "--python",
        default="{}.{}".format(*sys.version_info[:2]),
        help="server's CPython, e.g. 3.11",
    )
    p.add_argument("--flavour", default="cpu", choices=FLAVOURS)
    p.add_argument("--out", required=True, help="directory for the .tar.gz")
    p.add_argument(
        "--torch", help=f"torch release (default {DEFAULT_TORCH}; ascend: the one torch_npu needs)"
    )
    p.add_argument(
        "--torch-npu",
        help=f"torch_npu release for ascend (default {ascend_pairs.DEFAULT_TORCH_NPU})",
    )
    p.add_argument(
        "--glibc",
        help="oldest glibc of the servers; honoured for every target, this machine's too, by "
        "fetching manylinux wheels no newer than it (default for foreign targets: 2.28 on x86_64, "
        "2.31 on aarch64, 2.28 for --server)",
    )
    p.add_argument(
        "--server",
        action="store_true",
        help="a server bundle: the engine, the CLI and `serve`, no Qt (installs on glibc 2.28)",
    )
    p.add_argument(
        "--find-links",
        action="append",
        default=[],
        metavar="DIR_OR_URL",
        help="extra place with wheels (e.g. a directory holding torch)",
    )
    p.add_argument(
        "--extra-index-url",
        action="append",
        default=[],
        metavar="URL",
        help="extra index, e.g. https://download.pytorch.org/whl/cpu for torch +cpu builds",
    )
    p.add_argument(
        "--torch-index",
        metavar="URL",
        help=f"index consulted for torch alone in cpu and ascend bundles (default {CPU_INDEX}, "
        "which has the x86_64 and aarch64 CPU builds; `none`: only pip's indexes and --find-links)",
    )
    p.add_argument(
        "--no-index",
        action="store_true",
        help="no index at all: every wheel from --find-links (an offline build host; the project "
        "wheel is then built with this Python's own setuptools)",
    )
    p.add_argument(
        "--no-archive", action="store_true", help="leave the unpacked bundle directory in --out"
    )
    p.add_argument(
        "--dry-run", action="store_true", help="print the plan and the pip command, fetch nothing"
    )
    p.add_argument("--chat-model", action="store_true",
                   help="carry SmolLM2-135M-Instruct (a 98 MB GGUF) under models/ in the bundle")
    p.add_argument("--verbose", action="store_true", help="show the commands and pip's full output")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        build(args)
    except BundleError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted; nothing was written to --out", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
