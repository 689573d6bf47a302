"""Packaging: wheel/sdist contents, the offline bundle (built, installed with no network, run),
the preflight checks a server gets before install, the systemd unit and the desktop entry.

The tests that build the wheel or a bundle are the `dist` lane (`make test-dist`); the rest run
in the default lane."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import platform
import shlex
import shutil
import struct
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest
from npu_console.engine import __version__
from support.offline import offline_env as _offline_env
from support.offline import offline_prefix as _offline_prefix

ROOT = Path(__file__).resolve().parent.parent
PACKAGING = ROOT / "packaging"
DEMO_CONFIG = ROOT / "assets" / "models" / "demo" / "config.json"
VENV_BIN = Path(sys.executable).parent
# pyproject.toml's package-data patterns: what the wheel must carry from assets/
DATA_SUFFIXES = {".json", ".jsonl", ".txt", ".qss", ".svg", ".png", ".jinja", ".safetensors", ".md", ".py"}


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"_packaging_{name}", PACKAGING / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


bundle_mod = _load("bundle")
pairs = _load("ascend_pairs")


def _run(cmd, **kw) -> subprocess.CompletedProcess:
    kw.setdefault("timeout", 600)
    return subprocess.run(cmd, capture_output=True, text=True, check=False, **kw)


# ---------------------------------------------------------------- bundle planning and pairing


def test_ascend_plan_pins_the_paired_torch_and_foreign_platform_tags():
    plan = bundle_mod.make_plan("aarch64", "3.11", "ascend", None, None, "2.28")
    assert plan.torch_req == "torch==2.12.0"  # aarch64 PyPI wheels; no +cpu label there
    assert plan.extra_reqs == ["torch-npu==2.12.0"] and plan.extras == ["npu"]
    assert plan.cann == "9.1.0" and not plan.native
    assert "manylinux_2_28_aarch64" in plan.platforms and "manylinux2014_aarch64" in plan.platforms
    assert "manylinux_2_29_aarch64" not in plan.platforms
    cmd = bundle_mod.pip_collect_cmd(plan, Path("p.whl"), Path("w"), [], [])
    assert cmd[3] == "download" and "--only-binary=:all:" in cmd
    assert (
        cmd[cmd.index("--python-version") + 1] == "3.11" and cmd[cmd.index("--abi") + 1] == "cp311"
    )
    assert cmd[-3:] == ["p.whl[gui,npu]", "torch==2.12.0", "torch-npu==2.12.0"]


def test_x86_plans_use_the_cpu_torch_build_except_cuda():
    assert bundle_mod.make_plan("x86_64", "3.11", "ascend", None, "2.9.0", "2.28").torch_req == (
        "torch==2.9.0+cpu"
    )
    cpu = bundle_mod.make_plan("x86_64", "3.11", "cpu", None, None, "2.28")
    assert cpu.torch_req == "torch==2.13.0+cpu" and cpu.extras == []
    cuda = bundle_mod.make_plan("x86_64", "3.11", "cuda", None, None, "2.28")
    assert cuda.torch_req == "torch==2.13.0" and cuda.extras == ["cuda"]


def test_host_platform_plan_uses_pip_wheel():
    """Without --glibc (with one, see test_server_plan_leaves_qt_out_and_honours_glibc...)."""
    host = "{}.{}".format(*sys.version_info[:2])
    plan = bundle_mod.make_plan(bundle_mod.host_machine(), host, "cpu", None, None)
    assert plan.native and plan.platforms == []
    cmd = bundle_mod.pip_collect_cmd(plan, Path("p.whl"), Path("w"), ["/opt/wheels"], [])
    assert cmd[3] == "wheel" and "--platform" not in cmd
    assert cmd[cmd.index("--find-links") + 1] == "/opt/wheels"


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--flavour", "ascend", "--torch", "2.13.0"], "requires torch 2.12.0"),
        (["--flavour", "ascend", "--torch-npu", "2.3.0"], "not in the pairing table"),
        (["--flavour", "cpu", "--torch-npu", "2.12.0"], "only makes sense with --flavour ascend"),
        (["--python", "311"], "give a CPython minor version"),
        (
            ["--flavour", "ascend", "--torch-npu", "2.6.0", "--python", "3.12"],
            "no wheels for Python",
        ),
    ],
)
def test_bundle_cli_rejects_bad_combinations_in_one_line(tmp_path, argv, message):
    res = _run([sys.executable, str(PACKAGING / "bundle.py"), "--out", str(tmp_path), *argv])
    assert res.returncode == 2
    assert res.stderr.startswith("error: ") and message in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and "Traceback" not in res.stderr
    assert list(tmp_path.iterdir()) == []


def test_glibc_needed_reads_the_oldest_tag_of_each_wheel():
    need = bundle_mod.glibc_needed
    assert need(
        "numpy-2.4.6-cp311-cp311-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl", None
    ) == (
        2,
        27,
    )
    psutil = "psutil-7.2.2-cp36-abi3-manylinux2010_x86_64.manylinux_2_12_x86_64.manylinux_2_28_x86_64.whl"
    assert need(psutil, None) == (2, 12)
    assert need("hf_xet-1.8.0-cp38-abi3-manylinux2014_x86_64.whl", None) == (2, 17)
    assert need("x-1.0-cp311-cp311-linux_x86_64.whl", (2, 36)) == (2, 36)
    assert need("fastapi-0.165.0-py3-none-any.whl", (2, 36)) is None


def test_pairing_table_suggests_the_newest_torch_npu_for_a_cann():
    assert pairs.torch_for("2.10.0.post4") == "2.10.0"
    assert pairs.normalize_cann("8.0.rc3.alpha003") == "8.0.RC3"
    assert pairs.pairs_for_cann("8.5.0")[0].torch_npu == "2.9.0"
    assert [p.torch_npu for p in pairs.pairs_for_cann("9.1.0")][:2] == ["2.12.0", "2.11.0"]
    assert pairs.pair_for("2.12.0").torch_requirement("x86_64") == "torch==2.12.0+cpu"
    with pytest.raises(ValueError, match="not a torch_npu release"):
        pairs.torch_for("latest")


# ---------------------------------------------------------------- preflight on a (fake) server


def _fake_bundle(tmp_path: Path, **overrides) -> Path:
    """A bundle directory as bundle.py writes it, with one small stand-in wheel file."""
    bundle = tmp_path / "bundle"
    (bundle / "wheels").mkdir(parents=True)
    for name in ("preflight.py", "ascend_pairs.py", "install.sh"):
        shutil.copy2(PACKAGING / name, bundle / name)
    wheel = bundle / "wheels" / "demo-1.0-py3-none-any.whl"
    wheel.write_bytes(b"not really a wheel")
    manifest = {
        "name": "npu-console-test",
        "version": "0.1.0",
        "flavour": "ascend",
        "target": platform.machine(),
        "python": "{}.{}".format(*sys.version_info[:2]),
        "torch": "2.12.0+cpu" if platform.machine() == "x86_64" else "2.12.0",
        "torch_npu": "2.12.0",
        "cann": "9.1.0",
        "glibc_min": "2.17",
        "requirements": ["npu-console[npu]==0.1.0"],
        "wheels": {wheel.name: hashlib.sha256(wheel.read_bytes()).hexdigest()},
        "wheels_bytes": wheel.stat().st_size,
    }
    manifest.update(overrides)
    (bundle / "bundle.json").write_text(json.dumps(manifest))
    return bundle


def _fake_cann_info(root: Path, version: str) -> Path:
    # the record CANN's installer writes (<root>/<arch>-linux/ascend_toolkit_install.info)
    info = root / f"{platform.machine()}-linux" / "ascend_toolkit_install.info"
    info.parent.mkdir(parents=True)
    info.write_text(
        f"package_name=Ascend-cann-toolkit\nversion={version}\ninnerversion=V100R001C25B100\n"
        f"arch={platform.machine()}\nos=linux\npath={root}/{platform.machine()}-linux\n"
    )
    (root / "set_env.sh").write_text(f"export ASCEND_TOOLKIT_HOME={root}\n")
    return root


def _preflight(bundle: Path, *args: str) -> tuple[int, dict]:
    res = _run(
        [sys.executable, str(bundle / "preflight.py"), "--bundle", str(bundle), "--json", *args]
    )
    assert "Traceback" not in res.stderr, res.stderr
    return res.returncode, {c["what"]: c for c in json.loads(res.stdout)}


def test_preflight_accepts_the_paired_cann(tmp_path):
    bundle = _fake_bundle(tmp_path)
    root = _fake_cann_info(tmp_path / "Ascend" / "ascend-toolkit" / "latest", "9.1.0")
    rc, checks = _preflight(bundle, "--ascend-root", str(root), "--prefix", str(tmp_path / "p"))
    assert checks["CANN"]["status"] == "ok" and "9.1.0" in checks["CANN"]["detail"]
    assert checks["torch pairing"]["status"] == "ok"
    assert checks["python"]["status"] == "ok" and checks["wheels"]["status"] == "ok"
    assert checks["prefix"]["status"] == "ok"
    # no NPU here: the driver and group checks warn but do not block
    assert checks["NPU driver"]["status"] == "warn"
    assert rc == 0


def test_preflight_names_the_cann_mismatch_and_the_torch_npu_that_fits(tmp_path):
    bundle = _fake_bundle(tmp_path)
    root = tmp_path / "cann"
    root.mkdir()
    # older toolkits record versions in version.cfg: [inner:public] entries, newest last
    (root / "version.cfg").write_text(
        "runtime_installed_version=[7.7.T20.0.B210:8.1.RC1][8.5.0.1.220:8.5.0]\n"
        "toolkit_installed_version=[7.7.T20.0.B210:8.1.RC1][8.5.0.1.220:8.5.0]\n"
    )
    rc, checks = _preflight(bundle, "--ascend-root", str(root))
    assert rc == 1
    cann = checks["CANN"]
    assert cann["status"] == "MISSING"
    assert "built for CANN 9.1.0, found 8.5.0" in cann["detail"]
    assert "--torch-npu 2.9.0" in cann["detail"]


def test_preflight_says_where_it_looked_when_cann_is_absent(tmp_path):
    bundle = _fake_bundle(tmp_path)
    empty = tmp_path / "nothing-here"
    empty.mkdir()
    rc, checks = _preflight(bundle, "--ascend-root", str(empty))
    assert rc == 1
    assert checks["CANN"]["status"] == "MISSING"
    assert (
        str(empty) in checks["CANN"]["detail"]
        and "Ascend-cann-toolkit 9.1.0" in checks["CANN"]["detail"]
    )


def test_preflight_catches_a_wrong_torch_pair_python_and_corrupt_wheel(tmp_path):
    bundle = _fake_bundle(tmp_path, torch="2.13.0+cpu", python="3.9")
    (bundle / "wheels" / "demo-1.0-py3-none-any.whl").write_bytes(b"truncated")
    root = _fake_cann_info(tmp_path / "toolkit", "9.1.0")
    rc, checks = _preflight(bundle, "--ascend-root", str(root))
    assert rc == 1
    assert checks["torch pairing"]["status"] == "MISSING"
    assert "requires torch 2.12.0" in checks["torch pairing"]["detail"]
    assert checks["python"]["status"] == "MISSING" and "python3.9" in checks["python"]["detail"]
    assert (
        checks["wheels"]["status"] == "MISSING"
        and "checksum mismatch" in checks["wheels"]["detail"]
    )


def test_install_script_stops_before_touching_the_prefix_when_a_check_fails(tmp_path):
    bundle = _fake_bundle(tmp_path, flavour="cpu", python="3.9", torch="2.13.0+cpu", torch_npu=None)
    prefix = tmp_path / "prefix"
    res = _run(
        [str(bundle / "install.sh"), "--prefix", str(prefix), "--python", sys.executable],
        env=_offline_env(),
    )
    assert res.returncode == 1
    assert "MISSING python" in res.stdout and "fix the MISSING items" in res.stderr
    assert not prefix.exists()


# ---------------------------------------------------------------- build flavour


def test_flavour_env_override_and_fallback(monkeypatch, capsys):
    from npu_console.cli.main import main
    from npu_console.engine import build_info

    monkeypatch.setenv("NPU_CONSOLE_FLAVOUR", "ascend")
    info = build_info.build_info()
    assert (info.flavour, info.source) == ("ascend", "env")
    with pytest.raises(SystemExit):
        main(["--version"])
    assert "(ascend" in capsys.readouterr().out
    monkeypatch.setenv("NPU_CONSOLE_FLAVOUR", "quantum")  # not a flavour: ignored
    assert build_info.build_info().source != "env"
    assert build_info.flavour() in build_info.FLAVOURS


# ---------------------------------------------------------------- systemd and desktop files


def _unit_for_verify(tmp_path: Path, exe: Path, with_ascend_dropin: bool) -> Path:
    """The shipped unit, pointed at an npu-console and env file that exist on this machine.

    systemd-analyze reads drop-ins from beside the unit file, so each variant gets its own folder.
    """
    units = tmp_path / ("ascend" if with_ascend_dropin else "plain")
    units.mkdir()
    text = (PACKAGING / "systemd" / "npu-console.service").read_text()
    assert "ExecStart=/opt/npu-console/bin/npu-console serve" in text
    text = text.replace("/opt/npu-console/bin/npu-console", str(exe))
    env_file = PACKAGING / "systemd" / "npu-console.env"
    text = text.replace("/etc/npu-console/npu-console.env", str(env_file))
    (units / "npu-console.service").write_text(text)
    if with_ascend_dropin:
        dropin = (PACKAGING / "systemd" / "ascend.conf").read_text()
        (units / "npu-console.service.d").mkdir()
        (units / "npu-console.service.d" / "ascend.conf").write_text(
            dropin.replace("/opt/npu-console/bin/npu-console", str(exe))
        )
    return units / "npu-console.service"


def _verify(unit: Path) -> subprocess.CompletedProcess:
    return _run(["systemd-analyze", "verify", str(unit)], timeout=60)


@pytest.mark.skipif(not shutil.which("systemd-analyze"), reason="systemd-analyze not installed")
def test_systemd_unit_verifies_with_and_without_the_ascend_dropin(tmp_path):
    exe = VENV_BIN / "npu-console"
    assert exe.exists()
    for with_dropin in (False, True):
        # an unknown key or a bad value is only a warning on stderr: demand silence
        res = _verify(_unit_for_verify(tmp_path, exe, with_dropin))
        assert res.returncode == 0 and res.stderr.strip() == "", res.stderr


@pytest.mark.skipif(not shutil.which("systemd-analyze"), reason="systemd-analyze not installed")
def test_systemd_verify_reports_a_missing_binary_and_a_bad_key(tmp_path):
    res = _verify(_unit_for_verify(tmp_path, tmp_path / "no-such-npu-console", False))
    assert res.returncode != 0 and "no-such-npu-console" in res.stderr
    unit = _unit_for_verify(tmp_path, VENV_BIN / "npu-console", True)
    dropin = unit.parent / "npu-console.service.d" / "ascend.conf"
    dropin.write_text(dropin.read_text() + "NotAnOption=yes\n")
    assert "NotAnOption" in _verify(unit).stderr


def test_env_file_is_plain_assignments_that_serve_accepts():
    values = {}
    for line in (PACKAGING / "systemd" / "npu-console.env").read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, sep, value = line.partition("=")
            assert sep and key.isidentifier() and key == key.strip(), line
            values[key] = value
    assert values["NPU_CONSOLE_SERVE_ARGS"]
    from npu_console.cli.main import build_parser

    args = build_parser().parse_args(["serve", *shlex.split(values["NPU_CONSOLE_SERVE_ARGS"])])
    assert args.command == "serve"


@pytest.mark.skipif(
    not shutil.which("desktop-file-validate"), reason="desktop-file-utils not installed"
)
def test_desktop_entry_validates_and_installs(tmp_path):
    entry = PACKAGING / "npu-console.desktop"
    res = _run(["desktop-file-validate", str(entry)], timeout=30)
    assert res.returncode == 0 and res.stdout.strip() == "", res.stdout
    exe = VENV_BIN / "npu-console"
    env = dict(os.environ, XDG_DATA_HOME=str(tmp_path / "share"))
    res = _run([str(PACKAGING / "install_desktop.sh"), "--exec", str(exe)], env=env, timeout=60)
    assert res.returncode == 0, res.stderr
    installed = tmp_path / "share" / "applications" / "npu-console.desktop"
    assert f"Exec={exe} gui" in installed.read_text().splitlines()
    assert _run(["desktop-file-validate", str(installed)], timeout=30).returncode == 0
    hicolor = tmp_path / "share" / "icons" / "hicolor"
    for size in (48, 128, 256):
        assert (hicolor / f"{size}x{size}" / "apps" / "npu-console.png").is_file()
    assert (hicolor / "scalable" / "apps" / "npu-console.svg").is_file()
    res = _run([str(PACKAGING / "install_desktop.sh"), "--uninstall"], env=env, timeout=60)
    assert res.returncode == 0 and not installed.exists()


def test_desktop_installer_refuses_a_missing_executable(tmp_path):
    env = dict(os.environ, XDG_DATA_HOME=str(tmp_path / "share"))
    res = _run(
        [str(PACKAGING / "install_desktop.sh"), "--exec", str(tmp_path / "nope")],
        env=env,
        timeout=60,
    )
    assert res.returncode == 2 and "not an executable" in res.stderr
    assert not (tmp_path / "share" / "applications").exists()


def _png_size(path: Path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", head[16:24])


def test_icons_are_rendered_from_the_svg():
    icons = ROOT / "assets" / "icons"
    for size in (48, 128, 256):
        assert _png_size(icons / f"app-{size}.png") == (size, size)
    res = _run([sys.executable, str(PACKAGING / "render_icons.py"), "--check"], timeout=120)
    assert res.returncode == 0, res.stderr


# ---------------------------------------------------------------- wheel and sdist


@pytest.fixture(scope="module")
def dists(built_dists) -> dict[str, Path]:
    return built_dists


def _expected_assets() -> set[str]:
    found = set()
    for path in (ROOT / "assets").rglob("*"):
        rel = path.relative_to(ROOT)
        if path.is_file() and "__pycache__" not in rel.parts and path.suffix in DATA_SUFFIXES:
            found.add(f"npu_console/{rel.as_posix()}")
    return found


@pytest.mark.slow
@pytest.mark.dist
def test_wheel_carries_the_app_and_its_assets_and_nothing_else(dists):
    names = set(zipfile.ZipFile(dists["wheel"]).namelist())
    tops = {n.split("/")[0] for n in names}
    # one import namespace: nothing with a generic top-level name lands in site-packages
    assert {t for t in tops if not t.endswith(".dist-info")} == {"npu_console"}
    assert {n.split("/")[1] for n in names if n.count("/") > 1 and n.startswith("npu_console/")} \
        == {"engine", "console", "cli", "assets"}
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
    assert {n for n in names if n.startswith("npu_console/assets/")} == _expected_assets()
    for needed in ("npu_console/assets/icons/app.svg", "npu_console/assets/icons/app-256.png",
                   "npu_console/cli/main.py", "npu_console/__init__.py",
                   # the native kernels are compiled from these on first use (engine/kernels)
                   "npu_console/engine/kernels/cpu_gemm.c",
                   "npu_console/engine/kernels/cpu_decode.c"):
        assert needed in names
    assert "npu_console/assets/models/demo/config.json" in names
    assert any(
        n.startswith("npu_console/assets/models/demo/") and n.endswith(".safetensors")
        for n in names
    )
    entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    text = zipfile.ZipFile(dists["wheel"]).read(entry_points).decode()
    assert "npu-console = npu_console.cli.main:main" in text


@pytest.mark.slow
@pytest.mark.dist
def test_sdist_leaves_out_tests_docs_and_packaging(dists):
    with tarfile.open(dists["sdist"]) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    for unwanted in ("tests/", "docs/", "packaging/", ".venv/", ".ci/"):
        assert not [n for n in names if n.startswith(unwanted)], unwanted
    assert {"pyproject.toml", "MANIFEST.in", "assets/icons/app.svg", "cli/main.py"} <= names


# ---------------------------------------------------------------- offline bundle, end to end


@pytest.fixture(scope="module")
def installed_bundle(tmp_path_factory) -> Path:
    """Build this machine's cpu server bundle for glibc 2.28, unpack it, install it with pip cut
    off from the network."""
    if platform.system() != "Linux":
        pytest.skip("offline bundles are built for Linux servers")
    work = tmp_path_factory.mktemp("bundle")
    res = _run(
        [
            sys.executable,
            str(PACKAGING / "bundle.py"),
            "--flavour",
            "cpu",
            "--server",
            "--glibc",
            "2.28",
            # this machine reaches no PyTorch index; its pip configuration has the +cpu wheel
            "--torch-index",
            "none",
            "--out",
            str(work / "out"),
        ],
        timeout=900,
    )
    assert res.returncode == 0, res.stderr[-4000:]
    archive = Path(res.stdout.strip().splitlines()[-1])
    py = "{}{}".format(*sys.version_info[:2])
    assert archive.is_file()
    assert archive.name == (
        f"npu-console-{__version__}-cpu-server-{platform.machine()}-py{py}.tar.gz")
    with tarfile.open(archive) as tar:
        tar.extractall(work / "unpacked", filter="data")
    (bundle,) = (work / "unpacked").iterdir()
    manifest = json.loads((bundle / "bundle.json").read_text())
    assert manifest["flavour"] == "cpu" and manifest["torch"].startswith("2.13.0")
    assert not [w for w in manifest["wheels"] if w.startswith("nvidia_")]
    assert manifest["server"] is True and sorted(manifest["wheels"]) == sorted(
        p.name for p in (bundle / "wheels").glob("*.whl"))
    _assert_glibc_floor(manifest["wheels"], (2, 28))
    prefix = work / "venv"
    res = _run(
        [*_offline_prefix(), str(bundle / "install.sh"), "--prefix", str(prefix), "--no-compile"],
        env=_offline_env(),
        cwd=work,
        timeout=900,
    )
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    return prefix


def _assert_glibc_floor(wheels, floor: tuple[int, int]) -> None:
    """Every wheel installs on a glibc `floor` system, read from the wheel file names' tags
    (independently of bundle.py), and none of them is Qt."""
    from packaging.utils import parse_wheel_filename

    too_new, qt = [], []
    for name in wheels:
        dist, _, _, tags = parse_wheel_filename(name)
        if str(dist).lower() in ("pyside6", "pyside6-essentials", "shiboken6", "pyqtgraph",
                                 "qasync"):
            qt.append(name)
        ok = False
        for tag in tags:
            plat = tag.platform
            legacy = {"manylinux1": 5, "manylinux2010": 12, "manylinux2014": 17}
            head = plat.split("_x86_64")[0].split("_aarch64")[0]
            if plat == "any" or head in legacy:
                ok = True
            elif plat.startswith("manylinux_2_"):
                ok |= int(plat.split("_")[2]) <= floor[1]
        if not ok:
            too_new.append(name)
    assert not too_new, f"need a glibc newer than {floor}: {too_new}"
    assert not qt, qt


def test_the_glibc_floor_check_catches_a_newer_wheel():
    _assert_glibc_floor(["torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl",
                         "numpy-2.1.0-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl",
                         "httpx-0.28.1-py3-none-any.whl"], (2, 28))
    with pytest.raises(AssertionError, match="newer"):
        _assert_glibc_floor(["pyside6_essentials-6.11.3-cp39-abi3-manylinux_2_34_x86_64.whl"],
                            (2, 28))
    with pytest.raises(AssertionError, match="pyqtgraph"):
        _assert_glibc_floor(["pyqtgraph-0.13.7-py3-none-any.whl"], (2, 28))


def test_server_plan_leaves_qt_out_and_honours_glibc_on_this_machine():
    plan = bundle_mod.make_plan(platform.machine(), "{}.{}".format(*sys.version_info[:2]),
                                  "cpu", None, None, "2.28", server=True)
    assert plan.server and not plan.native and plan.glibc == "2.28"
    assert plan.platforms[0] == f"manylinux_2_28_{platform.machine()}"
    cmd = bundle_mod.pip_collect_cmd(plan, Path("p.whl"), Path("w"), [], [])
    assert "download" in cmd and "p.whl" in cmd and not [c for c in cmd if "[gui" in c]
    desktop = bundle_mod.make_plan(platform.machine(), "{}.{}".format(*sys.version_info[:2]),
                                     "cpu", None, None)
    assert desktop.native and desktop.glibc is None and "gui" in desktop.project_extras


def _installed_top_levels(prefix: Path) -> set[str]:
    (record,) = prefix.glob("lib/python*/site-packages/npu_console-*.dist-info/RECORD")
    tops = set()
    for line in record.read_text().splitlines():
        path = line.split(",")[0]
        if not path.startswith("..") and "/" in path:
            tops.add(path.split("/")[0])
    return {t for t in tops if not t.endswith(".dist-info")}


@pytest.mark.slow
@pytest.mark.dist
@pytest.mark.timeout(1500)
def test_the_installed_wheel_puts_one_package_in_site_packages_and_no_qt(installed_bundle):
    assert _installed_top_levels(installed_bundle) == {"npu_console"}
    res = _run([str(installed_bundle / "bin" / "python"), "-c", "import PySide6"],
               env=_offline_env(), cwd=installed_bundle)
    assert res.returncode != 0 and "ModuleNotFoundError" in res.stderr


def _installed(prefix: Path, *args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    # cwd outside the checkout, no PYTHONPATH: only the installed copy can answer
    return _run(
        [*_offline_prefix(), str(prefix / "bin" / "npu-console"), *args],
        env=_offline_env(),
        cwd=prefix,
        timeout=timeout,
    )


@pytest.mark.slow
@pytest.mark.dist
@pytest.mark.timeout(1500)
def test_bundle_installs_offline_and_reports_its_flavour(installed_bundle):
    res = _installed(installed_bundle, "--version")
    assert res.returncode == 0
    assert res.stdout.strip().startswith(f"npu-console {__version__} (cpu")
    probe = _run(
        [
            str(installed_bundle / "bin" / "python"),
            "-c",
            "import npu_console.engine.build_info as b; print(b.__file__); print(b.build_info())",
        ],
        env=_offline_env(),
        cwd=installed_bundle,
    )
    where, info = probe.stdout.strip().splitlines()
    assert where.startswith(str(installed_bundle))
    assert "source='bundle'" in info and "torch='2.13.0+cpu'" in info


@pytest.mark.slow
@pytest.mark.dist
@pytest.mark.timeout(1500)
def test_bundle_doctor_json(installed_bundle):
    res = _installed(installed_bundle, "doctor", "--json")
    report = json.loads(res.stdout)
    checks = {c["name"]: c for c in report["checks"]}
    assert (
        checks["python"]["status"] == "ok" and str(installed_bundle) in checks["python"]["detail"]
    )
    assert checks["torch"]["status"] == "ok" and "2.13.0+cpu" in checks["torch"]["detail"]
    assert checks["demo model"]["status"] == "ok", checks["demo model"]
    assert res.returncode == (0 if report["ok"] else 1)


@pytest.mark.slow
@pytest.mark.dist
@pytest.mark.timeout(1500)
def test_bundle_generates_with_its_demo_model_like_the_checkout(installed_bundle):
    assert DEMO_CONFIG.exists(), "the demo model ships in assets/models/demo"
    args = ["generate", "--prompt", "Once upon a time", "--max-tokens", "8", "--temperature", "0"]
    res = _installed(installed_bundle, *args)
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.strip()
    # greedy decoding: the installed copy of the demo model must say what the checkout's says
    here = _run([str(VENV_BIN / "npu-console"), *args], env=_offline_env(), timeout=300)
    assert here.returncode == 0, here.stderr[-2000:]
    assert res.stdout == here.stdout
