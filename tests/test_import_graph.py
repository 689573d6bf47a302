"""The import graph of engine/, console/ and cli/ reads from the source tree alone (issue 37).

Inside the package, imports are relative (`from ..runtime.types import X`), so an IDE without
the install, pydeps/grimp or a plain AST reader follows them from the files' places: engine/x.py
is npu_console.engine.x, console/pages/chat.py npu_console.console.pages.chat, cli/main.py
npu_console.cli.main, and `...` from console/pages/ is the checkout's root, i.e. npu_console. Nothing here imports npu_console: one
test builds the graph in a bare `python -I -S`, where it cannot be imported at all.

Only the standard library at module level: that test runs this file with runpy.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("engine", "console", "cli", "assets")
# the folders that hold code (assets/ holds data and the package marker only)
CODE = ("engine", "console", "cli")


def module_file(root: Path, module: str) -> Path | None:
    """The file a module name stands for in the checkout (npu_console.X is ./X for the
    top-level folders, as setup.py maps them); None when there is none."""
    parts = module.split(".")
    if parts[0] != "npu_console":
        return None
    base = root.joinpath(*parts[1:]) if len(parts) > 1 else root / "npu_console"
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(["npu_console", *parts])


def import_graph(root: Path = ROOT) -> tuple[dict[str, set[str]], list[str]]:
    """{module: the project modules it imports} over engine/, console/ and cli/ (every import in
    the file, functions and TYPE_CHECKING blocks too), plus the relative imports that name no
    file."""
    graph: dict[str, set[str]] = {}
    dangling: list[str] = []
    for top in CODE:
        if not (root / top).is_dir():
            continue  # a test's small tree may leave a folder out
        for path in sorted((root / top).rglob("*.py")):
            name = module_name(root, path)
            package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
            edges: set[str] = set()
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Import):
                    edges.update(a.name for a in node.names if module_file(root, a.name))
                    continue
                if not isinstance(node, ast.ImportFrom):
                    continue
                if node.level:
                    if node.level > len(package):
                        dangling.append(f"{name}:{node.lineno}: past the top")
                        continue
                    parts = package[:len(package) - node.level + 1]
                    base = ".".join([*parts, node.module] if node.module else parts)
                else:
                    base = node.module or ""
                if not module_file(root, base):
                    if node.level:
                        dangling.append(f"{name}:{node.lineno}: {base}")
                    continue
                # `from pkg import submodule` is an edge to the submodule, else to pkg
                subs = {f"{base}.{a.name}" for a in node.names
                        if module_file(root, f"{base}.{a.name}")}
                edges.update(subs or {base})
                if len(subs) < len(node.names):
                    edges.add(base)
            graph[name] = edges - {name}
    return graph, dangling


# edges that exist today, across the layers test_layering.py and test_architecture_bars.py
# guard: if the reader stopped resolving relative imports, these would vanish
EXPECTED_EDGES = [
    ("npu_console.console.pages.chat", "npu_console.engine.runtime.types"),
    ("npu_console.console.pages.chat", "npu_console.console.chat_session"),
    ("npu_console.console.pages.chat", "npu_console.console.pages.chat_layout"),
    ("npu_console.console.jobs", "npu_console.engine.runtime.types"),
    ("npu_console.console.theme", "npu_console.engine.paths"),
    ("npu_console.engine.runtime.native_decode", "npu_console.engine.kernels.int8_linear"),
    ("npu_console.engine.runtime.native_decode", "npu_console.engine.kernels.native"),
    ("npu_console.cli.main", "npu_console.cli.errors"),
    ("npu_console.cli.main", "npu_console.engine"),
    ("npu_console.cli.common", "npu_console.engine.paths"),
    ("npu_console.cli.gui_cmd", "npu_console.console.app"),
    ("npu_console.cli.gui_cmd", "npu_console.engine.gui_libs"),
    ("npu_console.engine.doctor", "npu_console.engine.gui_libs"),
    ("npu_console.engine.paths", "npu_console.assets"),
]


def test_the_graph_has_the_edges_the_layering_tests_rely_on():
    graph, _ = import_graph()
    missing = [(a, b) for a, b in EXPECTED_EDGES if b not in graph.get(a, set())]
    assert not missing, missing
    assert sum(len(v) for v in graph.values()) > 500  # about 200 modules, most import others


def test_every_relative_import_names_a_file_in_the_checkout():
    _, dangling = import_graph()
    assert not dangling, dangling


def _reaching(graph: dict[str, set[str]], source: str, *targets: str) -> dict[str, list[str]]:
    """{module under `source`: what it imports under any of `targets`}, the modules that import
    none left out."""
    hits = {m: sorted(t for t in deps if any(t == p or t.startswith(p + ".") for p in targets))
            for m, deps in graph.items() if m == source or m.startswith(source + ".")}
    return {m: v for m, v in hits.items() if v}


def test_the_engine_imports_neither_the_console_nor_the_cli():
    """test_layering.py checks the same from the engine's side: engine/ is the headless bottom
    layer, so nothing in it reaches up into the view or the entry point."""
    graph, _ = import_graph()
    assert _reaching(graph, "npu_console.engine", "npu_console.console", "npu_console.cli") == {}


def test_the_console_does_not_import_the_cli():
    graph, _ = import_graph()
    assert _reaching(graph, "npu_console.console", "npu_console.cli") == {}


def test_the_cli_reaches_the_console_only_through_the_gui_command():
    """Every other command runs without the GUI extra (test_layering.py); `gui` launches the
    console, so it alone imports it (inside run())."""
    graph, _ = import_graph()
    assert _reaching(graph, "npu_console.cli", "npu_console.console") == {
        "npu_console.cli.gui_cmd": ["npu_console.console.app", "npu_console.console.screenshots"]}


def test_no_import_in_the_package_goes_through_the_installed_name():
    """`from npu_console.engine.x import y` resolves only through npu_console/__init__.py's
    __path__; strings naming modules (import_module, `-m`, docstrings) are left as they are."""
    hits = []
    for top in CODE:
        for path in sorted((ROOT / top).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                         [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
                hits += [f"{path.relative_to(ROOT)}:{node.lineno}: {n}" for n in names
                         if n.split(".")[0] == "npu_console"]
    assert not hits, hits


def test_the_reader_catches_a_wrong_relative_import(tmp_path):
    (tmp_path / "engine" / "runtime").mkdir(parents=True)
    (tmp_path / "console").mkdir()
    for p in ("engine/__init__.py", "engine/runtime/__init__.py", "engine/runtime/types.py",
              "console/__init__.py"):
        (tmp_path / p).write_text("")
    (tmp_path / "console" / "a.py").write_text("from ..engine.runtime.types import X\n")
    (tmp_path / "console" / "b.py").write_text("from .engine.runtime.types import X\n")
    (tmp_path / "engine" / "runtime" / "c.py").write_text(
        "def f():\n    from ...console import a\n")
    (tmp_path / "cli").mkdir()
    (tmp_path / "cli" / "__init__.py").write_text("")
    # one dot too many: the form a module moved up out of engine/ keeps by mistake
    (tmp_path / "cli" / "d.py").write_text(
        "from ..engine.runtime.types import X\nfrom ...console import a\n")
    graph, dangling = import_graph(tmp_path)
    assert graph["npu_console.console.a"] == {"npu_console.engine.runtime.types"}
    assert graph["npu_console.engine.runtime.c"] == {"npu_console.console.a"}
    assert graph["npu_console.cli.d"] == {"npu_console.engine.runtime.types"}
    assert dangling == ["npu_console.console.b:1: npu_console.console.engine.runtime.types",
                        "npu_console.cli.d:2: past the top"]


def test_the_graph_builds_without_npu_console_importable():
    """In `python -I -S` (no site-packages, no install, no PYTHONPATH) from outside the
    checkout: the same graph, and npu_console never imported."""
    code = ("import json, runpy, sys\n"
            f"ns = runpy.run_path({str(Path(__file__).resolve())!r})\n"
            f"graph, dangling = ns['import_graph'](ns['Path']({str(ROOT)!r}))\n"
            "assert not any(m.split('.')[0] == 'npu_console' for m in sys.modules)\n"
            "print(json.dumps({k: sorted(v) for k, v in graph.items()}))\n")
    res = subprocess.run([sys.executable, "-I", "-S", "-c", code], capture_output=True,
                         text=True, timeout=120, check=False, cwd="/")
    assert res.returncode == 0, res.stderr[-3000:]
    bare = {k: set(v) for k, v in json.loads(res.stdout).items()}
    assert bare == import_graph()[0]
