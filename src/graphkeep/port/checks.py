"""Checks of option values every product takes: durations, and how a bad value is quoted."""

from __future__ import annotations

import math
from typing import Any

from graphkeep.errors import InvalidInput


def check_seconds(
    value: Any, what: str, *, error: type[Exception] = InvalidInput, finite: bool = False
) -> float:
    """A duration argument: a number of seconds > 0 (``inf`` too unless ``finite``)."""
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or math.isnan(value)
        or value <= 0
        or (finite and math.isinf(value))
    ):
        kind = "a finite number" if finite else "a number"
        raise error(f"{what} must be {kind} of seconds > 0, got {short(value)}")
    return float(value)


def short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
