"""graphkeep on MongoDB (PyMongo ``>=4.13.2``): savers, store, node cache and run event log.

Each product runs on ``pymongo.MongoClient`` (sync) or PyMongo's native
``pymongo.AsyncMongoClient`` (async; no motor, no thread hops). Construct from an existing
client or with ``from_url`` as a context manager::

    with MongoDBSaver.from_url("mongodb://localhost:27017/mydb") as saver:
        graph = builder.compile(checkpointer=saver)

    async with AsyncMongoDBSaver.from_url("mongodb+srv://user:pw@cluster0.example.net/") as saver:
        ...

    saver = MongoDBSaver(MongoClient(...), db_name="graphkeep", ttl=86400)
    saver.setup()

The database comes from the URL path (default ``graphkeep``); query-string options go
to the client. The mapping: :mod:`.checkpoint` (the saver's port and the savers, with
:mod:`.threads` and :mod:`.ids`), :mod:`.store`, :mod:`.cache`, :mod:`.events`,
:mod:`.effects`; the driver side in :mod:`.client`. The saver's layout follows (see also
docs/architecture.md).

Collections (``P`` = ``key_prefix``, default ``graphkeep``)
-----------------------------------------------------------
``P_payloads`` holds everything of a thread (format 2), told apart by ``kind``, so that
one ordered command writes a checkpoint with its values::

    {_id, thread_id, ns, kind, ref, sub, part, expires_at, ...}

Only the indexed and queried fields keep readable names; what only the client reads is
short-named or packed (FerretDB keeps a document as JSON with its field names and a type
schema, binary as base64: this layout stores W50 in about half the bytes of 0.1.x's).
``sub`` is left out when empty, ``part`` on heads (both index as null).

- ``kind: "cp"``, a checkpoint; ``ref`` = checkpoint id::

    {..., s: Binary,         # msgpack [format 2, parent_id, {channel: version}, present,
                             #   needs_history, delta {channel: [id, v]},
                             #   lists {channel: [version, [[epoch, lo, hi], ...]]}, chunked]
     d: Binary,              # msgpack [checkpoint tag, bytes, metadata tag, bytes] (exact)
     run_id,                 # indexed (plain; other kinds index as null): delete_for_runs
     metadata_doc: {...}, metadata_opaque: [key, ...]}   # queryable copy (see below)

  ``delta`` is the DeltaChannel bookkeeping for the TTL, ``lists`` the element runs of
  its list channels; ``d`` is absent when the payload moved to chunk documents.
- ``kind: "blob"``, a channel value: ``ref`` = ``"<len(channel)>:<channel>:<version>"``;
  also ``y`` (type tag) and ``d`` (bytes, left out when empty). Stored once per (thread,
  ns, channel, version), only for channels in ``new_versions``. A list value is a small
  *manifest* blob plus one *element* blob per element (channel ``__graphkeep.element__``,
  version = element key; see :mod:`graphkeep.checkpoint.lists`), each stored once per thread.
- ``kind: "write"``: ``ref`` = checkpoint id, ``sub`` = ``"<len(task_id)>:<task_id>:<idx>"``;
  also ``channel`` (queried by the DeltaChannel history), ``p`` (task path, when set),
  ``y``, ``d``. Regular writes are insert-if-absent (``$setOnInsert`` upserts), special
  writes (idx < 0) replace; one ``bulk_write``.
- ``kind: "checkpoint"``: the packed checkpoint + metadata of a checkpoint too large to
  inline (``ref`` = checkpoint id).
- ``kind: "fence"``: the thread's fencing token (the last lease's grant; one per thread,
  ``_id`` from ``f`` and the thread), ``holder`` and ``expires_at`` (30 days after the last
  grant); no ``ns`` nor ``ref``. Not the thread's data: no read, inventory, export or
  deletion of the thread names it, so ``delete_thread`` leaves it (:mod:`.fences`).

One collection makes ``put`` ONE ordered ``update`` command: element and blob upserts,
expiry refreshes, then the checkpoint document last; an ordered batch stops at its first
error, so no reader ever finds a checkpoint whose values are missing (no transaction).
``get_tuple`` is two ``find`` commands: the checkpoint, then its writes, blobs *and* list
elements (read as index ranges of ``ref``, from the checkpoint's ``lists`` runs); FerretDB
1.24, our test server, has no ``$lookup``/``$unionWith``. A checkpoint whose list
channels its writer did not know (a new process putting with the list unchanged) has no
``lists`` entry for them and costs one more find to read.

Format 1 (graphkeep 0.1.x) kept checkpoints in ``P_checkpoints`` and spelled every field
out (``_id`` the identity itself, ``type``/``data``/``count``/``gen``, ``channel`` and
``version`` on blobs, ``task_id``/``idx``/``task_path`` on writes, chunk tails
``part: "<gen>:<n>"``). ``setup()`` rewrites it: payload documents in place (new
document first, then the old one deleted; the two never collide in the unique index, and
readers accept both layouts meanwhile), checkpoints moved into ``P_payloads``, the
emptied ``P_checkpoints`` dropped; resumable. Stop 0.1.x writers before upgrading: what
they write afterwards is not read.

``P_locks`` holds the per-thread leases of ``saver.lock()`` (``_id`` = thread id, a
token and ``expires_at``), apart from the thread's data. A grant takes the lease there,
then raises the fencing token in the thread's fence document, then its copy in the effect
ledger's ``P_effects``: every write under the lease is its one ordered command with a guard
first, which fails on a newer token, so nothing of the write is stored
(:class:`graphkeep.errors.LeaseLost`; :mod:`.fences`), and so is an effect's start under it
(its guard reads the copy: :mod:`.effects`).

Indexes (``MongoDBSaver.schema()`` returns them as dicts; ``setup()`` creates them
idempotently, comparing key *and* options, one per ``createIndexes`` and one build per
collection at a time across processes, under a setup lease in ``P_setup``
(:mod:`.builds`); ``setup=False`` skips it)::

    P_payloads     gk_thread_ns_kind_ref    {thread_id, ns, kind, ref, sub, part}  unique
                   gk_run_id                {run_id}  (only checkpoints carry it; plain)
                   gk_expires_at            {expires_at}  expireAfterSeconds: 0 (TTL)
    P_locks        gk_expires_at            {expires_at}  expireAfterSeconds: 0 (TTL)

Every document has a deterministic ``_id``: a 128-bit digest (22 base64url characters) of
its identity, length-prefixed: ``c``, thread, ns, checkpoint id for a checkpoint; ``p``,
thread, ns, kind, ref, sub, part for a payload. Every upsert names its document by ``_id``, the
primary key that every MongoDB-compatible server looks up through an index (FerretDB's
SQLite handler pushes down no other filter, so upserts on the compound key would scan
the collection there). Queries use the compound indexes above.

Sharding: shard ``P_payloads`` on ``{thread_id: 1}`` and pass
``sharded=True`` (``graphkeep.connect(url, sharded=True)``): MongoDB requires an upsert
on a sharded collection to name the full shard key, so the upserts then filter on
``{_id, thread_id}``. Every unique index leads with ``thread_id``, so MongoDB can
enforce it on this ranged shard key, every query carries ``thread_id`` and every
operation of a thread targets one shard. A hashed ``{thread_id: "hashed"}`` key spreads
hot threads more evenly, but MongoDB cannot enforce compound unique indexes there:
create the ``schema()`` indexes without ``unique`` yourself and pass ``setup=False``.
Nothing is lost: the ``_id`` encodes the thread, so all copies of one record would live
on the thread's shard, where ``_id`` is unique.

The 16 MB guard: our own chunk documents, not GridFS
---------------------------------------------------
Any payload (blob, write, or checkpoint + metadata) over ``chunk_size`` (8 MiB) is
split into a *head* document (no ``part``, first chunk, count ``n``, ``g`` = digest of
the whole payload) and tail documents (``part: "<g>/<i>"``) in the same payloads
collection, under the same ``ref``. So the queries that fetch a checkpoint's writes and
blobs fetch their chunks too (no extra round trip), deleting by ``ref`` deletes every
chunk, and the TTL refresh of a ``ref`` covers every chunk. A reader assembles only the
head's generation, so a retried or overwritten payload never mixes chunks; tails without
their head (a write in flight) are not read. A payload written again in place (a
checkpoint put again with its id, a special write replaced, a value or an import written
again) leaves the old generation's tails, or a whole chunked checkpoint payload that is
inline now: the bulk's reply says which heads matched a stored document, and one more
command deletes what those left (and what a kept regular write's second sending wrote),
after the new heads are stored; a usual write, whose heads are all inserted, sends none
(:mod:`.upserts`). A reader that read a head whose tails were deleted since reads again;
a head still missing its tails is ``CorruptData`` (``missing_value``), never a value read
as absent (:mod:`graphkeep.port.torn`). GridFS would need two more collections, a second
query per file and its own deletion and expiry, and knows nothing of threads.
Documents stay far below 16 MiB: identity fields are bounded (1 KiB ids, 64 KiB task
paths), the queryable metadata copy is capped at 1 MiB.

Metadata filters
----------------
``metadata_doc`` is a plain BSON copy of the metadata, so ``list(filter=...)`` runs on the
server for any top-level key, as ``{"metadata_doc.<key>": {"$eq": value}}`` (values are
always wrapped in ``$eq``, never operators). Keys containing "." or "$" are left out of
the copy and never pushed down; values a document cannot hold portably (ints beyond
int64, NaN/inf, arrays nested directly in arrays, keys with "."/"$" inside) are listed
in ``metadata_opaque`` so the server still selects those checkpoints. The saver
re-checks every filter in Python, and the serialized ``metadata`` is the source of truth.

TTL
---
``ttl`` sets an absolute ``expires_at`` on every document written; a TTL index with
``expireAfterSeconds: 0`` lets MongoDB delete it. The window slides per thread without
touching the whole thread: each ``put`` writes fresh expiries on its documents and, in
the same command, extends what the new checkpoint needs: the blobs of unchanged
channels, the list elements its manifests name, and, for DeltaChannels rebuilt from
history, the ancestors (checkpoints, writes, chunks) from the nearest stored value up to
the parent plus that seed value. List elements get 1.5 ``ttl`` and are refreshed only
once less than one ``ttl`` is left (a filter on ``expires_at``), so a growing list is
not rewritten at every put and an element never expires before a checkpoint naming it
(it may outlive its last one by ttl/2). A put whose writer does not know the list
channels of an unchanged value (cold cache) refreshes every element of the namespace.
Where that history starts is kept in each checkpoint's ``delta`` field and in a small
in-process cache, so ``put`` reads its parent only after a restart (one extra find).
``put_writes`` stamps its writes. Old history a live head does not need expires on
schedule. Documents past ``expires_at`` are hidden from every read even before the TTL
monitor (which runs about once a minute) deletes them. Servers without TTL indexes
(FerretDB 1.x) get a plain index instead and a warning; call ``purge_expired()``
periodically there. ``refresh_ttl_on_read`` extends what each read returns (one more
command per read).

Errors: a lost server raises :class:`graphkeep.errors.StorageUnavailable` naming the URL
(password masked). Every request is idempotent, so quick connection drops and upsert
races on a unique key are retried with backoff; after the driver itself waited for a
server, the error is raised at once. ``from_url`` sets ``serverSelectionTimeoutMS`` to
10 s unless the URL sets it (PyMongo's default is 30 s).

Wire-compatible servers: everything used here exists on MongoDB and on FerretDB 1.24;
the code avoids what Amazon DocumentDB and Azure Cosmos DB for MongoDB (vCore, RU) lack:
``$lookup``, ``$expr``, ``$where``, ``$jsonSchema``, ``$$NOW``, pipeline updates, the
``$set``/``$unset``/``$merge``/``$out``/``$unionWith``/``$graphLookup`` stages,
``collMod``, sparse, partial, hashed, text and wildcard indexes, transactions, and two
index builds on one collection at once; it never stores nested arrays, NaN or dotted keys.
Where FerretDB differs, the code adapts without changing behaviour on MongoDB: no TTL
indexes (see TTL), reply batches not capped at 16 MiB (a reply over the 48 MB wire
limit is re-read in small batches), no projection in ``findAndModify`` (the lease and
fence documents are read whole), and a failed ``update`` answered without the counts
PyMongo merges (raised as :class:`.client.IncompleteBulkReply`; a write under a lease then
reads the fence document to tell a refusal). FerretDB 1.x answers every query but ``_id`` equality
by scanning the collection, so it gets slow as a collection grows; MongoDB uses the
indexes above.

Round trips: ``put`` 1 command (one ordered batch), ``put_writes`` 1, ``get_tuple`` 2
(+1 for list channels its checkpoint does not name), a ``list`` page 2 (writes, blobs and
elements of the whole page in one ``find``), ``get_delta_channel_history`` 2 for up to
1,000 ancestors, ``delete_thread`` 1; a lease's grant 3 (the lease, the fencing token,
its copy for the effect ledger), and under it ``put`` and ``put_writes`` still 1 each (the
guard rides in the same ``update`` command), an effect's claim 1 (+1 to read a record it
finds) and ``delete_thread`` one ``bulk_write`` that MongoDB takes as two commands (the
guard is an update, the deletions a ``delete``). Multi-document
transactions are never used: blobs and chunks are written before the checkpoint and
deleted after it, in ordered batches, so a reader never sees a checkpoint whose values are
missing.

Watching a thread
-----------------
Watching a thread (``saver.watch`` / ``awatch``) polls
:meth:`~graphkeep.backends.mongodb.ids.KeyReads.commits`: one ``find`` on
``{thread_id, ns, kind: "cp", ref: {$gt: above}}`` sorted by ``ref``, projecting only ``ns``
and ``ref``, which the unique ``gk_thread_ns_kind_ref`` index serves as a range
scan (equality on its first three fields, the range and the sort on ``ref``) and covers
(every field it returns is in the index: no document is fetched). ``ns=None`` drops the
``ns`` equality: the same index is scanned with ``ns`` unbounded (the planner seeks each
namespace's ``kind: "cp", ref > above`` interval) and the few matching keys are sorted by
``(ref, ns)`` with the limit (a top-k sort), so no index is added for it (a fourth index
would be maintained on every blob and write document of every put). Nothing new costs one
``find`` that returns no document. The poller backs off while the thread is idle
(:mod:`graphkeep.checkpoint.watch`).

Change streams are not used: a change stream needs a replica set (or a sharded cluster)
and keeps one server cursor per watcher, while polling the index works the same on a
standalone server, replica sets, sharded clusters (every query names the shard key
``thread_id``) and wire-compatible servers without change streams (FerretDB), and an
idle watcher costs one indexed ``find`` per ``max_poll_interval``.
"""

try:  # the driver first: without the pip extra, the error says which one to install
    import pymongo  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "the MongoDB backend needs PyMongo >= 4.13.2: pip install 'graphkeep[mongodb]'"
    ) from exc


from graphkeep.backends.mongodb.cache import AsyncMongoDBCache, MongoDBCache
from graphkeep.backends.mongodb.checkpoint import (
    AsyncMongoDBSaver,
    MongoDBCheckpointPort,
    MongoDBSaver,
)
from graphkeep.backends.mongodb.events import AsyncMongoDBEventLog, MongoDBEventLog
from graphkeep.backends.mongodb.requests import Command
from graphkeep.backends.mongodb.schema import index_specs
from graphkeep.backends.mongodb.store import AsyncMongoDBStore, MongoDBStore

__all__ = [
    "AsyncMongoDBCache",
    "AsyncMongoDBEventLog",
    "AsyncMongoDBSaver",
    "AsyncMongoDBStore",
    "Command",
    "MongoDBCache",
    "MongoDBCheckpointPort",
    "MongoDBEventLog",
    "MongoDBSaver",
    "MongoDBStore",
    "index_specs",
]
