"""`npu-console gui`: the desktop console (PySide6). Qt is imported only when it runs."""

from __future__ import annotations

import argparse
import os
import sys

NO_GUI_EXTRA = ("npu-console gui: the desktop console is not installed here (no {missing}): "
                "pip install 'npu-console[gui]' (a checkout: pip install -e '.[gui]'); "
                "serve, generate, chat, smi, quantize, eval and bench work without it")

NO_DISPLAY = """\
npu-console gui: no display found (DISPLAY and WAYLAND_DISPLAY are unset).
  Run it under a virtual display:   xvfb-run npu-console gui
  or render without a screen:       QT_QPA_PLATFORM=offscreen npu-console gui --screenshot-dir shots
  or use the headless HTTP API:     npu-console serve"""


def register(subparsers) -> None:
    p = subparsers.add_parser("gui", help="open the desktop console",
                              description="Open the desktop console (dashboard, models, chat).")
    p.add_argument("--model", metavar="PATH", default=None,
                   help="model folder or .gguf file to load at start (default: the built-in "
                        "demo model); --model '' starts with none")
    p.add_argument("--note", default=None,
                   help="a line for the status bar at start (`make run` says why it fell back "
                        "to the demo model)")
    p.add_argument("--replay", metavar="CAPTURE", nargs="+", default=[],
                   help="show saved `npu-smi info` captures (files, or folders with `info -t` "
                        "sub-command captures too) on the dashboard instead of live data")
    p.add_argument("--screenshot-dir", metavar="DIR", default=None,
                   help="save a PNG of every page into DIR once the model is loaded, then exit")
    p.add_argument("--theme", choices=("dark", "light"), default=None)
    p.add_argument("--load-as", choices=("float", "int8"), default="float",
                   help="int8: a GGUF --model opens straight in INT8 weights (W8A16, a scale "
                        "per 32 values; no float copy); the Models page's Weights box reloads "
                        "it in float")
    p.set_defaults(func=run)


def has_display(env=os.environ) -> bool:
    if env.get("QT_QPA_PLATFORM"):
        return True  # the user chose a platform plugin (offscreen, xcb, wayland, ...)
    return bool(env.get("DISPLAY") or env.get("WAYLAND_DISPLAY"))


def xcb_libraries_missing(env=os.environ) -> bool:
    """Says (and returns True) when Qt would abort opening its xcb plugin for want of a system
    library: found here first, with the distribution's install line."""
    from ..engine import gui_libs

    if not gui_libs.uses_xcb(env):
        return False
    missing = gui_libs.missing_xcb_libraries()
    if not missing:
        return False
    distro = gui_libs.detect_distro(gui_libs.read_os_release())
    print(gui_libs.missing_message(missing, distro, prefix="npu-console gui: "), file=sys.stderr)
    return True


def run(args: argparse.Namespace) -> int:
    from ..engine.gui_libs import missing_gui_modules
    from .main import CliError

    missing = missing_gui_modules()
    if missing:
        print(NO_GUI_EXTRA.format(missing=", ".join(missing)), file=sys.stderr)
        return 2
    if not has_display():
        print(NO_DISPLAY, file=sys.stderr)
        return 2
    if xcb_libraries_missing():
        return 2
    for f in args.replay:
        if not os.path.exists(f):
            raise CliError(f"replay capture not found: {f}")
    if args.model and not os.path.exists(args.model):
        raise CliError(f"model folder or file not found: {args.model}")
    from ..console.app import LaunchOptions

    options = LaunchOptions(model=args.model, replay=list(args.replay), theme=args.theme,
                            note=args.note, load_as=args.load_as)
    if args.screenshot_dir:
        from ..console.screenshots import capture_all

        paths = capture_all(options, args.screenshot_dir)
        for p in paths:
            print(p)
        return 0
    from ..console.app import run as run_gui

    return run_gui(options)
