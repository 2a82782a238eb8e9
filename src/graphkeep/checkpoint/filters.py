"""``list(filter=...)`` on checkpoints: the filter's checks and the metadata match, once.

Keys are top-level metadata keys compared for (deep) equality; ``$`` keys are refused, so no
store ever sees an operator. Backends that filter on the server map the checked filter onto
their query and the saver re-checks each result with :func:`matches`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from graphkeep.errors import InvalidFilter
from graphkeep.port.codec import plain


def check_filter(filter: Mapping[str, Any] | None) -> dict[str, Any]:
    """Validate a ``list(filter=...)`` mapping; keys are top-level metadata keys."""
    if not filter:
        return {}
    if not isinstance(filter, Mapping):
        raise InvalidFilter(f"filter must be a mapping, got {type(filter).__name__}")
    checked: dict[str, Any] = {}
    for key, value in filter.items():
        if not isinstance(key, str) or not key:
            raise InvalidFilter(f"filter keys must be non-empty strings, got {key!r}")
        if key.startswith("$"):
            raise InvalidFilter(
                f"filter key {key!r} starts with '$': operators are not supported,"
                " filters compare top-level metadata keys for equality"
            )
        if "\x00" in key:
            raise InvalidFilter("filter keys must not contain NUL characters")
        checked[key] = plain(value)
    return checked


def matches(metadata: Mapping[str, Any], filter: Mapping[str, Any]) -> bool:
    """Top-level equality (deep for nested values); a missing key matches ``None``."""
    return all(_equal(plain(metadata.get(k)), v) for k, v in filter.items())


def _equal(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b if isinstance(a, bool) and isinstance(b, bool) else False
    return bool(a == b)
