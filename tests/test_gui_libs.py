"""First run on a server: the system libraries Qt's xcb plugin needs are found before Qt aborts,
with the distribution's one-line install command (engine/gui_libs.py)."""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from npu_console.engine import gui_libs

DATA = Path(__file__).parent / "data"
OS_RELEASE = DATA / "os_release"


@pytest.mark.parametrize("fixture, tool, packages", [
    ("debian12", "apt-get", "libxcb-cursor0 libxcb-icccm4"),
    ("ubuntu2204", "apt-get", "libxcb-cursor0 libxcb-icccm4"),
    ("kylin_v10_desktop", "apt-get", "libxcb-cursor0 libxcb-icccm4"),
    ("openeuler2203", "dnf", "xcb-util-cursor xcb-util-wm"),
    ("kylin_v10_server", "dnf", "xcb-util-cursor xcb-util-wm"),
    ("rhel9", "dnf", "xcb-util-cursor xcb-util-wm"),
    ("centos7", "yum", "xcb-util-cursor xcb-util-wm"),
])
def test_the_install_line_fits_the_distribution(fixture, tool, packages):
    distro = gui_libs.detect_distro(gui_libs.read_os_release(OS_RELEASE / fixture))
    cmd = gui_libs.install_command(["libxcb-cursor.so.0", "libxcb-icccm.so.4"], distro)
    assert cmd == f"sudo {tool} install -y {packages}"


def test_one_package_for_several_sonames_is_named_once():
    distro = gui_libs.detect_distro(gui_libs.read_os_release(OS_RELEASE / "openeuler2203"))
    cmd = gui_libs.install_command(["libxcb-randr.so.0", "libxcb-shape.so.0", "libxcb.so.1"], distro)
    assert cmd == "sudo dnf install -y libxcb"


def test_an_unknown_distribution_or_soname_gets_the_names_not_a_wrong_command(tmp_path):
    alpine = gui_libs.detect_distro(gui_libs.read_os_release(OS_RELEASE / "alpine"))
    assert alpine.family == "" and gui_libs.install_command(["libxcb-cursor.so.0"], alpine) is None
    missing_file = gui_libs.detect_distro(gui_libs.read_os_release(tmp_path / "none"))
    assert missing_file.name == "this system" and missing_file.tool == ""
    debian = gui_libs.detect_distro(gui_libs.read_os_release(OS_RELEASE / "debian12"))
    assert gui_libs.install_command(["libnot-a-real.so.9"], debian) is None
    text = gui_libs.missing_message(["libxcb-cursor.so.0"], alpine)
    assert "libxcb-cursor.so.0" in text and "package manager" in text
    assert "QT_QPA_PLATFORM=offscreen" in text and "npu-console serve" in text


def test_ldd_output_of_the_real_plugin_is_read():
    """ldd of PySide6's libqxcb.so captured on a Debian 12 server without two xcb-util libraries
    (reported once each, though ldd lists them for every library that needs them)."""
    text = (DATA / "ldd" / "libqxcb_debian12.txt").read_text()
    assert gui_libs.parse_ldd(text) == ["libxcb-icccm.so.4", "libxcb-keysyms.so.1"]


def test_which_platform_qt_will_open():
    assert gui_libs.uses_xcb({"DISPLAY": ":0"})
    assert gui_libs.uses_xcb({"QT_QPA_PLATFORM": "xcb", "DISPLAY": ":0"})
    assert not gui_libs.uses_xcb({"QT_QPA_PLATFORM": "offscreen", "DISPLAY": ":0"})
    assert not gui_libs.uses_xcb({"WAYLAND_DISPLAY": "wayland-0"})
    assert not gui_libs.uses_xcb({})


@pytest.mark.skipif(shutil.which("gcc") is None or shutil.which("ldd") is None,
                    reason="needs gcc and ldd to build a plugin with a missing dependency")
def test_a_plugin_whose_dependency_is_gone_is_reported(tmp_path):
    """A real shared object linked against a library that is then removed: what the loader
    would fail on is what the check reports."""
    (tmp_path / "dep.c").write_text("int dep(void) { return 1; }\n")
    (tmp_path / "plugin.c").write_text("int dep(void); int plugin(void) { return dep(); }\n")
    dep = tmp_path / "libnpuc-absent.so.3"
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(dep), "-Wl,-soname,libnpuc-absent.so.3",
                    str(tmp_path / "dep.c")], check=True)
    plugin = tmp_path / "libqfake.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(plugin), str(tmp_path / "plugin.c"),
                    str(dep)], check=True)
    dep.unlink()
    assert gui_libs.missing_xcb_libraries(plugin) == ["libnpuc-absent.so.3"]


def test_the_check_agrees_with_the_loader_on_this_machine():
    """What the check says is missing here cannot be loaded, and the plugin's other
    dependencies can (the dynamic loader is the judge, not our list)."""
    pytest.importorskip("PySide6")
    missing = gui_libs.missing_xcb_libraries()
    assert missing is not None, "PySide6 is installed but its xcb plugin was not found"
    for soname in missing:
        with pytest.raises(OSError):
            ctypes.CDLL(soname)
    for soname in set(gui_libs.PACKAGES) - set(missing):
        if soname in ("libGL.so.1", "libEGL.so.1"):
            continue  # may load a driver; their absence is what the check is about
        try:
            ctypes.CDLL(soname)
        except OSError:
            # not on the list ldd printed for this PySide6 build: fine only if ldd did not need it
            ldd = subprocess.run(["ldd", str(gui_libs.xcb_plugin())], check=False,
                                 capture_output=True,
                                 text=True).stdout
            assert soname not in ldd, f"{soname} cannot load but the check did not report it"


def test_gui_on_an_x_display_says_what_to_install_or_goes_on(monkeypatch, capsys):
    """`gui` with an X display: when a library is missing here (this machine lacks two xcb-util
    libraries), it stops with exit 2 and the install line before Qt aborts; when none is, the
    check lets it through."""
    pytest.importorskip("PySide6")
    from npu_console.cli.gui_cmd import xcb_libraries_missing

    monkeypatch.delenv("QT_QPA_PLATFORM", raising=False)
    monkeypatch.setenv("DISPLAY", ":77")
    missing = gui_libs.missing_xcb_libraries()
    if not missing:
        assert xcb_libraries_missing() is False
        return
    res = subprocess.run([sys.executable, "-m", "npu_console.cli.main", "gui"],
                         check=False, capture_output=True, text=True, timeout=120,
                         env={**os.environ, "DISPLAY": ":77", "QT_QPA_PLATFORM": ""})
    assert res.returncode == 2, res.stderr
    assert "Traceback" not in res.stderr and "qt.qpa.plugin" not in res.stderr
    distro = gui_libs.detect_distro(gui_libs.read_os_release())
    cmd = gui_libs.install_command(missing, distro)
    assert (cmd or missing[0]) in res.stderr
    assert "QT_QPA_PLATFORM=offscreen" in res.stderr and "npu-console serve" in res.stderr


def test_doctor_names_the_missing_libraries_with_the_fix(tmp_path):
    pytest.importorskip("PySide6")
    from npu_console.engine.doctor import check_xcb_libraries

    check = check_xcb_libraries(str(OS_RELEASE / "openeuler2203"))
    missing = gui_libs.missing_xcb_libraries()
    if not missing:
        assert check.status == "ok"
        return
    assert check.status == "warn" and missing[0] in check.detail
    assert check.fix == gui_libs.install_command(
        missing, gui_libs.detect_distro(gui_libs.read_os_release(OS_RELEASE / "openeuler2203")))
    assert check.fix.startswith("sudo dnf install -y ")

