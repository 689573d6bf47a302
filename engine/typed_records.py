"""check_fields(record): a dataclass read from a file has, in every field, a value of the type
its annotation names (str, int, float, bool, dict, list, tuple, None, nested dataclasses).

A history file is not trusted: a record whose `perplexity` is a string or whose `document` is a
list would pass the constructor and fail later, deep in a page that draws it."""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from typing import Any


def _matches(value: Any, hint: Any) -> bool:
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_matches(value, h) for h in typing.get_args(hint))
    if hint is type(None) or hint is None:
        return value is None
    if hint is Any:
        return True
    if origin is not None:  # dict[str, x], list[x], tuple[...]: the container type only
        return isinstance(value, origin)
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return (isinstance(value, (int, float)) and not isinstance(value, bool)
                and math.isfinite(value))
    if dataclasses.is_dataclass(hint):
        if isinstance(value, hint):
            check_fields(value)
            return True
        return False
    if isinstance(hint, type):
        return isinstance(value, hint)
    return True  # a hint this check does not know: not its business


def check_fields(record: Any) -> Any:
    """`record`, or TypeError naming the first field whose value has the wrong type."""
    hints = typing.get_type_hints(type(record))
    for f in dataclasses.fields(record):
        value = getattr(record, f.name)
        if not _matches(value, hints.get(f.name, Any)):
            raise TypeError(f"{type(record).__name__}.{f.name} has the wrong type "
                            f"({type(value).__name__})")
    return record
