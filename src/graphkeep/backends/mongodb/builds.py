"""``setup()``'s index builds: one index per ``createIndexes``, one build per collection at a
time across every process, under a setup lease (:func:`ensure_indexes`).

Managed MongoDB services refuse a second index build on a collection while one runs
(Amazon DocumentDB: error 40333; Cosmos DB for MongoDB vCore likewise): a ``setup()``
that starts two loses one (LibreChat lost its TTL index so, and checkpoints grew
forever). A fleet of workers starting at once on a fresh database would do exactly
that. So:

- ``setup()`` first lists the collection's indexes; when every wanted one exists it
  returns, having written nothing and taken no lease;
- otherwise it takes the collection's *setup lease*: a document ``{_id: <collection>,
  token, expires_at}`` in ``<prefix>_setup`` (upserted by ``_id``, so that collection
  needs no index of its own; the lease of :mod:`.locks`), lists the indexes again and
  creates each missing one in a ``createIndexes`` of its own, one after the other, then
  deletes the lease;
- a process that finds the lease held waits (:class:`~graphkeep.port.Sleep`, 50 ms
  doubling to 1 s) and lists again, until the indexes exist or it gets the lease; after
  :data:`SETUP_WAIT_S` it raises :class:`~graphkeep.errors.SetupTimeout`;
- a lease expires :data:`SETUP_LEASE_MS` after it was taken or extended (the builder
  extends it before a build once half of it is gone), so a builder that crashed is taken
  over by the next waiter; a build the server still runs for it is waited for
  (MongoDB's 276 / DocumentDB's 40333 answer "in progress": wait, list, try again).

The same generator runs on the sync and the async driver (docs/architecture.md, "The
port"). Creating the indexes before a collection's first write matters too: Cosmos DB
RU cannot add a unique index to a collection that holds documents, so ``setup()`` runs
before anything writes (``from_url`` / ``connect`` do that unless ``setup=False``).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pymongo import IndexModel
from pymongo.errors import OperationFailure

from graphkeep.backends.mongodb.locks import acquire_lease, extend_lease, release_lease
from graphkeep.backends.mongodb.requests import Command
from graphkeep.backends.mongodb.ttl import utc_now
from graphkeep.errors import ConfigurationError, SetupTimeout
from graphkeep.port import Op, Sleep

#: index options compared by ``setup()`` (absent = default)
INDEX_OPTIONS = ("unique", "sparse", "expireAfterSeconds", "partialFilterExpression")

#: options an index created by an older graphkeep may carry and still count as the wanted
#: one (by index name): ``gk_run_id`` was sparse before Cosmos DB vCore's lack of sparse
#: indexes made it plain; the sparse one serves ``delete_for_runs`` the same, so it is
#: kept rather than rebuilt
EQUIVALENT_OPTIONS: Mapping[str, tuple[Mapping[str, Any], ...]] = {
    "gk_run_id": ({"sparse": True},),
}

#: how long a setup lease lives unless its builder extends it (a crashed builder's lease
#: is taken over this long after it last wrote it)
SETUP_LEASE_MS = 30_000
#: how long ``setup()`` waits for another process's index builds before SetupTimeout
SETUP_WAIT_S = 120.0
#: pauses between a waiter's looks: the first, and the longest
POLL_FIRST_S = 0.05
POLL_MAX_S = 1.0
#: "an index build on this collection is in progress": MongoDB's IndexBuildAlreadyInProgress,
#: Amazon DocumentDB's one-build-per-collection refusal
BUILD_IN_PROGRESS = frozenset({276, 40333})
#: "no TTL index here" (FerretDB 1.x: NotImplemented; InvalidOptions)
TTL_UNSUPPORTED = frozenset({115, 238})
#: the suffix of the plain index made when the server refuses a TTL index
PLAIN_SUFFIX = "_plain"


def leases_collection(collection: str) -> str:
    """Where the setup leases of ``collection`` live: ``<prefix>_setup`` (every graphkeep
    collection is named ``<prefix>_<what>``, ``<what>`` without an underscore)."""
    prefix, _, _ = collection.rpartition("_")
    return f"{prefix or collection}_setup"


# -- comparing -------------------------------------------------------------------------


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


def equivalent(spec: Mapping[str, Any], have: Mapping[str, Any]) -> bool:
    """Whether the listed index ``have`` serves as ``spec``: same key and options, or the
    options an older graphkeep gave that index (:data:`EQUIVALENT_OPTIONS`)."""
    listed = index_signature(have)
    variants = [spec, *({**spec, **o} for o in EQUIVALENT_OPTIONS.get(spec["name"], ()))]
    return any(index_signature(v) == listed for v in variants)


@dataclass
class Plan:
    """What ``setup()`` must still create on one collection, from its ``listIndexes``."""

    missing: list[dict[str, Any]] = field(default_factory=list)
    #: False once a TTL spec is served by its plain stand-in (a server without TTL indexes)
    ttl_ok: bool = True


def plan(collection: str, wanted: list[dict[str, Any]], existing: list[Mapping[str, Any]]) -> Plan:
    """The specs of ``wanted`` that ``existing`` lacks (plain ones first, TTL ones last);
    an index of a wanted name with other keys or options is a ConfigurationError."""
    by_name = {ix["name"]: ix for ix in existing}
    signatures = {index_signature(ix) for ix in existing}
    found = Plan()
    for spec in wanted:
        have = by_name.get(spec["name"])
        if have is not None:
            if not equivalent(spec, have):
                raise ConfigurationError(
                    f"index {spec['name']!r} on collection {collection!r} exists with"
                    f" other keys or options ({dict(have)}); expected {spec}. Drop it,"
                    " or pass setup=False and manage the indexes yourself"
                    " (MongoDBSaver.schema() lists them)"
                )
        elif "expireAfterSeconds" in spec and spec["name"] + PLAIN_SUFFIX in by_name:
            found.ttl_ok = False  # made here before: this server keeps no TTL index
        elif index_signature(spec) not in signatures:
            found.missing.append(spec)
    found.missing.sort(key=lambda s: "expireAfterSeconds" in s)
    return found


# -- building --------------------------------------------------------------------------


def model(spec: Mapping[str, Any]) -> IndexModel:
    """The driver's model of an index spec (its key, name and compared options)."""
    options = {name: spec[name] for name in INDEX_OPTIONS if name in spec}
    return IndexModel([(k, v) for k, v in spec["key"]], name=spec["name"], **options)


def ensure_indexes(collection: str, wanted: list[dict[str, Any]]) -> Op[bool]:
    """Create the ``wanted`` index specs on ``collection`` unless equal ones exist (key and
    options), one ``createIndexes`` each, under the collection's setup lease; a TTL index
    the server refuses becomes a plain ``<name>_plain`` index. Returns whether the server
    keeps TTL indexes. See the module docstring for the fleet protocol."""
    found = plan(collection, wanted, (yield Command(collection, "list_indexes")))
    if not found.missing:
        return found.ttl_ok
    leases, token = leases_collection(collection), uuid.uuid4().hex
    deadline = time.monotonic() + SETUP_WAIT_S
    pause = POLL_FIRST_S
    while True:
        if (yield from acquire_lease(leases, collection, token, SETUP_LEASE_MS, utc_now())):
            try:
                built = yield from _build(collection, wanted, leases, token)
            except Exception:
                yield from release_lease(leases, collection, token)
                raise
            if built is not None:
                yield from release_lease(leases, collection, token)
                return built
            # the lease ran out during a long build and another process took it: wait
        if time.monotonic() >= deadline:
            raise SetupTimeout(
                f"setup() waited {SETUP_WAIT_S:g} s for another process to create the"
                f" indexes of collection {collection!r} (its lease is in {leases!r});"
                " is a setup() still running? A crashed one's lease expires"
                f" {SETUP_LEASE_MS // 1000} s after it was taken"
            )
        yield Sleep(pause)
        pause = min(pause * 2, POLL_MAX_S)
        found = plan(collection, wanted, (yield Command(collection, "list_indexes")))
        if not found.missing:
            return found.ttl_ok


def _build(
    collection: str, wanted: list[dict[str, Any]], leases: str, token: str
) -> Op[bool | None]:
    """Under the lease: list again, then create each missing index in turn. Returns
    whether the server keeps TTL indexes, or None when the lease was lost meanwhile."""
    held_until = time.monotonic() + SETUP_LEASE_MS / 1000
    found = plan(collection, wanted, (yield Command(collection, "list_indexes")))
    ttl_ok = found.ttl_ok
    for spec in found.missing:
        if held_until - time.monotonic() < SETUP_LEASE_MS / 2000:
            if not (yield from extend_lease(leases, collection, token, SETUP_LEASE_MS, utc_now())):
                return None
            held_until = time.monotonic() + SETUP_LEASE_MS / 1000
        created = yield from _create(collection, spec)
        if created is None:
            return None  # another build runs on this collection: wait, then look again
        ttl_ok = ttl_ok and created
    return ttl_ok


def _create(collection: str, spec: Mapping[str, Any]) -> Op[bool | None]:
    """ONE index in one ``createIndexes``: True when made as asked, False when a refused
    TTL index became ``<name>_plain``, None when the server is building another index on
    the collection (a crashed builder's, still running)."""
    try:
        # a duplicate key here is the data refusing a unique index: no retry mends that
        yield Command(collection, "create_indexes", ([model(spec)],), retry_conflicts=False)
        return True
    except OperationFailure as exc:
        if exc.code in BUILD_IN_PROGRESS:
            return None
        if "expireAfterSeconds" in spec and (
            exc.code in TTL_UNSUPPORTED or "expireAfterSeconds" in str(exc)
        ):
            plain = {k: v for k, v in spec.items() if k != "expireAfterSeconds"}
            plain["name"] = spec["name"] + PLAIN_SUFFIX
            made = yield from _create(collection, plain)
            return None if made is None else False
        raise ConfigurationError(
            f"could not create index {spec['name']!r} on collection {collection!r}:"
            f" {exc}. Some services take indexes only before a collection's first write"
            " (Cosmos DB RU: no unique index once it holds documents): run setup() before"
            " anything writes, or create the indexes yourself and pass setup=False"
            " (schema() lists them)"
        ) from exc
