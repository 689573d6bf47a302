"""A GGUF's transformers config, read once. transformers builds it by parsing every metadata
value of the file with the `gguf` package, vocabulary included: 9 to 20 s for Gemma 3's
262,144 tokens on 2 cores, paid by every INT8 load. The config is kept beside the tokenizer,
under the same cache key (a changed file gets a new one), and read back in milliseconds."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from . import gguf


def load_config(path: Path) -> Any:
    """The transformers config of GGUF `path`, from the cache when an earlier load kept it."""
    from transformers import AutoConfig

    path = Path(path)
    folder = gguf.kept_folder(gguf.config_dir(path))
    if folder is not None:
        with contextlib.suppress(OSError, ValueError):
            config = AutoConfig.from_pretrained(str(folder))
            config._name_or_path = str(path.parent)  # as read from the file: not the cache
            return config
    config = AutoConfig.from_pretrained(str(path.parent), gguf_file=path.name)
    gguf.keep(gguf.config_dir(path), lambda d: config.save_pretrained(str(d)), path)
    return config
