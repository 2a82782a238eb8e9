"""The DynamoDB backend: savers, store, node cache and run event log on one DynamoDB table.

Re-exports only: the savers and the checkpoint port (:mod:`.checkpoint`), the BaseStore
(:mod:`.store`), the node cache (:mod:`.cache`), the event log (:mod:`.events`) and the client
helpers (:mod:`.client`: ``parse_url``, ``sync_client``, ``async_client``). The table is
described in :mod:`.schema`; how each product maps onto it is in its module's docstring and
in docs/architecture.md.

The store
---------
The store shares the saver's table (same URL, same ``pk``/``sk`` string schema, TTL on
``exp``) and never meets its items: saver partitions are ``<prefix>#1#<thread>`` and its sort
keys start with ``c#``, ``b#``, ``k#`` or ``l#``; store partitions are ``<prefix>#m1#...`` and
store sort keys start with ``i#`` (items) or ``p#`` (the partition registry). Chunks of
oversized values reuse the saver's ``k#`` chunk items, inside the store's own partitions.

Key design (labels escaped as the saver escapes names, so ``#`` never occurs inside one)::

    pk  <prefix>#m1#<label 1>#...#<label S>#          the first S = shard_labels labels
    sk  i#<label S+1>#...#<label n>#<key>           the remaining labels, then the key
    pk  <prefix>#m1r   sk  p#<label 1>#...#<label S>#  registry: one item per partition
    pk  <prefix>#m1n   sk  n#<label 1>#...#<label n>#  namespaces: one item per namespace
    pk  <prefix>#m1n   sk  v#1                         "every namespace is listed" (setup)

A namespace with at least ``shard_labels`` labels selects one partition, and its descendants
are ``begins_with(sk, "i#<rest>#")`` there (a label is always followed by ``#`` and a key
never contains it, so the prefix stops at label boundaries). A shorter prefix Queries the
registry (``begins_with(sk, "p#<prefix>#")``) for its partitions and then each of them. A
partition's registry item is written in the same TransactWriteItems as the first item this
process puts there (an idempotent Put); registry items are never removed (a partition whose
items all went away costs one empty Query per cross-partition search).

The namespace list (``list_namespaces``) is its own partition: one item per namespace, written
(an UpdateItem, so concurrent writers only ever add) in the same transaction as the first
write a process makes to that namespace, so a namespace is listed no later than its first item.
It is written once per namespace and process, never by the item traffic after that, so it stays
far below a partition's 1,000 writes a second unless namespaces are created faster than that.
An entry is *sure* while nothing can have removed the namespace's last item: every write that
could (a delete, a put with a TTL, a batch of puts split over several transactions) marks its
entry ``vf`` for good, and ``list_namespaces`` checks a marked namespace with one Query for a
live item of it. A namespace written only by plain puts costs nothing beyond the one Query of
the list. ``setup()`` builds the list from the items of a table written before it existed (every
entry marked) and then writes ``v#1``; until a process has seen ``v#1`` it lists namespaces
from the partitions, as before.

Item attributes: ``ns`` and ``k`` (raw namespace text and key), ``v`` (value as JSON bytes,
zlib-compressed from 4 KiB when it pays; chunk items when still over the 400 KB limit),
``cu``/``uu`` (created/updated, epoch microseconds), ``xm`` (exact expiry, epoch ms, checked
on every read), ``tm`` (TTL minutes, what a refresh re-arms), ``exp`` (DynamoDB's TTL
attribute, epoch seconds; DynamoDB reaps within about 48 hours), ``vec`` (embeddings, msgpack
of ``[path, digest, float32 bytes]``), ``fa`` (the value's top-level scalars as native
attributes, for the server-side filter). Chunk items carry
``at`` (written, epoch ms) and no ``exp``: ``sweep`` deletes them with their owner, or when
their owner has disappeared.

Requests per operation (RCU/WCU at DynamoDB's on-demand rates: a strongly consistent read
costs 1 RCU per 4 KB read, a write 1 WCU per 1 KB written, twice that inside a transaction):

- ``get``: 1 BatchGetItem per 100 keys (strongly consistent), +1 for chunks of large values;
  a refresh of items with a TTL: 1 TransactWriteItems per 100 (1 UpdateItem when single).
- ``put``/``delete``: 1 TransactWriteItems per 100 actions (UpdateItem/DeleteItem when single),
  including the registry item of a partition this process has not registered yet. ``created``
  survives through ``if_not_exists``; the condition "no chunks of another digest and not
  expired" costs nothing, and when it fails (the old value was chunked, or the old item
  expired) the item is read and rewritten alone. Large values: chunk items first (1
  BatchWriteItem per 25 chunks of 350 KB), then the owner.
- ``list_namespaces``: 1 Query per 1 MB page of the namespace list under the prefix, +1 Query
  per listed namespace marked ``vf`` (deletes or TTLs), which reads its partition's items under
  it until one is live; before ``setup()`` has built the list, as ``search``.
- ``search``: 1 Query per 1 MB page of the prefix's items in every
  partition it covers (+1 registry Query when the prefix is shorter than ``shard_labels``);
  the partitions are read at once (a ``Parallel`` of up to 8 Queries in flight).
  Ordering by ``updated_at`` (or by score) and ``offset``/``limit`` happen client-side over
  all of the prefix's items, so a search reads (and pays RCU for) the whole prefix, whatever
  the limit: keep prefixes narrow (e.g. ``("users", user_id)``) on large stores.
  Top-level filter conditions run on the server too, on ``fa`` (the value's top-level scalars
  as native attributes, :mod:`.store_filter`): DynamoDB returns fewer items (the RCU
  of the Query stay those of the whole prefix); every condition is still checked exactly
  client-side (``matches``).
  Semantic search ranks the vectors of the prefix's items client-side (``rank``).
- ``sweep``: 1 registry Query + 1 filtered Query per partition page (``xm <= now`` and chunk
  items; the RCU of the whole partition), then BatchWriteItem deletes per 25.
"""

from __future__ import annotations

try:  # the driver first: without the pip extra, the error says which one to install
    import boto3  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "the DynamoDB backend needs boto3: pip install 'graphkeep[dynamodb]'"
    ) from exc

from graphkeep.backends.dynamodb.cache import AsyncDynamoDBCache, DynamoDBCache
from graphkeep.backends.dynamodb.checkpoint import (
    SAVER_OPTIONS,
    AsyncDynamoDBSaver,
    DynamoDBCheckpointPort,
    DynamoDBSaver,
)
from graphkeep.backends.dynamodb.client import (
    CLIENT_OPTIONS,
    async_client,
    client_options,
    parse_url,
    sync_client,
)
from graphkeep.backends.dynamodb.events import AsyncDynamoDBEventLog, DynamoDBEventLog
from graphkeep.backends.dynamodb.schema import table_definition
from graphkeep.backends.dynamodb.store import AsyncDynamoDBStore, DynamoDBStore

__all__ = [
    "CLIENT_OPTIONS",
    "SAVER_OPTIONS",
    "AsyncDynamoDBCache",
    "AsyncDynamoDBEventLog",
    "AsyncDynamoDBSaver",
    "AsyncDynamoDBStore",
    "DynamoDBCache",
    "DynamoDBCheckpointPort",
    "DynamoDBEventLog",
    "DynamoDBSaver",
    "DynamoDBStore",
    "async_client",
    "client_options",
    "parse_url",
    "sync_client",
    "table_definition",
]
