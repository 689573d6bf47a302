"""The design rules that keep the engine headless: nothing under engine/ imports Qt, the console
or the CLI (cli/, the entry point, sits above both and may import them); the console does not
import the CLI either."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from support.imports import resolve_relative

ROOT = Path(__file__).resolve().parent.parent
ENGINE = ROOT / "engine"
QT_MODULES = ("PySide6", "PyQt5", "PyQt6", "pyqtgraph", "qasync")
CONSOLE = "npu_console.console"
CLI = "npu_console.cli"


def resolve_from(node: ast.ImportFrom, path: Path, root: Path = ROOT) -> str | None:
    """The absolute module a `from ... import` names, a relative one resolved against the file's
    place in the checkout (engine/x.py is npu_console.engine.x); None past the top."""
    rel = path.resolve().relative_to(root.resolve()).with_suffix("").parts
    # an __init__.py's package is its folder, as a module's is
    return resolve_relative(node, ["npu_console", *rel[:-1]])


def _imported_names(path: Path, root: Path) -> list[str]:
    """Every module a file imports, anywhere in it, relative ones resolved; `from .. import
    console` also yields the package it names as an imported name."""
    names = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and (module := resolve_from(node, path, root)):
            names += [module, *(f"{module}.{a.name}" for a in node.names)]
    return names


def _under(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def _engine_offenders(root: Path) -> list[str]:
    offenders = []
    for path in root.rglob("*.py"):
        offenders += [f"{path.relative_to(root.parent)}: {n}"
                      for n in _imported_names(path, root.parent)
                      if n.split(".")[0] in QT_MODULES or _under(n, CONSOLE) or _under(n, CLI)]
    return offenders


def _console_offenders(root: Path) -> list[str]:
    return [f"{path.relative_to(root.parent)}: {n}" for path in root.rglob("*.py")
            for n in _imported_names(path, root.parent) if _under(n, CLI)]


def test_no_engine_module_imports_qt_the_console_or_the_cli():
    assert not _engine_offenders(ENGINE)


def test_no_console_module_imports_the_cli():
    assert not _console_offenders(ROOT / "console")


def test_the_engine_bar_sees_a_relative_import_of_the_console(tmp_path):
    """Imports inside the package are relative; the bar resolves them, whichever form."""
    (tmp_path / "engine" / "api").mkdir(parents=True)
    (tmp_path / "engine" / "api" / "x.py").write_text(
        "def f():\n    from ...console.app import run\n")
    (tmp_path / "engine" / "y.py").write_text("from .. import console\n")
    (tmp_path / "engine" / "z.py").write_text("from .runtime.types import EngineError\n")
    (tmp_path / "engine" / "w.py").write_text("def f():\n    from ..cli.gui_cmd import run\n")
    assert sorted(_engine_offenders(tmp_path / "engine")) == [
        "engine/api/x.py: npu_console.console.app", "engine/api/x.py: npu_console.console.app.run",
        "engine/w.py: npu_console.cli.gui_cmd", "engine/w.py: npu_console.cli.gui_cmd.run",
        "engine/y.py: npu_console.console"]


def test_the_console_bar_sees_a_relative_import_of_the_cli(tmp_path):
    (tmp_path / "console" / "pages").mkdir(parents=True)
    (tmp_path / "console" / "pages" / "p.py").write_text(
        "from ...cli.common import add_model_args\nfrom ...engine.paths import DEMO_MODEL_DIR\n")
    (tmp_path / "console" / "q.py").write_text("from .. import cli\n")
    assert sorted(_console_offenders(tmp_path / "console")) == [
        "console/pages/p.py: npu_console.cli.common",
        "console/pages/p.py: npu_console.cli.common.add_model_args",
        "console/q.py: npu_console.cli"]


def test_importing_the_engine_api_and_cli_loads_no_qt():
    code = ("import sys, npu_console.engine.api.app, npu_console.engine.runtime.engine,"
            " npu_console.engine.telemetry, npu_console.cli.main;"
            "npu_console.cli.main.build_parser();"
            f"bad=[m for m in sys.modules if m.split('.')[0] in {QT_MODULES!r}"
            f" or m.startswith('{CONSOLE}')];"
            "print(bad); sys.exit(1 if bad else 0)")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         check=False)
    assert res.returncode == 0, res.stdout + res.stderr


# A stand-in for an install without the `gui` extra: a meta-path finder that refuses the GUI's
# modules, as if PySide6, pyqtgraph and qasync were not installed (the slow test in
# tests/test_qt_free_install.py checks the real thing in a fresh venv).
_NO_QT = (
    "import sys, importlib.abc\n"
    "class _NoQt(importlib.abc.MetaPathFinder):\n"
    "    def find_spec(self, name, path=None, target=None):\n"
    "        if name.split('.')[0] in ('PySide6', 'pyqtgraph', 'qasync'):\n"
    "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
    "        return None\n"
    "sys.meta_path.insert(0, _NoQt())\n"
)


def _headless(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", _NO_QT + code], capture_output=True, text=True,
                          timeout=300, check=False, cwd=ENGINE.parent)


def test_every_engine_module_imports_without_the_gui_extra():
    """Nothing under engine/ or cli/ needs Qt at import time, not just the entry points: every
    module imports while PySide6 / pyqtgraph / qasync are absent."""
    code = ("import importlib, pkgutil, npu_console.engine as engine, npu_console.cli as cli\n"
            "bad = []\n"
            "mods = [*pkgutil.walk_packages(engine.__path__, 'npu_console.engine.'),\n"
            "        *pkgutil.walk_packages(cli.__path__, 'npu_console.cli.')]\n"
            "for m in mods:\n"
            "    try:\n"
            "        importlib.import_module(m.name)\n"
            "    except ModuleNotFoundError as exc:\n"
            "        if exc.name.split('.')[0] in ('PySide6', 'pyqtgraph', 'qasync'):\n"
            "            bad.append(f'{m.name}: {exc.name}')\n"
            f"bad += [m for m in sys.modules if m.split('.')[0] in {QT_MODULES!r}\n"
            f"        or m.startswith('{CONSOLE}')]\n"
            "n = sum(1 for m in sys.modules if m.startswith('npu_console.engine.'))\n"
            "print(bad, n); sys.exit(1 if bad or n < 100 else 0)\n")
    res = _headless(code)
    assert res.returncode == 0, res.stdout + res.stderr[-3000:]


def test_every_cli_command_but_gui_builds_and_answers_help_without_qt():
    code = ("import contextlib, io, npu_console.cli.main as m\n"
            "p = m.build_parser()\n"
            "for cmd in m.COMMANDS:\n"
            "    if cmd == 'gui':\n"
            "        continue\n"
            "    with contextlib.redirect_stdout(io.StringIO()):\n"
            "        try:\n"
            "            m.main([cmd, '--help'])\n"
            "        except SystemExit as exc:\n"
            "            assert exc.code == 0, (cmd, exc.code)\n"
            f"bad = [m for m in sys.modules if m.split('.')[0] in {QT_MODULES!r}\n"
            f"       or m.startswith('{CONSOLE}')]\n"
            "print(bad); sys.exit(1 if bad else 0)\n")
    res = _headless(code)
    assert res.returncode == 0, res.stdout + res.stderr[-3000:]


def test_gui_without_the_extra_says_how_to_get_it_in_one_line():
    res = _headless("import npu_console.cli.main as m; sys.exit(m.main(['gui']))")
    assert res.returncode == 2, res.stdout + res.stderr
    assert "Traceback" not in res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert "pip install 'npu-console[gui]'" in lines[0] and "PySide6" in lines[0]


def test_doctor_reports_the_gui_extra():
    res = _headless("import json, npu_console.engine.doctor as d; c = d.check_gui_extra(); "
                    "print(json.dumps([c.status, c.detail, c.fix]))")
    assert res.returncode == 0, res.stderr[-2000:]
    import json

    status, detail, fix = json.loads(res.stdout)
    assert status == "info" and "not installed" in detail and "npu-console[gui]" in fix
    import importlib.util

    from npu_console.engine.doctor import check_gui_extra

    if importlib.util.find_spec("PySide6") is None:
        return  # a Qt-free venv (tests/test_qt_free_install.py runs this file there)
    here = check_gui_extra()  # make installs .[gui,dev]
    assert here.status == "ok" and "PySide6 6." in here.detail, here


def absolute_imports(path: Path) -> list[str]:
    """The modules a file imports by absolute name, anywhere in it (functions too)."""
    names = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.append(node.module)
    return names


def project_imports(path: Path, root: Path = ROOT) -> list[str]:
    """The modules a file under engine/ or console/ imports, anywhere in it, by full name:
    `from ...engine.runtime.types import X` in console/pages/ is npu_console.engine.runtime.types,
    as the absolute form would be."""
    names = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and (module := resolve_from(node, path, root)):
            names.append(module)
    return names


def test_no_test_imports_another_test_module():
    """What tests share lives in tests/support (helpers) or tests/fakes (stand-ins for parts
    that cannot exist here), never in another test module."""
    tests = Path(__file__).resolve().parent
    offenders = []
    for path in tests.rglob("*.py"):
        offenders += [f"{path.relative_to(tests)}: {n}" for n in absolute_imports(path)
                      if n.split(".")[0] in ("tests", "conftest")
                      or n.split(".")[0].startswith("test_")]
    assert not offenders


def test_shipped_code_never_reaches_into_shared():
    """../shared holds this workspace's test assets; no string the product runs with may name it
    (docstrings may say so)."""
    hits = []
    for pkg in ("engine", "console", "cli", "npu_console"):
        for path in (ROOT / pkg).rglob("*.py"):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            docs = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr)}
            hits += [f"{path.relative_to(ROOT)}:{n.lineno}" for n in ast.walk(tree)
                     if isinstance(n, ast.Constant) and isinstance(n.value, str)
                     and id(n) not in docs and (n.value == "shared" or "../shared" in n.value)]
    assert not hits, hits


# What pages and widgets may take from the engine: its contract's types and a few pure helpers
# (a list that only shrinks as the Qt-free models take these over). Never the runtime, the
# kernels, the quantizer's workflow, torch.
VIEW_ENGINE_IMPORTS = {
    "npu_console.engine.runtime.types", "npu_console.engine.models",
    "npu_console.engine.quant.head", "npu_console.engine.api.ports",
    "npu_console.engine.remote.fleet", "npu_console.engine.remote.probe",
    "npu_console.engine.telemetry.npu_health", "npu_console.engine.ring",
}


def _view_offenders(root: Path) -> list[str]:
    bad = []
    for folder in ("pages", "widgets"):
        for path in sorted((root / folder).glob("*.py")):
            for n in project_imports(path, root.parent):
                engine = n.startswith("npu_console.engine") and n not in VIEW_ENGINE_IMPORTS
                if engine or n.split(".")[0] in ("torch", "torch_npu", "transformers"):
                    bad.append(f"{folder}/{path.name}: {n}")
    return bad


def test_pages_and_widgets_import_no_engine_internals():
    bad = _view_offenders(ROOT / "console")
    assert not bad, bad


def test_the_view_bar_sees_a_relative_import_of_the_runtime(tmp_path):
    (tmp_path / "console" / "pages").mkdir(parents=True)
    (tmp_path / "console" / "pages" / "p.py").write_text(
        "from ...engine.runtime.types import EngineError\n"
        "from ...engine.runtime.engine import LocalEngine\n"
        "from ..chat_store import export\n")
    assert _view_offenders(tmp_path / "console") == [
        "pages/p.py: npu_console.engine.runtime.engine"]
