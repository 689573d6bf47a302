"""The design rule that keeps the engine headless: nothing under engine/ imports Qt."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ENGINE = Path(__file__).resolve().parent.parent / "engine"
QT_MODULES = ("PySide6", "PyQt5", "PyQt6", "pyqtgraph", "qasync", "console")


def test_no_engine_module_imports_qt_or_the_console():
    offenders = []
    for path in ENGINE.rglob("*.py"):
        if path.name == "gui_cmd.py":
            continue  # the one CLI entry that launches the console, importing it lazily
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            offenders += [f"{path.relative_to(ENGINE.parent)}: {n}" for n in names
                          if n.split(".")[0] in QT_MODULES]
    assert not offenders


def test_importing_the_engine_api_and_cli_loads_no_qt():
    code = ("import sys, engine.api.app, engine.runtime.engine, engine.telemetry, engine.cli.main;"
            "engine.cli.main.build_parser();"
            f"bad=[m for m in sys.modules if m.split('.')[0] in {QT_MODULES!r}];"
            "print(bad); sys.exit(1 if bad else 0)")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         check=False)
    assert res.returncode == 0, res.stdout + res.stderr
