"""DynamoDB checkpoints: the port :class:`DynamoDBCheckpointPort` and the savers
:class:`DynamoDBSaver` (boto3) and :class:`AsyncDynamoDBSaver` (aiobotocore).

One table (:mod:`.schema`), one partition per thread (key layout in :mod:`.keys`, item
attributes and the 400 KB guard in :mod:`.items`, records as items in :mod:`.encoding`). The
port's calls live by responsibility: :mod:`.writes` (put_checkpoint, put_writes), :mod:`.reads`
(load, list_page, get_blobs, chain) with the parent walk in :mod:`.ancestors` and list
elements in :mod:`.elements`, TTL bookkeeping and refresh planning in :mod:`.ttl`,
:mod:`.deletes` (delete_thread, prune's inventory and deletes, find_runs), :mod:`.export`,
:mod:`.watch` and :mod:`.locks`; each module lists the requests its calls make. See
docs/architecture.md.

Construct a saver from an existing low-level client, or with ``from_table`` / ``from_url`` as a
context manager::

    with DynamoDBSaver.from_table("checkpoints", region_name="eu-west-1") as saver:
        graph = builder.compile(checkpointer=saver)

    async with AsyncDynamoDBSaver.from_table("checkpoints", ttl=86400) as saver:
        graph = builder.compile(checkpointer=saver)

    with graphkeep.connect("dynamodb://checkpoints?region=us-east-1") as saver: ...

Without ``endpoint_url`` the normal AWS credential and endpoint chain applies. Teams that manage
tables with CloudFormation or Terraform take :meth:`DynamoDBSaver.table_definition` (the
CreateTable request; ``format="cloudformation"`` gives the resource with TTL) and pass
``setup=False``. Options: ``serde``, ``ttl`` (seconds or timedelta, sliding per thread),
``refresh_ttl_on_read``, ``key_prefix`` (apps sharing a table use different ones),
``max_id_bytes``, ``compress`` (default True = zlib level 6 per item when it saves at least 10 %;
False, or a level 1-9), ``share_lists`` (default True: list values stored as shared element
items, see :mod:`graphkeep.checkpoint.lists`) and ``run_index`` (create the ``run_id`` GSI;
default True).

Compression default (measured on this machine with LangChain messages of real English text,
serialized by the default serde): zlib level 1 stores 36% of the bytes at ~90 MB/s, level 6
stores 31% at ~30 MB/s (~14 ms for 400 KB); base64 images shrink only to 77%, encrypted payloads
not at all (and are skipped: their tags carry ``+cipher``; with ``encryption=`` the saver
compresses each payload by this same rule before it is sealed, see ``compression``). DynamoDB
bills writes per KB and large channel values are rewritten on every step, so level 6 pays for
its CPU. Checkpoint items
from 128 bytes are compressed too (heads, writes, list elements: on W50 heads shrink from
about 710 to 330 bytes); an item keeps its compression only when it saves at least 10 %,
recorded in its ``z`` attribute. Values still larger than the 400 KB item limit after
compression are split into chunk items of 350 KB. Stored bytes on W50 (50 turns, item bytes
as DynamoDB counts them): 0.33 MB with shared lists (0.73 MB without); 100 turns: 0.66 MB
(2.0x: linear).

Cost notes: unfenced put and put_writes use no transaction (:mod:`.writes`): a put writes
its values first (BatchWriteItem) and its head last (PutItem), so a reader never finds a
head without its values; a task's pending writes are one item written with one conditional
PutItem (insert once). Every item is billed 1 WCU per KB, as a plain write. Writes under
``saver.lock`` are fenced (:mod:`.locks`): each of them is a transaction checking the lease
item, billed twice (a put of the head alone too), and batch deletes and imports become
transactions; unfenced writes do not pay for the fence. The
``run_id`` GSI (keys plus the raw-name attribute) adds one small index
write per checkpoint that has a run id; without it ``delete_for_runs`` scans the table.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from graphkeep.backends.dynamodb import deletes, export, locks, reads, watch
from graphkeep.backends.dynamodb import writes as writing
from graphkeep.backends.dynamodb.client import DynamoDBSite, OnDynamoDB
from graphkeep.backends.dynamodb.effects import DynamoDBEffectsPort
from graphkeep.backends.dynamodb.items import SMALL_COMPRESS_MIN_BYTES
from graphkeep.backends.dynamodb.schema import (
    definition_as,
    setup_table,
    table_definition,
    table_size,
)
from graphkeep.backends.dynamodb.ttl import ExpiringTable
from graphkeep.checkpoint.hot import HOT_OPTIONS
from graphkeep.checkpoint.port import CheckpointPort
from graphkeep.checkpoint.records import (
    BlobRecord,
    Chain,
    CheckpointKeys,
    CheckpointRecord,
    Inventory,
    Link,
    ListQuery,
    Loaded,
    ThreadDump,
    Typed,
    WriteRecord,
)
from graphkeep.checkpoint.saver import AsyncSaver, SyncSaver, thread_options
from graphkeep.port import Op
from graphkeep.port.torn import reread

__all__ = [
    "SAVER_OPTIONS",
    "AsyncDynamoDBSaver",
    "DynamoDBCheckpointPort",
    "DynamoDBSaver",
    "table_definition",
]

#: the savers' options beyond every saver's (``graphkeep.connect`` also takes the client
#: options, see :class:`.client.OnDynamoDB`)
SAVER_OPTIONS = frozenset({"compress", "run_index"}) | HOT_OPTIONS


class DynamoDBCheckpointPort(ExpiringTable, CheckpointPort):
    """The checkpoint port on one DynamoDB table (see the module docstring for the mapping)."""

    #: payloads are compressed here, per item (``compress`` option, recorded in ``z``),
    #: so the saver leaves them alone
    compresses = True
    probes = True

    def __init__(
        self,
        table: str,
        *,
        key_prefix: str = "graphkeep",
        ttl: float | None = None,
        refresh_ttl_on_read: bool = False,
        compress: bool | int = True,
        run_index: bool = True,
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(
            table,
            key_prefix=key_prefix,
            ttl=ttl,
            refresh_ttl_on_read=refresh_ttl_on_read,
            compress=compress,
            clock=clock,
        )
        self.run_index = run_index

    @property
    def compression(self) -> tuple[int, int] | None:  # type: ignore[override]
        """Its compression rule (``compress``: level, from 128 bytes), which a sealed saver
        applies before sealing (its envelopes are not compressed here: ciphertext)."""
        return None if self.level is None else (self.level, SMALL_COMPRESS_MIN_BYTES)

    @classmethod
    def configured(cls, site: DynamoDBSite, options: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        """The port built from the saver options (:data:`SAVER_OPTIONS`), and the rest."""
        port = cls(
            site.table,
            **thread_options(options),
            compress=options.pop("compress", True),
            run_index=bool(options.pop("run_index", True)),
        )
        return port, options

    def setup(self) -> Op[None]:
        return setup_table(self.table, run_index=self.run_index)

    def put_checkpoint(
        self, record: CheckpointRecord, blobs: list[BlobRecord], fence: int | None = None
    ) -> Op[None]:
        return writing.put_checkpoint(self, record, blobs, fence)

    def put_writes(
        self,
        thread_id: str,
        ns: str,
        checkpoint_id: str,
        writes: list[WriteRecord],
        fence: int | None = None,
    ) -> Op[None]:
        return writing.put_writes(self, thread_id, ns, checkpoint_id, writes, fence)

    def load(self, thread_id: str, ns: str, checkpoint_id: str | None) -> Op[Loaded | None]:
        # read again when torn by an overwrite (:func:`graphkeep.port.torn.reread`)
        return reread(lambda: reads.load(self, thread_id, ns, checkpoint_id))

    def list_page(
        self, query: ListQuery, cursor: Any, page_size: int
    ) -> Op[tuple[list[Loaded], Any]]:
        return reread(lambda: reads.list_page(self, query, cursor, page_size))

    def get_blobs(
        self, thread_id: str, keys: list[tuple[str, str, str]]
    ) -> Op[dict[tuple[str, str, str], Typed]]:
        return reread(lambda: reads.get_blobs(self, thread_id, keys))

    def chain(
        self, thread_id: str, ns: str, checkpoint_id: str | None, channels: list[str]
    ) -> Op[Chain]:
        return reread(lambda: reads.chain(self, thread_id, ns, checkpoint_id, channels))

    def delete_thread(self, thread_id: str, fence: int | None = None) -> Op[None]:
        return deletes.delete_thread(self, thread_id, fence)

    def inventory(self, thread_id: str) -> Op[Inventory]:
        return deletes.inventory(self, thread_id)

    def rearm(self, thread_id: str, refs: list[Any], at: float | None) -> Op[None]:
        return deletes.rearm(self, thread_id, refs, at)

    def delete_records(
        self,
        thread_id: str,
        checkpoints: list[tuple[str, str]],
        blobs: list[tuple[str, str, str]],
        fence: int | None = None,
    ) -> Op[None]:
        return deletes.delete_records(self, thread_id, checkpoints, blobs, fence)

    def chunk_refs(self, thread_id: str) -> Op[frozenset[str]]:
        return deletes.chunk_refs(self, thread_id)

    def drop_chunks(
        self, thread_id: str, refs: frozenset[str], fence: int | None = None
    ) -> Op[None]:
        return deletes.drop_chunks(self, thread_id, refs, fence)

    def find_runs(self, run_ids: list[str]) -> Op[dict[str, list[tuple[str, str]]]]:
        return deletes.find_runs(self, run_ids)

    def export_thread(self, thread_id: str) -> Op[ThreadDump]:
        return export.export_thread(self, thread_id)

    def import_thread(self, thread_id: str, dump: ThreadDump, fence: int | None = None) -> Op[None]:
        """The dump's records written over the thread's; then the chunk items of other bytes
        that the records it wrote over leave (content-addressed: an import over stored
        records, ``copy_thread`` onto a thread that has them) are deleted, as ``rekey``'s
        are: one Query of the thread's chunk keys first (none on a new thread: no more)."""
        pk, _ = self.thread_key(thread_id)
        self.element_cache.forget_thread(pk)  # rewritten (a rekey seals them again)
        refs = yield from deletes.chunk_refs(self, thread_id)
        yield from export.import_thread(self, thread_id, dump, fence)
        self.element_cache.forget_thread(pk)  # what a read took from it in the meantime
        if refs:
            yield from deletes.drop_chunks(self, thread_id, refs, fence)

    def list_threads(self, cursor: Any, page_size: int) -> Op[tuple[list[str], Any]]:
        return export.list_threads(self, cursor, page_size)

    def commits(
        self, thread_id: str, ns: str | None, above: str | None, limit: int
    ) -> Op[list[tuple[str, str]]]:
        return watch.commits(self, thread_id, ns, above, limit)

    def newest_commit(self, thread_id: str, ns: str | None) -> Op[str | None]:
        return watch.newest_commit(self, thread_id, ns)

    def recent_links(self, thread_id: str, above: str, limit: int) -> Op[list[Link] | None]:
        found = yield from watch.recent_links(self, thread_id, above, limit)
        return found

    def write_indexes(self, thread_id: str, ns: str, checkpoint_id: str) -> Op[list[int]]:
        return watch.write_indexes(self, thread_id, ns, checkpoint_id)

    def checkpoint_keys(
        self, thread_id: str, ns: str, checkpoint_id: str, newer: bool
    ) -> Op[list[CheckpointKeys]]:
        return watch.checkpoint_keys(self, thread_id, ns, checkpoint_id, newer)

    def storage_bytes(self) -> Op[int | None]:
        return table_size(self.table)

    def is_settled(self, thread_id: str) -> Op[bool]:
        return locks.is_settled(self, thread_id)

    def settle(self, thread_id: str) -> Op[None]:
        return locks.settle(self, thread_id)

    def acquire_lock(self, thread_id: str, token: str, ttl_ms: int) -> Op[int]:
        return locks.acquire_lock(self, thread_id, token, ttl_ms)

    def release_lock(self, thread_id: str, token: str) -> Op[bool]:
        return locks.release_lock(self, thread_id, token)

    def extend_lock(self, thread_id: str, token: str, ttl_ms: int) -> Op[bool]:
        return locks.extend_lock(self, thread_id, token, ttl_ms)


# --------------------------------------------------------------------------- the savers


class _DynamoDBSaverMixin:
    """What both DynamoDB savers add to the shared contract: their table's definition."""

    port: Any
    table_name: str

    @staticmethod
    def table_definition(
        table_name: str = "graphkeep", *, run_index: bool = True, format: str = "create_table"
    ) -> dict[str, Any]:
        """The table ``setup()`` creates: the CreateTable request (``client.create_table(**d)``),
        or with ``format="cloudformation"`` an ``AWS::DynamoDB::Table`` resource including
        the TTL specification (TTL is a separate API call otherwise)."""
        return definition_as(table_name, run_index, format)

    @property
    def run_index(self) -> bool:
        """Whether the table has the ``run_id`` index (``delete_for_runs`` without a scan)."""
        return bool(self.port.run_index)

    def print_table_definition(self, format: str = "create_table") -> None:
        """Print this saver's table definition as JSON (for CloudFormation/Terraform users)."""
        print(json.dumps(definition_as(self.table_name, self.run_index, format), indent=2))


class DynamoDBSaver(OnDynamoDB, _DynamoDBSaverMixin, SyncSaver):
    """Sync saver on a boto3 low-level DynamoDB client (``boto3.client("dynamodb")``)."""

    port_type = DynamoDBCheckpointPort
    effects_port_type = DynamoDBEffectsPort


class AsyncDynamoDBSaver(OnDynamoDB, _DynamoDBSaverMixin, AsyncSaver):
    """Asyncio saver on an aiobotocore DynamoDB client (``session.create_client("dynamodb")``)."""

    port_type = DynamoDBCheckpointPort
    effects_port_type = DynamoDBEffectsPort
