"""An AG-UI event (an ``ag_ui.core`` model) as the dict its JSON is written from.

``ag-ui-langgraph`` yields pydantic models; the endpoint needs each as the JSON object
``model_dump(mode="json", by_alias=True, exclude_none=True)`` makes. That call runs ag-ui's
Python wrap serializer per event, the largest share of the endpoint's own per-event work on a
token stream. For the plain events of a stream (text and tool-call deltas and their starts and
ends, steps, run starts: fields of str, int or bool, no extra fields) :func:`dump` reads the
fields in their declared order instead, which gives the same dict; any other event — a field
of another type (snapshots, outcomes, raw events, metadata), an extra field, a class whose
serialization is customised beyond ag-ui's omission of empty fields — goes through pydantic.
"""

from __future__ import annotations

from enum import Enum
from typing import Any

__all__ = ["dump", "plain_dump", "pydantic_dump"]

#: the model serializer every ag-ui event shares (it drops fields left empty, as
#: ``exclude_none`` does); a class with any other serialization has no plan
_SHARED_SERIALIZERS = {"_omit_fields_without_value"}
#: values written as they are (exact types: a subclass may serialize otherwise)
_PLAIN = (str, int, bool)

#: event class -> its fields as (attribute, JSON key), in order; None: no plan
_plans: dict[type, tuple[tuple[str, str], ...] | None] = {}


def pydantic_dump(event: Any) -> dict[str, Any]:
    """``event`` as pydantic dumps it (a dict is returned as it is)."""
    if isinstance(event, dict):
        return event
    dumped: dict[str, Any] = event.model_dump(mode="json", by_alias=True, exclude_none=True)
    return dumped


def _plan(cls: type) -> tuple[tuple[str, str], ...] | None:
    decorators = getattr(cls, "__pydantic_decorators__", None)
    fields = getattr(cls, "model_fields", None)
    if decorators is None or not isinstance(fields, dict):
        return None
    if (
        decorators.field_serializers
        or set(decorators.model_serializers) - _SHARED_SERIALIZERS
        or getattr(cls, "__pydantic_computed_fields__", None)
    ):
        return None
    plan = []
    for name, field in fields.items():
        if field.exclude:
            return None
        plan.append((name, field.serialization_alias or field.alias or name))
    return tuple(plan)


def plain_dump(event: Any) -> dict[str, Any] | None:
    """``event`` read field by field, the dict :func:`pydantic_dump` makes; None when it is
    not a plain event (see the module's docstring) and only pydantic can say."""
    cls = type(event)
    try:
        plan = _plans[cls]
    except KeyError:
        plan = _plans[cls] = _plan(cls)
    if plan is None or getattr(event, "__pydantic_extra__", None):
        return None
    values = event.__dict__
    out: dict[str, Any] = {}
    for name, key in plan:
        value = values.get(name)
        if value is None:
            continue
        kind = type(value)
        if kind in _PLAIN:
            out[key] = value
        elif isinstance(value, Enum) and type(value.value) is str:
            out[key] = value.value
        else:
            return None
    return out


def dump(event: Any) -> dict[str, Any]:
    """``event`` as :func:`pydantic_dump` makes it: :func:`plain_dump` where it can."""
    if isinstance(event, dict):
        return event
    plain = plain_dump(event)
    return plain if plain is not None else pydantic_dump(event)
