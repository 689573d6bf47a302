"""What the desktop console needs beyond the engine, found before Qt looks for it: the `gui`
extra's Python modules, and the system libraries Qt's xcb platform plugin needs.

Without one of those libraries (libxcb-cursor0 is the usual one on a server) Qt prints "Could
not load the Qt platform plugin xcb" and aborts the process (exit 134). `gui` and `doctor` find
the missing ones first and say which package installs them on this distribution. It sits in the
engine, not in cli/, because `doctor` (engine/doctor.py) checks the same things. Nothing here
imports Qt: PySide6's plugin is found on disk and its dependencies read with `ldd`, the way
the dynamic loader will resolve them when Qt opens the plugin.
"""

from __future__ import annotations

import ctypes.util
import importlib.util
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

# soname -> (Debian/Ubuntu package, RHEL/openEuler/Kylin package). The xcb plugin's own
# dependencies and those of libQt6XcbQpa it loads (ldd of PySide6 6.x's libqxcb.so).
PACKAGES: dict[str, tuple[str, str]] = {
    "libxcb-cursor.so.0": ("libxcb-cursor0", "xcb-util-cursor"),
    "libxcb-icccm.so.4": ("libxcb-icccm4", "xcb-util-wm"),
    "libxcb-keysyms.so.1": ("libxcb-keysyms1", "xcb-util-keysyms"),
    "libxcb-image.so.0": ("libxcb-image0", "xcb-util-image"),
    "libxcb-render-util.so.0": ("libxcb-render-util0", "xcb-util-renderutil"),
    "libxcb-util.so.1": ("libxcb-util1", "xcb-util"),
    "libxkbcommon-x11.so.0": ("libxkbcommon-x11-0", "libxkbcommon-x11"),
    "libxkbcommon.so.0": ("libxkbcommon0", "libxkbcommon"),
    "libxcb-randr.so.0": ("libxcb-randr0", "libxcb"),
    "libxcb-shape.so.0": ("libxcb-shape0", "libxcb"),
    "libxcb-xkb.so.1": ("libxcb-xkb1", "libxcb"),
    "libxcb-sync.so.1": ("libxcb-sync1", "libxcb"),
    "libxcb-xfixes.so.0": ("libxcb-xfixes0", "libxcb"),
    "libxcb-shm.so.0": ("libxcb-shm0", "libxcb"),
    "libxcb-render.so.0": ("libxcb-render0", "libxcb"),
    "libxcb.so.1": ("libxcb1", "libxcb"),
    "libX11-xcb.so.1": ("libx11-xcb1", "libX11-xcb"),
    "libX11.so.6": ("libx11-6", "libX11"),
    "libGL.so.1": ("libgl1", "libglvnd-glx"),
    "libEGL.so.1": ("libegl1", "libglvnd-egl"),
    "libfontconfig.so.1": ("libfontconfig1", "fontconfig"),
    "libfreetype.so.6": ("libfreetype6", "freetype"),
    "libdbus-1.so.3": ("libdbus-1-3", "dbus-libs"),
    "libglib-2.0.so.0": ("libglib2.0-0", "glib2"),
    "libgthread-2.0.so.0": ("libglib2.0-0", "glib2"),
}

# what the `gui` extra installs (pyproject.toml): the console needs all three
GUI_MODULES = ("PySide6", "pyqtgraph", "qasync")


def missing_gui_modules() -> list[str]:
    """The GUI extra's modules that cannot be imported here (found, not imported: no Qt load)."""
    missing = []
    for name in GUI_MODULES:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            missing.append(name)
    return missing


_DEBIAN = {"debian", "ubuntu", "linuxmint", "kylin-desktop", "uos", "deepin"}
_REDHAT = {"rhel", "centos", "fedora", "rocky", "almalinux", "openeuler", "kylin", "ol",
           "anolis", "euleros"}


@dataclass(frozen=True)
class Distro:
    name: str  # PRETTY_NAME, for the message
    family: str  # "debian", "redhat" or "" (unknown: the sonames are listed instead)
    tool: str  # "apt-get", "dnf", "yum" or ""


def read_os_release(path: str | Path = "/etc/os-release") -> dict[str, str]:
    """KEY=value lines (values optionally quoted); {} when the file is missing."""
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return {}
    out = {}
    for line in text.splitlines():
        m = re.match(r"\s*([A-Z0-9_]+)=(.*)$", line)
        if m:
            out[m.group(1)] = m.group(2).strip().strip("\"'")
    return out


def detect_distro(os_release: dict[str, str]) -> Distro:
    # ID_LIKE first: Kylin's desktop edition says ID=kylin ID_LIKE=debian, its server
    # edition (the one on Ascend servers, openEuler-based) ID=kylin alone
    own = os_release.get("ID", "").lower()
    ids = os_release.get("ID_LIKE", "").lower().split() + [own]
    name = os_release.get("PRETTY_NAME") or os_release.get("NAME") or "this system"
    for i in ids:
        if i in _DEBIAN:
            return Distro(name, "debian", "apt-get")
        if i in _REDHAT:
            # RHEL / CentOS 7 has yum only; everything later (and openEuler, Kylin V10) has dnf
            major = os_release.get("VERSION_ID", "").split(".")[0]
            old = own in {"rhel", "centos", "ol"} and major.isdigit() and int(major) < 8
            return Distro(name, "redhat", "yum" if old else "dnf")
    return Distro(name, "", "")


def install_command(missing: list[str], distro: Distro) -> str | None:
    """The one line that installs the packages holding `missing` sonames, or None when the
    distribution (or a soname) is unknown."""
    if not distro.family or not missing:
        return None
    col = 0 if distro.family == "debian" else 1
    pkgs = []
    for soname in missing:
        if soname not in PACKAGES:
            return None
        pkg = PACKAGES[soname][col]
        if pkg not in pkgs:
            pkgs.append(pkg)
    return f"sudo {distro.tool} install -y {' '.join(pkgs)}"


def xcb_plugin() -> Path | None:
    """PySide6's libqxcb.so, found without importing PySide6 (None: no PySide6 / no plugin)."""
    try:
        spec = importlib.util.find_spec("PySide6")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for root in spec.submodule_search_locations:
        plugin = Path(root) / "Qt" / "plugins" / "platforms" / "libqxcb.so"
        if plugin.is_file():
            return plugin
    return None


def parse_ldd(text: str) -> list[str]:
    """The sonames ldd reports as "not found", once each, in order."""
    out = []
    for line in text.splitlines():
        m = re.match(r"\s*(\S+)\s+=>\s+not found", line)
        if m and m.group(1) not in out:
            out.append(m.group(1))
    return out


def _by_find_library() -> list[str]:
    """Without ldd: the known list, looked up the way ctypes does (ldconfig's cache)."""
    missing = []
    for soname in PACKAGES:
        stem = soname[3:].split(".so")[0]  # libxcb-cursor.so.0 -> xcb-cursor
        if ctypes.util.find_library(stem) is None:
            missing.append(soname)
    return missing


def missing_xcb_libraries(plugin: Path | None = None) -> list[str] | None:
    """Sonames the xcb plugin needs that the loader cannot find; None when there is no plugin
    to check (no PySide6 here)."""
    plugin = plugin or xcb_plugin()
    if plugin is None:
        return None
    ldd = shutil.which("ldd")
    if ldd is None:
        return _by_find_library()
    try:
        res = subprocess.run([ldd, str(plugin)], check=False, capture_output=True,
                             text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return _by_find_library()
    return parse_ldd(res.stdout + res.stderr)


def uses_xcb(env=os.environ) -> bool:
    """Whether Qt will open the xcb plugin: an X display and no other platform chosen (a
    Wayland session without an X display uses the wayland plugin)."""
    chosen = env.get("QT_QPA_PLATFORM", "")
    if chosen:
        return chosen.split(";")[0].split(":")[0] == "xcb"
    return bool(env.get("DISPLAY"))


def missing_message(missing: list[str], distro: Distro, prefix: str = "") -> str:
    """What `gui` prints: what is missing, the install line, and the ways on without it."""
    cmd = install_command(missing, distro)
    lacks = ", ".join(missing)
    lines = [f"{prefix}Qt's xcb platform plugin cannot load: the system lacks {lacks}."]
    if cmd:
        lines.append(f"  Install them ({distro.name}):  {cmd}")
    else:
        lines.append("  Install the packages that provide them with the system's package manager.")
    lines.append("  or render without a screen:     "
                 "QT_QPA_PLATFORM=offscreen npu-console gui --screenshot-dir shots")
    lines.append("  or use the headless HTTP API:   npu-console serve")
    return "\n".join(lines)
