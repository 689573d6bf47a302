"""Collect English prose from the docstrings of the Python standard library.

Every machine that runs Python carries these sources, so the demo model can be rebuilt anywhere
without a download. The text is PSF-licensed documentation distributed with CPython.
"""

from __future__ import annotations

import ast
import hashlib
import re
import sysconfig
import warnings
from dataclasses import dataclass
from pathlib import Path

# Test suites are mostly code-ish asserts and would swamp the prose; idlelib/turtledemo/lib2to3
# fixers and the encodings tables add little English and lots of boilerplate.
_SKIP_DIRS = {
    "test", "tests", "idle_test", "site-packages", "dist-packages", "__pycache__",
    "turtledemo", "encodings", "lib2to3", "config-3", "tkinter",
}

_WORD = re.compile(r"[A-Za-z]+(?:'[a-z]+)?")
_CODEY = re.compile(r"(>>>|\.\.\. |::$|^\s*[-=~^*]{3,}\s*$|[{}]|==|!=|\+=|->|^\w+\(.*\)$)")


@dataclass(frozen=True)
class Corpus:
    """Prose documents split deterministically into a training and a held-out part."""

    train: list[str]
    heldout: list[str]
    # (name, explanation) pairs from training documents only, for synthetic chat turns.
    qa: list[tuple[str, str]]
    source_files: int
    stdlib: str


def stdlib_root() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def _source_files(root: Path) -> list[Path]:
    files = []
    for path in root.rglob("*.py"):
        rel = path.relative_to(root).parts
        if any(part in _SKIP_DIRS or part.startswith("config-") for part in rel[:-1]):
            continue
        if rel[-1].startswith("test_"):
            continue
        files.append(path)
    # Sorted so that the corpus, and therefore the model, does not depend on directory order.
    return sorted(files, key=lambda p: p.relative_to(root).as_posix())


def _docstrings(source: str, module: str) -> list[tuple[str, str]]:
    """(qualified name, docstring) for the module and every class and function in it."""
    with warnings.catch_warnings():
        # Old stdlib modules carry invalid escape sequences; the warning is noise here.
        warnings.simplefilter("ignore")
        tree = ast.parse(source)
    out = []
    doc = ast.get_docstring(tree, clean=True)
    if doc:
        out.append((module, doc))

    def visit(body: list[ast.stmt], prefix: str) -> None:
        for node in body:
            if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                name = f"{prefix}.{node.name}"
                doc = ast.get_docstring(node, clean=True)
                if doc:
                    out.append((name, doc))
                visit(node.body, name)

    visit(tree.body, module)
    return out


def _is_prose(paragraph: str) -> bool:
    """True for a paragraph that reads as English sentences rather than code or a table."""
    lines = paragraph.splitlines()
    if any(_CODEY.search(line) for line in lines):
        return False
    if any(line.startswith(("    ", "\t")) for line in lines):
        return False  # indented blocks in docstrings are examples or signatures
    words = _WORD.findall(paragraph)
    if len(words) < 6:
        return False
    letters = sum(ch.isalpha() for ch in paragraph)
    visible = sum(not ch.isspace() for ch in paragraph)
    if letters < 0.8 * visible:
        return False
    # Identifiers such as foo_bar or CamelCase are fine in moderation; prose is mostly lowercase words.
    lower = sum(w.islower() for w in words)
    return lower >= 0.6 * len(words)


def _paragraphs(doc: str) -> list[str]:
    out = []
    for block in re.split(r"\n\s*\n", doc):
        block = block.strip("\n")
        if not block.strip() or not _is_prose(block):
            continue
        # Reflow hard-wrapped lines so the model learns sentences, not line lengths.
        out.append(" ".join(line.strip() for line in block.splitlines()))
    return out


def _topic_documents() -> list[str]:
    """The language reference as plain text, shipped in the stdlib for `help('topic')`."""
    try:
        from pydoc_data.topics import topics
    except ImportError:
        return []
    docs = []
    for name in sorted(topics):
        paras = _paragraphs(topics[name])
        # Topics are several pages long; a few paragraphs per document keeps the split fine-grained.
        for start in range(0, len(paras), 4):
            docs.append("\n".join(paras[start:start + 4]))
    return docs


def _holdout(key: str, fraction: float) -> bool:
    digest = hashlib.sha256(key.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < fraction


def collect(
    root: Path | None = None, heldout_fraction: float = 0.02, include_topics: bool = True
) -> Corpus:
    """Walk the stdlib, keep prose paragraphs, dedupe them, and split documents by content hash.

    A document is the surviving paragraphs of one docstring. The split hashes the document's text,
    so it is stable across machines and runs and no paragraph appears on both sides.
    """
    root = root or stdlib_root()
    files = _source_files(root)
    seen: set[str] = set()
    train: list[str] = []
    heldout: list[str] = []
    qa: list[tuple[str, str]] = []
    used = 0
    documents: list[tuple[str, list[str]]] = []
    for path in files:
        rel = path.relative_to(root).with_suffix("").parts
        module = ".".join(rel[:-1] if rel[-1] == "__init__" else rel)
        try:
            source = path.read_text(encoding="utf-8")
            docs = _docstrings(source, module)
        except (SyntaxError, UnicodeDecodeError, ValueError):
            continue
        if docs:
            used += 1
        documents.extend((name, _paragraphs(doc)) for name, doc in docs)
    if include_topics:
        documents.extend(("", doc.split("\n")) for doc in _topic_documents())
    for name, paragraphs in documents:
        kept = []
        for para in paragraphs:
            norm = " ".join(para.lower().split())
            if norm in seen:
                continue
            seen.add(norm)
            kept.append(para)
        if not kept:
            continue
        text = "\n".join(kept)
        if _holdout(text, heldout_fraction):
            heldout.append(text)
            continue
        train.append(text)
        # Private helpers make odd questions; public names with a first sentence make good answers.
        if name and not any(part.startswith("_") for part in name.split(".")) and kept[0] == paragraphs[0]:
            qa.append((name, kept[0]))
    return Corpus(train=train, heldout=heldout, qa=qa, source_files=used, stdlib=str(root))
