"""Input checks of the store, before anything is written: namespaces, keys, values, the
``index`` / ``ttl`` options and every op of a batch (:func:`plan_batch`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, cast

from langgraph.store.base import (
    GetOp,
    InvalidNamespaceError,
    ListNamespacesOp,
    PutOp,
    Result,
    SearchOp,
    tokenize_path,
)

from graphkeep.errors import ConfigurationError, InvalidInput
from graphkeep.store.filters import compile_filter
from graphkeep.store.port import ItemKey, Namespace
from graphkeep.store.values import dotted_namespace, encode_value

DISTANCES = ("cosine", "l2", "inner_product")
#: the longest namespace (labels joined by ".") and key accepted, in UTF-8 bytes
DEFAULT_MAX_KEY_BYTES = 1024
#: IndexConfig's keys, SqliteStore's name for ``fields`` and PostgresStore's ANN tuning (our
#: searches are exact, so that one is accepted and has nothing to tune)
INDEX_OPTIONS = frozenset(
    {"dims", "embed", "fields", "distance_type", "text_fields", "ann_index_config"}
)
TTL_OPTIONS = frozenset(
    {"default_ttl", "refresh_on_read", "sweep_interval_minutes", "omit_expired"}
)


def check_namespace(namespace: Any, *, for_write: bool, max_bytes: int) -> Namespace:
    """LangGraph's namespace rules (InvalidNamespaceError), plus a size bound.

    The reserved root label ``langgraph`` is refused by the public ``put`` / ``aput`` only
    (LangGraph's ``BaseStore`` checks it there), not here: as in LangGraph, a ``batch`` may
    write under it, which is how LangGraph's own components (Agent Server among them) store
    their items.
    """
    if isinstance(namespace, list):
        namespace = tuple(namespace)
    if not isinstance(namespace, tuple):
        raise InvalidNamespaceError(
            f"Namespace must be a tuple of strings, got {type(namespace).__name__}: {namespace!r}"
        )
    if for_write and not namespace:
        raise InvalidNamespaceError("Namespace cannot be empty.")
    for label in namespace:
        if not isinstance(label, str):
            raise InvalidNamespaceError(
                f"Invalid namespace label {label!r} found in {namespace}. Namespace labels"
                f" must be strings, but got {type(label).__name__}."
            )
        if not label:
            raise InvalidNamespaceError(
                f"Namespace labels cannot be empty strings. Got {label!r} in {namespace}"
            )
        if "." in label:
            raise InvalidNamespaceError(
                f"Invalid namespace label {label!r} found in {namespace}. Namespace labels"
                " cannot contain periods ('.')."
            )
        if "\x00" in label:
            raise InvalidNamespaceError(
                f"Invalid namespace label {label!r} found in {namespace}. Namespace labels"
                " cannot contain NUL characters."
            )
    if len(dotted_namespace(namespace).encode("utf-8")) > max_bytes:
        raise InvalidNamespaceError(
            f"namespace {dotted_namespace(namespace)[:60]!r}... is longer than {max_bytes} bytes"
        )
    return cast(Namespace, namespace)


def check_key(key: Any, max_bytes: int) -> str:
    if not isinstance(key, str):
        raise InvalidInput(f"store keys must be strings, got {type(key).__name__}: {key!r}")
    if not key:
        raise InvalidInput("store keys must be non-empty strings")
    if len(key.encode("utf-8", "surrogatepass")) > max_bytes:
        raise InvalidInput(f"store key {key[:60]!r}... is longer than {max_bytes} bytes")
    return key


def check_value(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise InvalidInput(
            f"store values must be dicts, got {type(value).__name__}; wrap it, e.g."
            " {'value': ...}"
        )
    encode_value(value)  # raises SerializationError for what JSON cannot hold
    return value


def index_config(index: Any) -> dict[str, Any] | None:
    """Validate LangGraph's ``IndexConfig`` (plus PostgresStore's ``distance_type``)."""
    if index is None:
        return None
    if not isinstance(index, Mapping):
        raise ConfigurationError(f"index must be a dict (IndexConfig), got {type(index).__name__}")
    unknown = sorted(set(index) - INDEX_OPTIONS - {"__tokenized_fields"})
    if unknown:
        raise ConfigurationError(
            f"unknown index option(s) {', '.join(unknown)};"
            f" accepted: {', '.join(sorted(INDEX_OPTIONS))}"
        )
    dims = index.get("dims")
    if not isinstance(dims, int) or isinstance(dims, bool) or dims <= 0:
        raise ConfigurationError(f"index['dims'] must be a positive int, got {dims!r}")
    if index.get("embed") is None:
        raise ConfigurationError(
            "index['embed'] is required (Embeddings, a callable or 'provider:model')"
        )
    distance = index.get("distance_type", "cosine")
    if distance not in DISTANCES:
        raise ConfigurationError(
            f"index['distance_type'] must be one of {', '.join(DISTANCES)}, got {distance!r}"
        )
    fields = index.get("fields") or index.get("text_fields") or ["$"]
    if isinstance(fields, str):
        fields = [fields]
    if not isinstance(fields, (list, tuple)) or not all(isinstance(f, str) and f for f in fields):
        raise ConfigurationError(f"index['fields'] must be a list of paths, got {fields!r}")
    config = dict(index)
    config["distance_type"] = distance
    config["fields"] = list(fields)
    config["__tokenized_fields"] = [
        (f, f if f == "$" else field_tokens(f, ConfigurationError)) for f in fields
    ]
    return config


def field_tokens(path: str, error: type[Exception]) -> list[str]:
    """LangGraph's tokenized field path, or ``error`` naming the path."""
    try:
        return list(tokenize_path(path))
    except (ValueError, IndexError) as exc:
        raise error(f"index field path {path!r} cannot be read: {exc}") from exc


def ttl_config(ttl: Any) -> dict[str, Any] | None:
    if ttl is None:
        return None
    if not isinstance(ttl, Mapping):
        raise ConfigurationError(f"ttl must be a dict (TTLConfig), got {type(ttl).__name__}")
    unknown = sorted(set(ttl) - TTL_OPTIONS)
    if unknown:
        raise ConfigurationError(
            f"unknown ttl option(s) {', '.join(unknown)};"
            f" accepted: {', '.join(sorted(TTL_OPTIONS))}"
        )
    default = ttl.get("default_ttl")
    if default is not None:
        _check_minutes(default, "ttl['default_ttl']")
    sweep = ttl.get("sweep_interval_minutes")
    if sweep is not None:
        _check_minutes(sweep, "ttl['sweep_interval_minutes']")
    return dict(ttl)


def _check_minutes(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ConfigurationError(f"{what} must be a positive number of minutes, got {value!r}")
    return float(value)


def check_ttl(ttl: Any) -> float | None:
    if ttl is None:
        return None
    if isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or not ttl > 0:
        raise InvalidInput(f"ttl must be a positive number of minutes or None, got {ttl!r}")
    return float(ttl)


def check_page(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidInput(f"{what} must be a non-negative int, got {value!r}")
    return value


@dataclass(slots=True)
class Plan:
    """A batch split by kind, validated, with the results list to fill."""

    results: list[Result]
    gets: list[tuple[int, GetOp]] = field(default_factory=list)
    puts: dict[ItemKey, PutOp] = field(default_factory=dict)
    searches: list[tuple[int, SearchOp]] = field(default_factory=list)
    lists: list[tuple[int, ListNamespacesOp]] = field(default_factory=list)


def plan_batch(ops: Iterable[Any], max_key_bytes: int) -> Plan:
    """Check every op of a batch (raising before anything is written) and split it by kind;
    of several puts to one key the last wins."""
    ops = list(ops)
    plan = Plan(results=[None] * len(ops))
    for i, op in enumerate(ops):
        if isinstance(op, GetOp):
            ns = check_namespace(op.namespace, for_write=False, max_bytes=max_key_bytes)
            key = check_key(op.key, max_key_bytes)
            plan.gets.append((i, op._replace(namespace=ns, key=key)))
        elif isinstance(op, PutOp):
            ns = check_namespace(op.namespace, for_write=True, max_bytes=max_key_bytes)
            key = check_key(op.key, max_key_bytes)
            value = None if op.value is None else check_value(op.value)
            index = op.index
            if index is not None and index is not False:
                if (
                    isinstance(index, str)
                    or not isinstance(index, (list, tuple))
                    or not all(isinstance(p, str) and p for p in index)
                ):
                    raise InvalidInput(
                        f"index must be False, None or a list of field paths, got {index!r}"
                    )
            ttl = check_ttl(op.ttl)
            plan.puts[(ns, key)] = PutOp(ns, key, value, index, ttl)  # last one wins
        elif isinstance(op, SearchOp):
            prefix = check_namespace(op.namespace_prefix, for_write=False, max_bytes=max_key_bytes)
            compile_filter(op.filter)
            check_page(op.limit, "limit")
            check_page(op.offset, "offset")
            if op.query is not None and not isinstance(op.query, str):
                raise InvalidInput(f"query must be a string, got {type(op.query).__name__}")
            plan.searches.append((i, op._replace(namespace_prefix=prefix)))
        elif isinstance(op, ListNamespacesOp):
            for condition in op.match_conditions or ():
                if condition.match_type not in ("prefix", "suffix"):
                    raise InvalidInput(f"unknown match_type {condition.match_type!r}")
                for label in condition.path:
                    if label != "*":
                        check_namespace((label,), for_write=False, max_bytes=max_key_bytes)
            if op.max_depth is not None:
                check_page(op.max_depth, "max_depth")
            check_page(op.limit, "limit")
            check_page(op.offset, "offset")
            plan.lists.append((i, op))
        else:
            raise InvalidInput(f"unknown store operation {type(op).__name__}")
    return plan
