"""A GGUF's tokenizer, built once. transformers builds it from the file's token list and merges
in Python: ~30 s for SmolLM2's 49,152 tokens on a 2-core AMD EPYC, paid by every INT8 load of
the file and by its float conversion. The built tokenizer is kept beside the conversion cache
(`<stem>-<key>.tokenizer/`, the same key as the converted folder, so a changed file gets a new
one) and read back in well under a second; a finished float conversion's own copy serves too."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from . import gguf


def cached_copy(path: Path) -> Path | None:
    """A folder holding this GGUF's built tokenizer, if one is trusted: the float conversion's
    entry or the tokenizer's own."""
    from .gguf_convert import converted_folder

    return converted_folder(path) or gguf.kept_tokenizer(path)


def load_tokenizer(path: Path) -> Any:
    """The tokenizer of the GGUF file `path`, from the cache when it was built before."""
    from transformers import AutoTokenizer

    path = Path(path)
    folder = cached_copy(path)
    if folder is not None:
        with contextlib.suppress(OSError, ValueError):
            return AutoTokenizer.from_pretrained(str(folder))
    tokenizer = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    gguf.keep(gguf.tokenizer_dir(path), lambda d: tokenizer.save_pretrained(str(d)), path)
    return tokenizer
