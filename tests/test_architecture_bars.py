"""Architecture bars, checked on the source like tests/test_layering.py (issue 22):

- no import cycles among engine/, console/ and cli/ modules (every import that runs, module
  level or inside a function; imports under `if TYPE_CHECKING:` excepted);
- no Python file over 500 lines in engine/, console/ or cli/;
- no page starts a thread (console/threads.py, the job runner and the bridge do).
"""

from __future__ import annotations

import ast
from pathlib import Path

from support.imports import resolve_relative

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("engine", "console", "cli")
MAX_LINES = 500


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(["npu_console", *parts])


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")}


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _resolve(node: ast.ImportFrom, module: str, is_package: bool) -> str | None:
    """The absolute module a `from ... import` in `module` names (relative ones resolved as
    Python does: `..` from npu_console.console.pages.chat is npu_console.console)."""
    return resolve_relative(node, module.split(".") if is_package else module.split(".")[:-1])


def _imports(path: Path, known: dict[str, Path], module: str | None = None) -> set[str]:
    """The project modules `path` imports when it runs (TYPE_CHECKING blocks skipped); relative
    imports resolve against `module`, by default the file's own name in the checkout."""
    found: set[str] = set()
    module = module or _module_name(path)
    is_package = path.name == "__init__.py"

    def visit(nodes: list[ast.stmt] | list[ast.AST]) -> None:
        for node in nodes:
            if isinstance(node, ast.If) and _is_type_checking(node.test):
                visit(node.orelse)
                continue
            if isinstance(node, ast.Import):
                found.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom) and (
                    base := _resolve(node, module, is_package)):
                subs = {f"{base}.{a.name}" for a in node.names} & known.keys()
                # `from pkg import submodule` imports the submodule; `from m import name`, m
                found.update(subs or {base})
                if len(subs) < len(node.names):
                    found.add(base)
            visit(list(ast.iter_child_nodes(node)))

    visit(ast.parse(path.read_text(encoding="utf-8")).body)
    return {m for m in found if m in known}


def _cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[frozenset[str]] = []
    counter = 0
    for root, targets in graph.items():
        if root in index:
            continue
        work = [(root, iter(sorted(targets)))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = set()
                while True:
                    x = stack.pop()
                    on_stack.discard(x)
                    comp.add(x)
                    if x == v:
                        break
                if len(comp) > 1:
                    out.append(frozenset(comp))
    return out


def test_the_cycle_finder_finds_a_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [frozenset({"a", "b", "c"})]


def test_no_import_cycles_among_engine_and_console_modules():
    known = _modules()
    graph = {m: _imports(p, known) - {m} for m, p in known.items()}
    assert not [sorted(c) for c in _cycles(graph)]


def test_the_models_package_does_not_import_quant():
    """The loader finds INT8 exports through engine.models.formats (quant builds on models)."""
    known = _modules()
    bad = {m: sorted(i for i in _imports(p, known) if i.startswith("npu_console.engine.quant"))
           for m, p in known.items() if m.startswith("npu_console.engine.models")}
    assert not {m: v for m, v in bad.items() if v}


def _importers_of(prefix: str, inside: str) -> dict[str, list[str]]:
    """The modules under `inside` that import a module under `prefix`."""
    known = _modules()
    bad = {m: sorted(i for i in _imports(p, known) if i == prefix or i.startswith(prefix + "."))
           for m, p in known.items() if m == inside or m.startswith(inside + ".")}
    return {m: v for m, v in bad.items() if v}


def test_the_runtime_does_not_import_quant():
    """The runtime runs INT8 layers through engine.kernels (Int8Linear, the native kernels);
    quant builds on kernels as the runtime does, never the runtime on quant."""
    assert not _importers_of("npu_console.engine.quant", "npu_console.engine.runtime")


def test_the_kernels_import_neither_quant_nor_the_runtime():
    """engine.kernels sits below both of its users."""
    assert not _importers_of("npu_console.engine.quant", "npu_console.engine.kernels")
    assert not _importers_of("npu_console.engine.runtime", "npu_console.engine.kernels")


def test_the_import_bar_sees_an_import_inside_a_function(tmp_path, monkeypatch):
    """The bars read imports anywhere in a module (a lazy import counts), but not under
    TYPE_CHECKING: a module written both ways is caught once."""
    src = tmp_path / "m.py"
    src.write_text("from typing import TYPE_CHECKING\n"
                   "if TYPE_CHECKING:\n    from npu_console.engine.quant import config\n"
                   "def f():\n    from npu_console.engine.quant.qlinear import QuantLinear\n")
    known = {"npu_console.engine.quant.qlinear": src, "npu_console.engine.quant.config": src}
    assert _imports(src, known, "npu_console.engine.m") == {"npu_console.engine.quant.qlinear"}


def test_the_import_bar_resolves_relative_imports(tmp_path):
    """engine/ and console/ import each other relatively: `..quant.qlinear` from the runtime is
    npu_console.engine.quant.qlinear, `from .. import kernels` the kernels package."""
    src = tmp_path / "m.py"
    src.write_text("from ..quant.qlinear import QuantLinear\nfrom .. import kernels\n"
                   "from . import sibling\nfrom ...console.app import run\n")
    known = {m: src for m in ("npu_console.engine.quant.qlinear", "npu_console.engine.kernels",
                              "npu_console.engine.runtime.sibling", "npu_console.console.app")}
    assert _imports(src, known, "npu_console.engine.runtime.m") == set(known)
    graph = {"npu_console.engine.runtime.m": _imports(src, known, "npu_console.engine.runtime.m"),
             "npu_console.engine.quant.qlinear": {"npu_console.engine.runtime.m"}}
    graph.update({m: set() for m in known if m not in graph})
    assert _cycles(graph) == [frozenset({"npu_console.engine.runtime.m",
                                         "npu_console.engine.quant.qlinear"})]


def test_no_python_file_over_500_lines():
    long = {}
    for pkg in PACKAGES:
        for p in (ROOT / pkg).rglob("*.py"):
            rel = p.relative_to(ROOT).as_posix()
            n = len(p.read_text(encoding="utf-8").splitlines())
            if n > MAX_LINES:
                long[rel] = n
    assert not long, f"split these (at most {MAX_LINES} lines): {long}"


_THREAD_CALLS = {"Thread", "QThread", "start_new_thread", "run_in_fresh_thread", "start_thread",
                 "ThreadPoolExecutor", "QThreadPool"}


def _starts_threads(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    hits = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
            if name in _THREAD_CALLS:
                hits.append(f"{path.name}:{node.lineno} {name}()")
    return hits


def test_the_thread_check_sees_a_thread():
    src = ROOT / "console" / "threads.py"
    assert _starts_threads(src)


def test_no_page_starts_a_thread():
    """Pages hand work to the job runner (console/jobs.py), a service (console/server_service.py)
    or the bridge; none creates a thread itself."""
    hits = []
    for p in sorted((ROOT / "console" / "pages").glob("*.py")):
        hits += _starts_threads(p)
    assert not hits, hits


def test_one_route_back_to_the_gui_thread():
    """Worker threads hand news to the GUI thread through console/gui_thread.post alone: no
    other console module wires a queued (cross-thread) connection of its own."""
    hits = []
    for p in sorted((ROOT / "console").rglob("*.py")):
        if p.name == "gui_thread.py":
            continue
        for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1):
            if "QueuedConnection" in line:
                hits.append(f"{p.relative_to(ROOT)}:{i}")
    assert not hits, f"use console.gui_thread.post instead: {hits}"
    assert "QueuedConnection" in (ROOT / "console" / "gui_thread.py").read_text(encoding="utf-8")


# The console's Qt-free models (napari's split): they own state and announce changes; pages
# render them. None imports Qt, a page or a widget.
CONSOLE_MODELS = ("api_key_store", "bench_history", "bench_store", "chat_session", "chat_store",
                  "demo_feed", "engines", "events", "loads", "presets", "quant_runs", "remote_jobs",
                  "server_service", "servers", "threads", "variants")
_QT = ("PySide6", "PyQt5", "PyQt6", "pyqtgraph", "qasync")


def _all_imports(path: Path) -> set[str]:
    """Every module name an import statement in `path` names (third-party ones too; relative
    ones by their full name)."""
    names: set[str] = set()
    module, is_package = _module_name(path), path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and (base := _resolve(node, module, is_package)):
            # `from . import pages` names the pages package
            names.update([base, *(f"{base}.{a.name}" for a in node.names)])
    return names


def test_the_console_models_import_no_qt_no_page_and_no_widget():
    bad = {}
    for name in CONSOLE_MODELS:
        path = ROOT / "console" / f"{name}.py"
        assert path.is_file(), f"{name} is listed as a model but is gone"
        hits = sorted(m for m in _all_imports(path)
                      if m.split(".")[0] in _QT or m.startswith(("npu_console.console.pages",
                                                                 "npu_console.console.widgets")))
        if hits:
            bad[name] = hits
    assert not bad, bad


# no function in console/ over 60 lines: constructors are split into named builders
# (console/pages/*_layout.py). An exception would be listed here, and could only shrink.
MAX_FUNCTION_LINES = 60
LONG_FUNCTIONS: dict[str, int] = {}


def _function_lengths(path: Path) -> dict[str, int]:
    out: dict[str, int] = {}
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            key = f"{path.relative_to(ROOT).as_posix()}:{node.name}"
            out[key] = max(out.get(key, 0), node.end_lineno - node.lineno + 1)
    return out


def test_no_console_function_over_60_lines_but_the_listed_ones():
    lengths: dict[str, int] = {}
    for p in sorted((ROOT / "console").rglob("*.py")):
        lengths.update(_function_lengths(p))
    too_long = {k: n for k, n in lengths.items() if n > MAX_FUNCTION_LINES
                and n > LONG_FUNCTIONS.get(k, MAX_FUNCTION_LINES)}
    assert not too_long, f"split these into named builders (at most {MAX_FUNCTION_LINES}): " \
                         f"{too_long}"
    fixed = [k for k in LONG_FUNCTIONS if lengths.get(k, 0) <= MAX_FUNCTION_LINES]
    assert not fixed, f"now short: take them off LONG_FUNCTIONS: {fixed}"


# no page over 300 lines (an exception would be listed here, and could only shrink)
MAX_PAGE_LINES = 300
LONG_PAGES: dict[str, int] = {}


def test_no_page_over_300_lines_but_the_listed_ones():
    sizes = {p.name: len(p.read_text(encoding="utf-8").splitlines())
             for p in (ROOT / "console" / "pages").glob("*.py")}
    grown = {n: s for n, s in sizes.items() if s > max(MAX_PAGE_LINES, LONG_PAGES.get(n, 0))}
    assert not grown, f"split these pages (at most {MAX_PAGE_LINES} lines): {grown}"
    fixed = [n for n in LONG_PAGES if sizes.get(n, 0) <= MAX_PAGE_LINES]
    assert not fixed, f"now short: take them off LONG_PAGES: {fixed}"
