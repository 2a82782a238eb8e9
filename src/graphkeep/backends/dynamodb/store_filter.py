"""The DynamoDB store's server-side filter: each item's top-level scalar values as native
attributes, and the ``FilterExpression`` a search's conditions allow on them.

``fa`` (a map) holds each top-level key of the value (of at most :data:`KEY_LIMIT` bytes: a
value with a longer key gets no ``fa``) whose value is a string of at most
:data:`STRING_LIMIT` bytes, a number DynamoDB compares exactly as Python does (integers up to
2**53, finite floats inside DynamoDB's range), a boolean or null. A key whose scalar value was
left out (a longer string, another number, or past the item's :data:`BUDGET`) is in ``fa`` as
an empty binary, which no JSON value is: a condition on it always passes. Lists and objects are
not in ``fa``: no scalar operand equals them or orders against them.

The expression only ever lets through *more* items than the exact check (``matches``), which
the client still applies to every item: an item without ``fa`` (written before it existed,
whose value has keys that are not strings, or sealed by ``encryption=``: no copy of a sealed
value is kept) passes, a condition on a left-out key passes, and a
condition the server cannot decide exactly (a nested path, a list or object operand, a number
it cannot hold exactly) is left out. So a search returns the same items; DynamoDB returns fewer
of them over the wire (it still reads, and bills, the whole prefix).

Why numbers are limited to 2**53 and finite floats: DynamoDB compares decimal texts exactly,
Python compares an int with a float exactly too, and a float's shortest text (``repr``) keeps
the order of floats; every number in the set is a float exactly, so both sides agree.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Any

from graphkeep.store.port import Condition

__all__ = ["FILTER", "filter_attributes", "filter_expression"]

#: the attribute: the native copy of the value's top-level scalars
FILTER = "fa"
#: what a left-out key holds in ``fa``: a binary, which no JSON value is
LEFT_OUT: dict[str, Any] = {"B": b""}
#: the longest string (UTF-8 bytes) copied into ``fa``
STRING_LIMIT = 256
#: the longest top-level key (UTF-8 bytes) ``fa`` holds; a value with a longer one gets no ``fa``
KEY_LIMIT = 1024
#: the most bytes of copied values (names and values) in an item; keys past it are left out
BUDGET = 2048
#: the most bytes ``fa`` may take with its left-out keys; past it the item gets no ``fa``
LIMIT = 3072
#: integers DynamoDB and Python compare alike against any float of the set
EXACT_INT = 2**53
#: DynamoDB's number range (magnitudes), with a margin below its 1E-130 floor
SMALLEST, LARGEST = 1e-125, 9.9e125


def _number(value: int | float) -> str | None:
    """The DynamoDB number text of ``value`` when the server compares it exactly, else None."""
    if isinstance(value, int):  # int() and float(): an enum's text is not its number
        return str(int(value)) if -EXACT_INT <= value <= EXACT_INT else None
    if not math.isfinite(value):
        return None
    if value == 0:
        return "0"
    if not SMALLEST <= abs(value) <= LARGEST:
        return None
    return str(Decimal(repr(float(value))))  # the shortest text, spelled as boto3 sends numbers


def _native(value: Any) -> dict[str, Any] | None:
    """``value`` as a DynamoDB attribute value the filter can test exactly, else None."""
    if value is None:
        return {"NULL": True}
    if isinstance(value, bool):
        return {"BOOL": value}
    if isinstance(value, (int, float)):
        text = _number(value)
        return None if text is None else {"N": text}
    if isinstance(value, str) and len(value.encode("utf-8")) <= STRING_LIMIT:
        return {"S": str.__str__(value)}  # a str enum's content, as the JSON holds it
    return None


def _size(name: str, value: dict[str, Any]) -> int:
    text = value.get("S") or value.get("N") or ""
    return len(name.encode("utf-8")) + len(text.encode("utf-8")) + 1


def filter_attributes(value: Mapping[str, Any]) -> dict[str, Any]:
    """``fa`` for an item holding ``value``; nothing when a key is not a string (the stored
    JSON turns it into one) or is over :data:`KEY_LIMIT`, or when ``fa`` with its left-out
    keys would pass :data:`LIMIT`: such items always pass the server."""
    natives: dict[str, Any] = {}
    copied = total = 0  # bytes of the copied values; of everything in ``fa``
    for name, field in value.items():
        if not isinstance(name, str) or len(name.encode("utf-8")) > KEY_LIMIT:
            return {}
        if not name or "." in name or isinstance(field, (dict, list)):
            continue  # no condition can name it, or no scalar operand matches it
        native = _native(field)
        if native is not None and copied + _size(name, native) <= BUDGET:
            copied += _size(name, native)
        else:
            native = LEFT_OUT
        natives[name] = native
        total += _size(name, native)
        if total > LIMIT:
            return {}
    return {FILTER: {"M": natives}}


_ORDER = {"$gt": ">", "$gte": ">=", "$lt": "<", "$lte": "<="}


def filter_expression(
    conditions: Iterable[Condition],
) -> tuple[str, dict[str, str], dict[str, Any]] | None:
    """(FilterExpression, names, values) passing at least every item ``matches`` accepts for
    ``conditions``, or None when the server can decide none of them."""
    names: dict[str, str] = {}
    values: dict[str, Any] = {}
    clauses: list[str] = []
    for i, condition in enumerate(conditions):
        if len(condition.path) != 1 or len(condition.path[0].encode("utf-8")) > KEY_LIMIT:
            continue
        path = f"#fa.#f{i}"
        test = _test(condition, path, f":f{i}", values)
        if test is None:
            continue
        names[f"#f{i}"] = condition.path[0]
        clauses.append(test)
    if not clauses:
        return None
    names["#fa"] = FILTER
    values[":tB"] = {"S": "B"}
    every = clauses[0] if len(clauses) == 1 else " AND ".join(f"({c})" for c in clauses)
    # DynamoDB refuses redundant parentheses: ((...)) is an error
    return f"attribute_not_exists(#fa) OR {every}", names, values


def _test(condition: Condition, path: str, operand: str, values: dict[str, Any]) -> str | None:
    """The server test of one top-level condition on ``path`` (``fa.<key>``), or None; a
    left-out key (a binary) passes every test."""
    op, expected = condition.op, condition.value
    left_out = f"attribute_type({path}, :tB)"
    if op == "$eq" and expected is None:  # missing or null
        values[":tNULL"] = {"S": "NULL"}
        return f"attribute_not_exists({path}) OR attribute_type({path}, :tNULL) OR {left_out}"
    native = _native(expected) if expected is not None else None
    if native is None:
        return None
    values[operand] = native
    if op == "$eq":
        return f"{left_out} OR {path} = {operand}"
    kind = next(iter(native))
    if op != "$ne" and (op not in _ORDER or kind not in ("S", "N")):
        return None
    values[f":t{kind}"] = {"S": kind}
    # each comparison only between values of one type: DynamoDB's rule, made explicit for
    # servers that compare across types (moto takes True for 1)
    same_type = f"attribute_type({path}, :t{kind})"
    if op == "$ne":  # a list or object is not in ``fa`` and differs from every scalar
        return f"attribute_not_exists({path}) OR NOT {same_type} OR {path} <> {operand}"
    return f"{left_out} OR ({same_type} AND {path} {_ORDER[op]} {operand})"
