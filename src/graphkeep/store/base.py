"""Long-term memory: LangGraph's ``BaseStore`` contract, written once for every store.

:class:`StoreBase` holds everything that is the same on Redis, MongoDB and DynamoDB:
validation of namespaces, keys, values and filters (before anything is written), TTL
arithmetic, embedding (only texts that changed since the stored version are sent to the
model), ranking and paging rules. A backend implements the small :class:`StorePort`
(get, put, search, namespaces, sweep) as generators yielding its own requests, exactly
like the checkpoint port in :mod:`graphkeep.port`; one sync and one async shell
drive the same generators, so sync and async share every line.

Semantics follow ``PostgresStore`` (LangGraph's reference store):

- ``created_at`` survives updates, ``updated_at`` changes on every put and is strictly
  increasing within a process;
- ``search`` without a query is ordered by ``updated_at`` newest first; with a query (and an
  ``index``) by score, the best score among an item's embedded fields; items with no
  embedding are not returned by a query search;
- scores: cosine similarity (``cosine``), minus the L2 distance (``l2``), the inner
  product (``inner_product``);
- filters compare values on (nested) keys: plain values and ``$eq`` mean equality,
  ``$ne`` matches present values that differ, ``$gt $gte $lt $lte`` compare numbers with
  numbers and strings with strings; nested keys are given as nested dicts or dotted paths;
- expired items are never returned, even before a store reaps them.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import hashlib
import json
import math
import operator
import re
import struct
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Literal, Protocol, cast

import orjson
from langgraph.store.base import (
    NOT_PROVIDED,
    BaseStore,
    GetOp,
    IndexConfig,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    NotProvided,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    TTLConfig,
    ensure_embeddings,
    get_text_at_path,
    tokenize_path,
)
from langgraph.store.base.batch import AsyncBatchedBaseStore

from graphkeep.errors import ConfigurationError, InvalidFilter, InvalidInput, SerializationError
from graphkeep.port import Op, Sleep, adrive, drive, on_loop, running_loop

Namespace = tuple[str, ...]
ItemKey = tuple[Namespace, str]

OPERATORS = ("$eq", "$ne", "$gt", "$gte", "$lt", "$lte")
DISTANCES = ("cosine", "l2", "inner_product")
#: the longest namespace (labels joined by ".") and key accepted, in UTF-8 bytes
DEFAULT_MAX_KEY_BYTES = 1024
DEFAULT_SWEEP_MINUTES = 5
#: IndexConfig's keys, SqliteStore's name for ``fields`` and PostgresStore's ANN tuning (our
#: searches are exact, so that one is accepted and has nothing to tune)
INDEX_OPTIONS = frozenset(
    {"dims", "embed", "fields", "distance_type", "text_fields", "ann_index_config"}
)
TTL_OPTIONS = frozenset(
    {"default_ttl", "refresh_on_read", "sweep_interval_minutes", "omit_expired"}
)


# --------------------------------------------------------------------------- records


@dataclass(frozen=True, slots=True)
class Vector:
    """One embedded text of an item: the field path, a digest of the text, float32 bytes."""

    path: str
    digest: str
    data: bytes


@dataclass(slots=True)
class StoredItem:
    """An item as a backend stores it. Times: ``created_us``/``updated_us`` in epoch
    microseconds, ``expires_ms`` in epoch milliseconds (None = never), ``ttl_minutes`` is
    what a refresh re-arms."""

    namespace: Namespace
    key: str
    value: dict[str, Any]
    created_us: int
    updated_us: int
    expires_ms: int | None = None
    ttl_minutes: float | None = None
    vectors: list[Vector] = field(default_factory=list)
    score: float | None = None

    def live(self, now_ms: int) -> bool:
        return self.expires_ms is None or self.expires_ms > now_ms


@dataclass(frozen=True, slots=True)
class Condition:
    """One filter test: the value at ``path`` (nested keys) compared with ``value``."""

    path: tuple[str, ...]
    op: str
    value: Any


@dataclass(frozen=True, slots=True)
class SearchQuery:
    """A validated ``SearchOp``. ``vector`` is the query embedding for a semantic search."""

    prefix: Namespace
    conditions: tuple[Condition, ...]
    limit: int
    offset: int
    refresh: bool
    now_ms: int
    vector: tuple[float, ...] | None = None
    distance: str = "cosine"


@dataclass(frozen=True, slots=True)
class Embed:
    """Yielded by the store logic: embed ``texts`` (documents, or one search query)."""

    texts: tuple[str, ...]
    query: bool = False


class StorePort(Protocol):
    """What a backend maps onto its store. Input arrives validated.

    - ``get``: the live items for ``keys`` (None where missing or expired), in order; items
      whose ``refresh`` flag is set and that have a ``ttl_minutes`` get their expiry moved to
      ``now + ttl`` (returned with the new expiry). ``vectors=True`` returns their vectors.
    - ``put``: upserts ``items`` (keeping the stored ``created_us`` of a live item with the
      same key; everything else, vectors included, is replaced) and removes ``deletes``.
    - ``search``: the page of live items under ``query.prefix`` (label-wise prefix; ``()``
      is everything) matching every condition, ordered and sliced as :func:`rank` does;
      refreshes the TTL of returned items when ``query.refresh``.
    - ``namespaces``: every distinct namespace holding a live item, starting with ``prefix``.
    - ``sweep``: removes expired items, returns how many.
    """

    def setup(self) -> Op[None]: ...

    def get(
        self, keys: list[ItemKey], refresh: list[bool], now_ms: int, vectors: bool = False
    ) -> Op[list[StoredItem | None]]: ...

    def put(self, items: list[StoredItem], deletes: list[ItemKey], now_ms: int) -> Op[None]: ...

    def search(self, query: SearchQuery) -> Op[list[StoredItem]]: ...

    def namespaces(self, prefix: Namespace, now_ms: int) -> Op[list[Namespace]]: ...

    def sweep(self, now_ms: int) -> Op[int]: ...


# --------------------------------------------------------------------------- clocks


class _Clock:
    """Epoch microseconds, strictly increasing within the process (``updated_at`` order)."""

    def __init__(self) -> None:
        self._last = 0
        self._lock = threading.Lock()

    def now_us(self) -> int:
        with self._lock:
            now = max(time.time_ns() // 1000, self._last + 1)
            self._last = now
            return now


CLOCK = _Clock()


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def to_datetime(us: int) -> datetime:
    return datetime.fromtimestamp(us / 1_000_000, tz=timezone.utc)


def expiry_ms(ttl_minutes: float | None, now: int) -> int | None:
    return None if ttl_minutes is None else now + int(ttl_minutes * 60_000)


# --------------------------------------------------------------------------- encoding


def encode_value(value: Mapping[str, Any]) -> bytes:
    """The JSON bytes a backend stores for an item's value.

    Integers beyond 64 bits are written exactly (as JSON allows); NaN and infinities are
    refused, as JSON has no spelling for them (PostgresStore refuses them too).
    """
    try:
        data = orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS)
    except TypeError as exc:
        if "64-bit" not in str(exc):
            raise SerializationError(
                f"store values must be JSON-serializable dicts: {exc}"
            ) from exc
        data = b""
    if not data or b"null" in data:  # orjson writes NaN and infinities as null: look closer
        try:
            exact = json.dumps(
                value, separators=(",", ":"), ensure_ascii=False, allow_nan=False
            ).encode()
        except (TypeError, ValueError) as exc:
            raise SerializationError(
                f"store values must be JSON-serializable dicts (no NaN or infinity): {exc}"
            ) from exc
        data = data or exact  # orjson's bytes wherever it could write them
    return data


#: a run of digits long enough to be an integer beyond 64 bits (orjson reads it as a float)
_LONG_NUMBER = re.compile(rb"\d{19,}")


def decode_value(data: bytes | str) -> dict[str, Any]:
    raw = data.encode() if isinstance(data, str) else data
    if _LONG_NUMBER.search(raw):
        return cast(dict[str, Any], json.loads(raw))
    return cast(dict[str, Any], orjson.loads(raw))


def pack_vector(values: Sequence[float]) -> bytes:
    return struct.pack(f"<{len(values)}f", *values)


def unpack_vector(data: bytes) -> tuple[float, ...]:
    return struct.unpack(f"<{len(data) // 4}f", data)


def text_digest(text: str) -> str:
    return hashlib.blake2b(text.encode("utf-8"), digest_size=12).hexdigest()


def namespace_text(namespace: Namespace) -> str:
    """Labels joined by ``.`` (labels never contain ``.``, so this is unambiguous)."""
    return ".".join(namespace)


def namespace_of(text: str) -> Namespace:
    return tuple(text.split("."))


# --------------------------------------------------------------------------- validation


def check_namespace(namespace: Any, *, for_write: bool, max_bytes: int) -> Namespace:
    """LangGraph's namespace rules (InvalidNamespaceError), plus a size bound."""
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
    if for_write and namespace[0] == "langgraph":
        raise InvalidNamespaceError(
            f'Root label for namespace cannot be "langgraph". Got: {namespace}'
        )
    if len(namespace_text(namespace).encode("utf-8")) > max_bytes:
        raise InvalidNamespaceError(
            f"namespace {namespace_text(namespace)[:60]!r}... is longer than {max_bytes} bytes"
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


def in_prefix(namespace: Namespace, prefix: Namespace) -> bool:
    return namespace[: len(prefix)] == prefix


# --------------------------------------------------------------------------- ranking


def score(query: Sequence[float], vector: Sequence[float], distance: str) -> float:
    """PostgresStore's score conventions: cosine similarity, minus the L2 distance, or the
    inner product."""
    if distance == "l2":
        return -math.sqrt(sum((q - v) ** 2 for q, v in zip(query, vector, strict=False)))
    dot: float = sum(map(operator.mul, query, vector))
    if distance == "inner_product":
        return float(dot)
    norm = math.sqrt(sum(map(operator.mul, query, query))) * math.sqrt(
        sum(map(operator.mul, vector, vector))
    )
    return dot / norm if norm else 0.0


def best_score(item: StoredItem, query: SearchQuery) -> float | None:
    """The best score among the item's embedded texts (None when it has none)."""
    assert query.vector is not None
    scores = [score(query.vector, unpack_vector(v.data), query.distance) for v in item.vectors]
    return max(scores) if scores else None


def rank(candidates: Iterable[StoredItem], query: SearchQuery) -> list[StoredItem]:
    """The page a search returns from candidates already limited to the prefix.

    Filters and expiry are applied here too (cheap, and exact whatever a backend
    pre-filtered). Without a vector: newest ``updated_us`` first, ties by namespace and
    key. With one: best score first; unembedded items are left out.
    """
    live = [
        c
        for c in candidates
        if c.live(query.now_ms)
        and in_prefix(c.namespace, query.prefix)
        and matches(c.value, query.conditions)
    ]
    if query.vector is None:
        live.sort(key=lambda c: (c.namespace, c.key))
        live.sort(key=lambda c: c.updated_us, reverse=True)
        return live[query.offset : query.offset + query.limit]
    scored = []
    for item in live:
        item.score = best_score(item, query)
        if item.score is not None:
            scored.append(item)
    scored.sort(key=lambda c: (c.namespace, c.key))
    scored.sort(key=lambda c: cast(float, c.score), reverse=True)
    return scored[query.offset : query.offset + query.limit]


def namespace_matches(namespace: Namespace, op: ListNamespacesOp) -> bool:
    for condition in op.match_conditions or ():
        path = tuple(condition.path)
        if not path:
            continue
        if len(namespace) < len(path):
            return False
        if condition.match_type == "prefix":
            part = namespace[: len(path)]
        else:
            part = namespace[-len(path) :]
        if any(p != "*" and p != n for p, n in zip(path, part, strict=True)):
            return False
    return True


def literal_prefix(op: ListNamespacesOp) -> Namespace:
    """The leading labels every listed namespace must start with (up to a wildcard)."""
    for condition in op.match_conditions or ():
        if condition.match_type == "prefix":
            labels = []
            for label in condition.path:
                if label == "*":
                    break
                labels.append(label)
            return tuple(labels)
    return ()


def list_page(namespaces: Iterable[Namespace], op: ListNamespacesOp) -> list[Namespace]:
    found = {
        ns[: op.max_depth] if op.max_depth is not None else ns
        for ns in namespaces
        if namespace_matches(ns, op)
    }
    return sorted(found)[op.offset : op.offset + op.limit]


# --------------------------------------------------------------------------- options


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
        (f, f if f == "$" else _tokens(f, ConfigurationError)) for f in fields
    ]
    return config


def _tokens(path: str, error: type[Exception]) -> list[str]:
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


def _check_ttl(ttl: Any) -> float | None:
    if ttl is None:
        return None
    if isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or not ttl > 0:
        raise InvalidInput(f"ttl must be a positive number of minutes or None, got {ttl!r}")
    return float(ttl)


def _check_page(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidInput(f"{what} must be a non-negative int, got {value!r}")
    return value


# --------------------------------------------------------------------------- the store


@dataclass(slots=True)
class _Plan:
    """A batch split by kind, validated, with the results list to fill."""

    results: list[Result]
    gets: list[tuple[int, GetOp]] = field(default_factory=list)
    puts: dict[ItemKey, PutOp] = field(default_factory=dict)
    searches: list[tuple[int, SearchOp]] = field(default_factory=list)
    lists: list[tuple[int, ListNamespacesOp]] = field(default_factory=list)


class StoreBase(BaseStore):
    """LangGraph ``BaseStore`` over a :class:`StorePort`. Use a backend's class or
    ``graphkeep.connect_store``; this class holds the contract logic."""

    supports_ttl: bool = True

    def __init__(
        self,
        port: StorePort,
        *,
        index: IndexConfig | Mapping[str, Any] | None = None,
        ttl: TTLConfig | Mapping[str, Any] | None = None,
        max_key_bytes: int = DEFAULT_MAX_KEY_BYTES,
    ) -> None:
        self.port = port
        self.index_config = cast(Any, index_config(index))
        self.ttl_config = cast(Any, ttl_config(ttl))
        self.embeddings = (
            ensure_embeddings(self.index_config["embed"]) if self.index_config else None
        )
        self.max_key_bytes = max_key_bytes
        self._sweeper: Any = None
        self._sweeper_stop: Any = None

    # -- options -------------------------------------------------------------------

    @property
    def dims(self) -> int | None:
        return int(self.index_config["dims"]) if self.index_config else None

    @property
    def sweep_interval_minutes(self) -> float:
        value = (self.ttl_config or {}).get("sweep_interval_minutes")
        return float(value) if value else DEFAULT_SWEEP_MINUTES

    def _refresh_default(self) -> bool:
        if self.ttl_config is None:
            return True
        return bool(self.ttl_config.get("refresh_on_read", True))

    # -- validation ----------------------------------------------------------------

    def _plan(self, ops: Iterable[Any]) -> _Plan:
        ops = list(ops)
        plan = _Plan(results=[None] * len(ops))
        for i, op in enumerate(ops):
            if isinstance(op, GetOp):
                ns = check_namespace(op.namespace, for_write=False, max_bytes=self.max_key_bytes)
                key = check_key(op.key, self.max_key_bytes)
                plan.gets.append((i, op._replace(namespace=ns, key=key)))
            elif isinstance(op, PutOp):
                ns = check_namespace(op.namespace, for_write=True, max_bytes=self.max_key_bytes)
                key = check_key(op.key, self.max_key_bytes)
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
                ttl = _check_ttl(op.ttl)
                plan.puts[(ns, key)] = PutOp(ns, key, value, index, ttl)  # last one wins
            elif isinstance(op, SearchOp):
                prefix = check_namespace(
                    op.namespace_prefix, for_write=False, max_bytes=self.max_key_bytes
                )
                compile_filter(op.filter)
                _check_page(op.limit, "limit")
                _check_page(op.offset, "offset")
                if op.query is not None and not isinstance(op.query, str):
                    raise InvalidInput(f"query must be a string, got {type(op.query).__name__}")
                plan.searches.append((i, op._replace(namespace_prefix=prefix)))
            elif isinstance(op, ListNamespacesOp):
                for condition in op.match_conditions or ():
                    if condition.match_type not in ("prefix", "suffix"):
                        raise InvalidInput(f"unknown match_type {condition.match_type!r}")
                    for label in condition.path:
                        if label != "*":
                            check_namespace((label,), for_write=False, max_bytes=self.max_key_bytes)
                if op.max_depth is not None:
                    _check_page(op.max_depth, "max_depth")
                _check_page(op.limit, "limit")
                _check_page(op.offset, "offset")
                plan.lists.append((i, op))
            else:
                raise InvalidInput(f"unknown store operation {type(op).__name__}")
        return plan

    # -- the batch -----------------------------------------------------------------

    def _batch(self, ops: Iterable[Any]) -> Op[list[Result]]:
        plan = self._plan(ops)
        now = now_ms()
        # reads see the store as it was before this batch's puts (as PostgresStore does)
        if plan.gets:
            keys = [(op.namespace, op.key) for _, op in plan.gets]
            refresh = [
                op.refresh_ttl if op.refresh_ttl is not None else self._refresh_default()
                for _, op in plan.gets
            ]
            found = yield from self.port.get(keys, refresh, now)
            for (i, _), stored in zip(plan.gets, found, strict=True):
                plan.results[i] = None if stored is None else _item(stored)
        for i, op in plan.searches:
            query = yield from self._query(op, now)
            page = yield from self.port.search(query)
            plan.results[i] = [_search_item(s, query.vector is not None) for s in page]
        for i, lop in plan.lists:
            prefix = literal_prefix(lop)
            namespaces = yield from self.port.namespaces(prefix, now)
            plan.results[i] = list_page(namespaces, lop)
        if plan.puts:
            yield from self._apply_puts(list(plan.puts.values()))
        return plan.results

    def _query(self, op: SearchOp, now: int) -> Op[SearchQuery]:
        vector: tuple[float, ...] | None = None
        if op.query and self.index_config:
            embedded = yield Embed((op.query,), query=True)
            vector = tuple(self._check_dims(embedded)[0])
        refresh = op.refresh_ttl if op.refresh_ttl is not None else self._refresh_default()
        return SearchQuery(
            prefix=op.namespace_prefix,
            conditions=compile_filter(op.filter),
            limit=op.limit,
            offset=op.offset,
            refresh=bool(refresh),
            now_ms=now,
            vector=vector,
            distance=self.index_config["distance_type"] if self.index_config else "cosine",
        )

    def _apply_puts(self, puts: list[PutOp]) -> Op[None]:
        texts = {(op.namespace, op.key): self._texts(op) for op in puts if op.value is not None}
        vectors: dict[ItemKey, list[Vector]] = {k: [] for k in texts}
        wanted = {k: t for k, t in texts.items() if t}
        if wanted:
            # reuse the stored vector of every text that did not change
            keys = list(wanted)
            stored = yield from self.port.get(keys, [False] * len(keys), now_ms(), True)
            known = {
                (k, v.path, v.digest): v.data
                for k, s in zip(keys, stored, strict=True)
                if s is not None
                for v in s.vectors
            }
            missing = sorted(
                {
                    text
                    for k, pairs in wanted.items()
                    for path, text in pairs
                    if (k, path, text_digest(text)) not in known
                }
            )
            fresh: dict[str, bytes] = {}
            if missing:
                embedded = yield Embed(tuple(missing))
                fresh = {
                    t: pack_vector(v)
                    for t, v in zip(missing, self._check_dims(embedded), strict=True)
                }
            for k, pairs in wanted.items():
                for path, text in pairs:
                    digest = text_digest(text)
                    data = known.get((k, path, digest)) or fresh[text]
                    vectors[k].append(Vector(path, digest, data))
        now = now_ms()
        items: list[StoredItem] = []
        deletes: list[ItemKey] = []
        for op in puts:
            key = (op.namespace, op.key)
            if op.value is None:
                deletes.append(key)
                continue
            stamp = CLOCK.now_us()
            items.append(
                StoredItem(
                    namespace=op.namespace,
                    key=op.key,
                    value=dict(op.value),
                    created_us=stamp,
                    updated_us=stamp,
                    expires_ms=expiry_ms(op.ttl, now),
                    ttl_minutes=op.ttl,
                    vectors=vectors[key],
                )
            )
        yield from self.port.put(items, deletes, now)

    def _texts(self, op: PutOp) -> list[tuple[str, str]]:
        """(path, text) pairs to embed for a put, named as PostgresStore names them.

        Configured fields an item lacks are simply not embedded (as PostgresStore does);
        a put that names its own ``index`` paths and none of them holds text is refused.
        """
        if not self.index_config or op.index is False:
            return []
        explicit = op.index is not None
        if explicit:
            paths = [(p, _tokens(p, InvalidInput)) for p in cast(list[str], op.index)]
        else:
            paths = self.index_config["__tokenized_fields"]
        pairs: list[tuple[str, str]] = []
        for path, tokens in paths:
            texts = get_text_at_path(op.value, tokens)
            if len(texts) > 1:
                pairs += [(f"{path}.{i}", text) for i, text in enumerate(texts)]
            elif texts:
                pairs.append((path, texts[0]))
        if explicit and not pairs:
            keys = ", ".join(map(str, cast(dict[str, Any], op.value)))
            raise InvalidInput(
                f"none of the index fields {list(cast(list[str], op.index))} has text in the"
                f" value of {op.key!r} (its keys: {keys})"
            )
        return pairs

    def _check_dims(self, embedded: Any) -> list[list[float]]:
        dims = self.dims
        vectors = [list(map(float, v)) for v in embedded]
        for v in vectors:
            if len(v) != dims:
                raise InvalidInput(
                    f"the embedding model returned {len(v)} dimensions, index['dims'] is {dims}"
                )
            if not all(math.isfinite(x) for x in v):
                raise InvalidInput("the embedding model returned a non-finite number")
        return vectors

    def _sweep(self) -> Op[int]:
        return (yield from self.port.sweep(now_ms()))

    # -- drivers -------------------------------------------------------------------

    def _embed(self, request: Embed) -> list[list[float]]:
        assert self.embeddings is not None
        if request.query:
            return [self.embeddings.embed_query(request.texts[0])]
        return self.embeddings.embed_documents(list(request.texts))

    async def _aembed(self, request: Embed) -> list[list[float]]:
        assert self.embeddings is not None
        if request.query:
            return [await self.embeddings.aembed_query(request.texts[0])]
        return await self.embeddings.aembed_documents(list(request.texts))


def _item(stored: StoredItem) -> Item:
    return Item(
        value=stored.value,
        key=stored.key,
        namespace=stored.namespace,
        created_at=to_datetime(stored.created_us),
        updated_at=to_datetime(stored.updated_us),
    )


def _search_item(stored: StoredItem, scored: bool) -> SearchItem:
    return SearchItem(
        namespace=stored.namespace,
        key=stored.key,
        value=stored.value,
        created_at=to_datetime(stored.created_us),
        updated_at=to_datetime(stored.updated_us),
        score=stored.score if scored else None,
    )


class SyncStore(StoreBase):
    """A store on a blocking client; ``abatch`` runs it in a worker thread."""

    def __init__(self, port: StorePort, execute: Callable[[Any], Any], **options: Any) -> None:
        super().__init__(port, **options)
        self._execute = execute

    def _run(self, request: Any) -> Any:
        return self._embed(request) if isinstance(request, Embed) else self._execute(request)

    def _call(self, op: Op[Any]) -> Any:
        return drive(op, self._run)

    def setup(self) -> None:
        self._call(self.port.setup())

    def batch(self, ops: Iterable[Any]) -> list[Result]:
        return cast(list[Result], self._call(self._batch(ops)))

    async def abatch(self, ops: Iterable[Any]) -> list[Result]:
        ops = list(ops)
        return await asyncio.to_thread(self.batch, ops)

    def sweep_ttl(self) -> int:
        """Remove expired items now; the number removed."""
        return int(self._call(self._sweep()))

    def close(self) -> None:
        """Stop the TTL sweeper (``from_url`` does on exit)."""
        self.stop_ttl_sweeper(1)

    def start_ttl_sweeper(
        self, sweep_interval_minutes: int | None = None
    ) -> concurrent.futures.Future[None]:
        """Sweep expired items every ``sweep_interval_minutes`` in a daemon thread."""
        if self._sweeper is not None and not self._sweeper.done():
            return cast(concurrent.futures.Future[None], self._sweeper)
        interval = 60 * (sweep_interval_minutes or self.sweep_interval_minutes)
        stop = threading.Event()
        future: concurrent.futures.Future[None] = concurrent.futures.Future()

        def loop() -> None:
            try:
                while not stop.wait(interval):
                    try:
                        self.sweep_ttl()
                    except Exception:  # noqa: BLE001 - a sweep retries next interval
                        pass
                future.set_result(None)
            except BaseException as exc:  # pragma: no cover
                future.set_exception(exc)

        threading.Thread(target=loop, name="graphkeep-ttl-sweeper", daemon=True).start()
        self._sweeper, self._sweeper_stop = future, stop
        return future

    def stop_ttl_sweeper(self, timeout: float | None = None) -> bool:
        """Stop the sweeper; True when it stopped within ``timeout``."""
        if self._sweeper is None:
            return True
        self._sweeper_stop.set()
        try:
            self._sweeper.result(timeout=timeout)
        except concurrent.futures.TimeoutError:
            return False
        self._sweeper = self._sweeper_stop = None
        return True


class AsyncStore(StoreBase, AsyncBatchedBaseStore):
    """A store on an asyncio client, batched as LangGraph's own async stores are.

    ``aget``/``aput``/``asearch``/... calls made in the same event-loop tick are gathered
    into one ``abatch`` (one round trip per partition on Redis) by LangGraph's
    ``AsyncBatchedBaseStore``, so a burst of thousands of concurrent calls never needs
    thousands of connections. Inputs are checked when each call is made, so a bad call fails
    alone. Sync calls hop onto the store's event loop from another thread (as LangGraph's
    sync ``invoke`` in a worker does); create the store inside a running event loop.
    """

    def __init__(self, port: StorePort, aexecute: Callable[[Any], Any], **options: Any) -> None:
        self._task = None  # AsyncBatchedBaseStore.__del__ reads it even if __init__ fails
        StoreBase.__init__(self, port, **options)
        AsyncBatchedBaseStore.__init__(self)
        self._aexecute = aexecute
        self.loop = running_loop()

    # each call checked alone before it joins a batch (a bad one must not fail the others)

    async def aget(
        self, namespace: tuple[str, ...], key: str, *, refresh_ttl: bool | None = None
    ) -> Item | None:
        self._plan([GetOp(namespace, key)])
        return await super().aget(namespace, key, refresh_ttl=refresh_ttl)

    async def aput(
        self,
        namespace: tuple[str, ...],
        key: str,
        value: Mapping[str, Any],
        index: Literal[False] | list[str] | None = None,
        *,
        ttl: float | None | NotProvided = NOT_PROVIDED,
    ) -> None:
        checked = None if isinstance(ttl, NotProvided) else ttl
        self._plan([PutOp(namespace, key, cast(dict[str, Any], value), index, checked)])
        await super().aput(namespace, key, value, index, ttl=ttl)

    async def adelete(self, namespace: tuple[str, ...], key: str) -> None:
        self._plan([PutOp(namespace, key, None)])
        await super().adelete(namespace, key)

    async def asearch(
        self,
        namespace_prefix: tuple[str, ...],
        /,
        *,
        query: str | None = None,
        filter: dict[str, Any] | None = None,
        limit: int = 10,
        offset: int = 0,
        refresh_ttl: bool | None = None,
    ) -> list[SearchItem]:
        self._plan([SearchOp(namespace_prefix, filter, limit, offset, query)])
        return await super().asearch(
            namespace_prefix,
            query=query,
            filter=filter,
            limit=limit,
            offset=offset,
            refresh_ttl=refresh_ttl,
        )

    async def aclose(self) -> None:
        """Stop the TTL sweeper and the batching task (``from_url`` does on exit)."""
        await self.stop_ttl_sweeper(1)
        task = self._task
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _arun(self, request: Any) -> Any:
        if isinstance(request, Embed):
            return await self._aembed(request)
        return await self._aexecute(request)

    async def _acall(self, op: Op[Any]) -> Any:
        return await adrive(op, self._arun)

    async def setup(self) -> None:
        await self._acall(self.port.setup())

    async def abatch(self, ops: Iterable[Any]) -> list[Result]:
        return cast(list[Result], await self._acall(self._batch(ops)))

    def batch(self, ops: Iterable[Any]) -> list[Result]:
        return cast(
            list[Result],
            on_loop(
                self.loop,
                self.abatch(list(ops)),
                "store",
                "the async methods (aget, asearch, aput, ...) or a sync store from"
                " graphkeep.connect_store()",
            ),
        )

    async def sweep_ttl(self) -> int:
        """Remove expired items now; the number removed."""
        return int(await self._acall(self._sweep()))

    async def start_ttl_sweeper(
        self, sweep_interval_minutes: int | None = None
    ) -> asyncio.Task[None]:
        """Sweep expired items every ``sweep_interval_minutes`` in a background task."""
        if self._sweeper is not None and not self._sweeper.done():
            return cast(asyncio.Task[None], self._sweeper)
        interval = 60 * (sweep_interval_minutes or self.sweep_interval_minutes)

        async def loop() -> None:
            while True:
                await asyncio.sleep(interval)
                try:
                    await self.sweep_ttl()
                except Exception:  # noqa: BLE001 - a sweep retries next interval
                    pass

        self._sweeper = asyncio.create_task(loop())
        return cast(asyncio.Task[None], self._sweeper)

    async def stop_ttl_sweeper(self, timeout: float | None = None) -> bool:
        """Stop the sweeper task; True when it stopped within ``timeout``."""
        task = self._sweeper
        if task is None:
            return True
        task.cancel()
        try:
            await asyncio.wait_for(asyncio.shield(task), timeout)
        except asyncio.CancelledError:
            pass
        except asyncio.TimeoutError:
            return False
        self._sweeper = None
        return True


# re-exported helpers for backends that page through candidates themselves
__all__ = [
    "AsyncStore",
    "Condition",
    "Embed",
    "ItemKey",
    "StorePort",
    "StoreBase",
    "Namespace",
    "SearchQuery",
    "Sleep",
    "StoredItem",
    "SyncStore",
    "Vector",
    "decode_value",
    "encode_value",
    "in_prefix",
    "matches",
    "namespace_of",
    "namespace_text",
    "rank",
]
