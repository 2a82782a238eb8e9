"""Search filters: :func:`compile_filter` validates a filter and flattens it to
:class:`~graphkeep.store.port.Condition`\\ s; :func:`matches` tests a value against them
with JSON semantics.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterable, Mapping
from typing import Any

import orjson

from graphkeep.errors import InvalidFilter
from graphkeep.store.port import Condition

OPERATORS = ("$eq", "$ne", "$gt", "$gte", "$lt", "$lte")


def compile_filter(filter: Mapping[str, Any] | None) -> tuple[Condition, ...]:
    """Validate a search filter and flatten it to conditions on nested key paths.

    ``{"a": {"b": 1}}`` and ``{"a.b": 1}`` both test the key ``b`` inside ``a``; a dict
    whose keys start with ``$`` holds operators.
    """
    if not filter:
        return ()
    if not isinstance(filter, Mapping):
        raise InvalidFilter(f"filter must be a dict, got {type(filter).__name__}")
    conditions: list[Condition] = []
    _flatten(filter, (), conditions)
    return tuple(conditions)


def _flatten(filter: Mapping[str, Any], base: tuple[str, ...], out: list[Condition]) -> None:
    for key, expected in filter.items():
        if not isinstance(key, str) or not key:
            raise InvalidFilter(f"Invalid filter key {key!r}: keys are non-empty strings")
        if key.startswith("$"):
            raise InvalidFilter(
                f"Invalid filter key {key!r}: it starts with '$'; operators go inside a key's dict,"
                f" e.g. {{'score': {{'$gt': 3}}}} (supported: {', '.join(OPERATORS)})"
            )
        if "\x00" in key:
            raise InvalidFilter(f"Invalid filter key {key!r}: keys must not contain NUL")
        parts = tuple(key.split("."))
        if any(not p for p in parts):
            raise InvalidFilter(f"Invalid filter key {key!r}: it has an empty path segment")
        path = base + parts
        if isinstance(expected, Mapping) and any(
            isinstance(k, str) and k.startswith("$") for k in expected
        ):
            for op, operand in expected.items():
                if op not in OPERATORS:
                    raise InvalidFilter(
                        f"unsupported filter operator {op!r} on {key!r};"
                        f" supported: {', '.join(OPERATORS)}"
                    )
                if op in ("$gt", "$gte", "$lt", "$lte") and not _orderable(operand):
                    raise InvalidFilter(
                        f"{op} on {key!r} compares numbers or strings, got {operand!r}"
                    )
                out.append(Condition(path, *_operand(op, operand, key)))
        elif isinstance(expected, Mapping):
            _flatten(expected, path, out)
        else:
            out.append(Condition(path, *_operand("$eq", expected, key)))


def _orderable(value: Any) -> bool:
    return isinstance(value, (str, int, float)) and not isinstance(value, bool)


#: what NaN compares equal to: nothing JSON can hold
NEVER = "\x00graphkeep:nan"


def _operand(op: str, value: Any, key: str) -> tuple[str, Any]:
    """The condition for ``op`` and ``value`` in JSON terms: numbers beyond what JSON or a
    64-bit integer holds become the equivalent comparison (``< inf`` is ``<= max float``),
    NaN equals nothing and orders nothing."""
    if isinstance(value, float) and math.isnan(value):
        if op in ("$eq", "$ne"):
            return op, NEVER
        return "$gt", sys.float_info.max  # no number is greater: never true
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 2**63:
        value = float(value)  # JSON readers take such numbers as doubles
    if isinstance(value, float) and math.isinf(value):
        top = sys.float_info.max if value > 0 else -sys.float_info.max
        strict = {"$gt": "$gt", "$gte": "$gt", "$lt": "$lt", "$lte": "$lt"}
        loose = {"$gt": "$gte", "$gte": "$gte", "$lt": "$lte", "$lte": "$lte"}
        if op in ("$eq", "$ne"):
            return op, NEVER
        beyond = (op in ("$gt", "$gte")) == (value > 0)  # asks for numbers past infinity
        return (strict if beyond else loose)[op], top
    return op, _json(value, key)


def _json(value: Any, key: str) -> Any:
    """The operand as JSON would hold it (tuples become lists), or an InvalidFilter."""
    try:
        return orjson.loads(orjson.dumps(value))
    except (TypeError, orjson.JSONEncodeError) as exc:
        raise InvalidFilter(f"filter value for {key!r} is not JSON data: {exc}") from exc


# --------------------------------------------------------------------------- matching


_MISSING = object()


def value_at(value: Any, path: tuple[str, ...]) -> Any:
    for part in path:
        if not isinstance(value, dict) or part not in value:
            return _MISSING
        value = value[part]
    return value


def json_equal(a: Any, b: Any) -> bool:
    """JSON equality: booleans are not numbers, 1 == 1.0, lists and objects deeply."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a is b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    return type(a) is type(b) and bool(a == b)


def satisfies(condition: Condition, value: Mapping[str, Any]) -> bool:
    found = value_at(value, condition.path)
    op, expected = condition.op, condition.value
    if op == "$eq":
        if expected is None:
            return found is _MISSING or found is None
        return found is not _MISSING and json_equal(found, expected)
    if found is _MISSING:
        return False
    if op == "$ne":
        return not json_equal(found, expected)
    if isinstance(expected, str):
        if not isinstance(found, str):
            return False
    elif isinstance(found, bool) or not isinstance(found, (int, float)):
        return False
    if op == "$gt":
        return bool(found > expected)
    if op == "$gte":
        return bool(found >= expected)
    if op == "$lt":
        return bool(found < expected)
    return bool(found <= expected)


def matches(value: Mapping[str, Any], conditions: Iterable[Condition]) -> bool:
    return all(satisfies(c, value) for c in conditions)
