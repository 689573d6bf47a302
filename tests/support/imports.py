"""Resolving a relative `from ... import` as Python does, for the tests that read the source's
imports (tests/test_layering.py, tests/test_architecture_bars.py). Standard library only.
(tests/test_import_graph.py keeps its own few lines: it also runs in a bare `python -I -S`.)"""

from __future__ import annotations

import ast


def resolve_relative(node: ast.ImportFrom, package: list[str]) -> str | None:
    """The absolute module `node` names when it sits in a module of `package` (the package's
    dotted parts: a module's parent, or an __init__.py's own); None past the top."""
    if not node.level:
        return node.module
    if node.level > len(package):
        return None
    base = package[:len(package) - node.level + 1]
    return ".".join([*base, node.module] if node.module else base)
