"""Every MongoDB index graphkeep keeps, for all its products, and :func:`ensure_indexes`.

The saver's (:func:`index_specs`), the store's (:func:`store_indexes`), the node cache's
(:data:`CACHE_INDEXES`), the event log's (:data:`EVENTS_INDEXES`) and the effect ledger's
(:data:`EFFECTS_INDEXES`) specs are plain dicts;
each port's ``setup()`` creates them with :func:`ensure_indexes` (:mod:`.builds`: one index
per ``createIndexes``, one build per collection at a time across a fleet), idempotently,
comparing key *and* options, and a server without TTL indexes (FerretDB 1.x) gets a plain
index instead. Only plain, unique and TTL indexes: no sparse, partial, hashed, text or
wildcard index, which some managed services lack. See docs/architecture.md.
"""

from __future__ import annotations

from typing import Any

from graphkeep.backends.mongodb.builds import ensure_indexes, index_signature
from graphkeep.backends.mongodb.documents import check_prefix

__all__ = [
    "CACHE_INDEXES",
    "EFFECTS_INDEXES",
    "EVENTS_INDEXES",
    "collection_names",
    "ensure_indexes",
    "index_signature",
    "index_specs",
    "store_indexes",
]


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
            # only checkpoint documents carry run_id (delete_for_runs); plain, not sparse
            # (Cosmos DB vCore has no sparse index): every other document indexes as null.
            # A sparse one made by graphkeep before is kept (builds.EQUIVALENT_OPTIONS)
            "collection": payloads,
            "name": "gk_run_id",
            "key": [["run_id", 1]],
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
