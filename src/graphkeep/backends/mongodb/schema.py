"""Every MongoDB index graphkeep keeps, for all its products, and :func:`ensure_indexes`.

The saver's (:func:`index_specs`), the store's (:func:`store_indexes`), the node cache's
(:data:`CACHE_INDEXES`), the event log's (:data:`EVENTS_INDEXES`) and the effect ledger's
(:data:`EFFECTS_INDEXES`) specs are plain dicts;
each port's ``setup()`` creates them with :func:`ensure_indexes`, idempotently, comparing
key *and* options, and a server without TTL indexes (FerretDB 1.x) gets a plain index
instead. See docs/architecture.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pymongo import IndexModel
from pymongo.errors import OperationFailure

from graphkeep.backends.mongodb.documents import check_prefix
from graphkeep.backends.mongodb.requests import Command
from graphkeep.errors import ConfigurationError
from graphkeep.port import Op

#: index options compared by ``setup()`` (absent = default)
INDEX_OPTIONS = ("unique", "sparse", "expireAfterSeconds", "partialFilterExpression")


def _expiry(collection: str | None = None) -> dict[str, Any]:
    """The TTL index on ``expires_at`` (``expireAfterSeconds: 0``: it holds the absolute expiry)."""
    spec: dict[str, Any] = {} if collection is None else {"collection": collection}
    spec.update(name="gk_expires_at", key=[["expires_at", 1]], expireAfterSeconds=0)
    return spec


# -- the saver -------------------------------------------------------------------------


def collection_names(prefix: str) -> tuple[str, str]:
    """(thread documents, locks) collection names for ``prefix``."""
    return f"{prefix}_payloads", f"{prefix}_locks"


def index_specs(prefix: str = "graphkeep") -> list[dict[str, Any]]:
    """Every index the saver's ``setup()`` creates, as plain dicts (print them, or create
    them yourself).

    ``expires_at`` carries a TTL index (``expireAfterSeconds: 0``: the field holds the
    absolute expiry). On a server without TTL indexes ``setup()`` creates the plain
    ``gk_expires_at_plain`` index instead and expired documents are hidden from reads
    until ``purge_expired()`` removes them.
    """
    payloads, locks = collection_names(check_prefix(prefix))
    return [
        {
            # checkpoints (kind "cp", ref = checkpoint id), writes, blobs, elements, chunks
            "collection": payloads,
            "name": "gk_thread_ns_kind_ref",
            "key": [["thread_id", 1], ["ns", 1], ["kind", 1], ["ref", 1], ["sub", 1], ["part", 1]],
            "unique": True,
        },
        {
            # only checkpoint documents carry run_id (delete_for_runs)
            "collection": payloads,
            "name": "gk_run_id",
            "key": [["run_id", 1]],
            "sparse": True,
        },
        _expiry(payloads),
        _expiry(locks),
    ]


# -- the store, the node cache, the event log and the effect ledger --------------------


def store_indexes(key_prefix: str = "graphkeep") -> list[dict[str, Any]]:
    """The indexes the store's ``setup()`` creates, as plain dicts (the saver's format)."""
    collection = f"{check_prefix(key_prefix)}_store"
    return [
        {
            "collection": collection,
            "name": "gk_ns_key",
            "key": [["ns", 1], ["key", 1]],
            "unique": True,
        },
        {
            "collection": collection,
            "name": "gk_ns_updated",
            "key": [["ns", 1], ["updated_us", -1]],
        },
        _expiry(collection),
    ]


#: the node cache's ``<prefix>_cache``: ``clear(namespaces)`` by ``ns``, expiry
CACHE_INDEXES: list[dict[str, Any]] = [{"name": "gk_ns", "key": [["ns", 1]]}, _expiry()]

#: the event log's ``<prefix>_events``: a run's events in order, expiry
EVENTS_INDEXES: list[dict[str, Any]] = [
    {"name": "gk_run_seq", "key": [["run", 1], ["seq", 1]], "unique": True},
    _expiry(),
]

#: the effect ledger's ``<prefix>_effects``: ``list`` / ``clear`` of a thread by ``t``, expiry
EFFECTS_INDEXES: list[dict[str, Any]] = [{"name": "gk_thread", "key": [["t", 1]]}, _expiry()]


# -- creating them ---------------------------------------------------------------------


def index_signature(spec: Mapping[str, Any]) -> tuple[Any, ...]:
    """(key, options) of an index spec or of a ``listIndexes`` entry, for comparison."""
    key = spec.get("key", [])
    items = key.items() if isinstance(key, Mapping) else key
    fields = tuple((str(k), _direction(v)) for k, v in items)
    options = tuple((name, _option(name, spec.get(name))) for name in INDEX_OPTIONS)
    return fields, options


def _direction(value: Any) -> Any:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return int(value)
    return value


def _option(name: str, value: Any) -> Any:
    if name in ("unique", "sparse"):
        return bool(value)
    if name == "expireAfterSeconds":
        return None if value is None else int(value)
    return value


def _model(spec: Mapping[str, Any]) -> IndexModel:
    options = {name: spec[name] for name in INDEX_OPTIONS if name in spec}
    return IndexModel([(k, v) for k, v in spec["key"]], name=spec["name"], **options)


def _ttl_unsupported(exc: OperationFailure) -> bool:
    return exc.code in (115, 238) or "expireAfterSeconds" in str(exc)


def ensure_indexes(collection: str, wanted: list[dict[str, Any]]) -> Op[bool]:
    """Create the ``wanted`` index specs on ``collection`` unless equal ones exist (key and
    options); a TTL index the server refuses becomes a plain ``<name>_plain`` index.
    Returns whether the server keeps TTL indexes."""
    existing: list[Mapping[str, Any]] = yield Command(collection, "list_indexes")
    by_name = {ix["name"]: ix for ix in existing}
    signatures = {index_signature(ix) for ix in existing}
    missing = []
    for spec in wanted:
        have = by_name.get(spec["name"])
        if have is not None:
            # a server that keeps no sparse flag (FerretDB 1.x) lists the index without it
            unflagged = {**spec, "sparse": have.get("sparse")}
            if index_signature(have) not in (index_signature(spec), index_signature(unflagged)):
                raise ConfigurationError(
                    f"index {spec['name']!r} on collection {collection!r} exists with"
                    f" other keys or options ({dict(have)}); expected {spec}. Drop it,"
                    " or pass setup=False and manage the indexes yourself"
                    " (MongoDBSaver.schema() lists them)"
                )
            continue
        if index_signature(spec) not in signatures:
            missing.append(spec)
    plain = [s for s in missing if "expireAfterSeconds" not in s]
    if plain:
        yield Command(collection, "create_indexes", ([_model(s) for s in plain],))
    ttl_ok = True
    for spec in [s for s in missing if "expireAfterSeconds" in s]:
        try:
            yield Command(collection, "create_indexes", ([_model(spec)],))
        except OperationFailure as exc:
            if not _ttl_unsupported(exc):
                raise
            ttl_ok = False
            fallback = {k: v for k, v in spec.items() if k != "expireAfterSeconds"}
            fallback["name"] = f"{spec['name']}_plain"
            if fallback["name"] not in by_name:
                yield Command(collection, "create_indexes", ([_model(fallback)],))
    return ttl_ok
