"""TTL on DynamoDB: what this process knows about item expiries, and planning which to refresh.

TTL (``ttl`` seconds): every item carries ``exp`` (DynamoDB's TTL attribute) and heads carry
``vis``. Writing an item sets ``exp = now + ttl + slack`` (slack = ttl / 2); a head is visible
until ``vis = now + ttl``. A put also refreshes what the new checkpoint needs: the values of
its unchanged channels and, for DeltaChannels, the ancestor heads, writes and seed values back
to the nearest snapshot (with their chunks); an item is refreshed only when its ``exp`` would
fall before the new head's ``vis``, so each item is rewritten at most once per slack period.
Reading all that on every put would cost more than the put, so what was refreshed when is
known from this process' own reads and writes (:class:`Known`, a bounded LRU); unknown items
are looked up first (one BatchGetItem). Older history expires ``ttl`` after it was written.
List elements live as long as the checkpoints naming them: a put refreshes the elements of
the manifests it writes and of its unchanged channels (manifest blobs carry ``ls``, so a
process that has not seen one learns it with its expiry lookup: one BatchGetItem more for
the manifest, one request for its elements' expiries; :class:`Manifests`).
Reads hide heads past ``vis`` and other items past ``exp`` (DynamoDB deletes lazily).
:class:`ExpiringTable` is the checkpoint table with this bookkeeping and the planning of
refreshes. See docs/architecture.md.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from graphkeep.backends.dynamodb import keys
from graphkeep.backends.dynamodb.ancestors import Walk, walk
from graphkeep.backends.dynamodb.elements import ElementCache, is_element_sk, read_items
from graphkeep.backends.dynamodb.encoding import (
    CheckpointTable,
    Collection,
    blob_sk,
)
from graphkeep.backends.dynamodb.items import (
    DIGEST,
    EXP,
    LIST,
    NCHUNKS,
    SK,
    VIS,
    N,
    chunk_sks,
    has_payload,
    key,
    n,
    owner_chunks,
    read_payload,
    s,
)
from graphkeep.backends.dynamodb.requests import TRANSACT_MAX_ITEMS, transact
from graphkeep.checkpoint.lists import ELEMENT_CHANNEL, is_manifest, manifest_keys
from graphkeep.checkpoint.records import BlobRecord, CheckpointRecord, Loaded, Summary, Typed
from graphkeep.checkpoint.walk import walk_op
from graphkeep.port import Op, codec
from graphkeep.port.lru import ThreadLRU

KNOWN_CAPACITY = 20_000
#: how many manifests (blob sort key -> its elements) the TTL bookkeeping remembers
MANIFEST_CAPACITY = 4096


@dataclass(slots=True)
class KnownItem:
    """An item's expiry as this process last wrote or read it, and its chunk sort keys."""

    exp: int | None
    chunks: tuple[str, ...] = ()


@dataclass(slots=True)
class KnownCheckpoint:
    summary: Summary
    #: the head and every write of the checkpoint, by sort key
    items: dict[str, KnownItem] = field(default_factory=dict)


class Known:
    """Bounded LRU of item expiries (TTL refresh bookkeeping); thread-safe."""

    def __init__(self, capacity: int = KNOWN_CAPACITY) -> None:
        self.capacity = capacity
        self._lock = threading.Lock()
        self._blobs: OrderedDict[tuple[str, str], KnownItem] = OrderedDict()
        self._checkpoints: OrderedDict[tuple[str, str, str], KnownCheckpoint] = OrderedDict()
        self._early_writes: OrderedDict[tuple[str, str, str], dict[str, KnownItem]] = OrderedDict()

    def blob(self, pk: str, sk: str) -> KnownItem | None:
        """The blob's known state; ``None`` when unknown (absent blobs have exp None)."""
        with self._lock:
            info = self._blobs.get((pk, sk))
            if info is not None:
                self._blobs.move_to_end((pk, sk))
            return info

    def set_blob(self, pk: str, sk: str, info: KnownItem | None) -> None:
        with self._lock:
            self._blobs[(pk, sk)] = info if info is not None else KnownItem(None)
            self._blobs.move_to_end((pk, sk))
            _trim(self._blobs, self.capacity)

    def checkpoint(self, pk: str, ns: str, checkpoint_id: str) -> KnownCheckpoint | None:
        with self._lock:
            found = self._checkpoints.get((pk, ns, checkpoint_id))
            if found is not None:
                self._checkpoints.move_to_end((pk, ns, checkpoint_id))
            return found

    def set_checkpoint(self, pk: str, ns: str, known: KnownCheckpoint) -> None:
        ident = (pk, ns, known.summary.checkpoint_id)
        with self._lock:
            early = self._early_writes.pop(ident, None)
            if early:
                for sk, info in early.items():
                    known.items.setdefault(sk, info)
            self._checkpoints[ident] = known
            self._checkpoints.move_to_end(ident)
            _trim(self._checkpoints, self.capacity)

    def add_writes(
        self, pk: str, ns: str, checkpoint_id: str, writes: dict[str, KnownItem]
    ) -> None:
        ident = (pk, ns, checkpoint_id)
        with self._lock:
            found = self._checkpoints.get(ident)
            if found is not None:
                found.items.update(writes)
            else:  # writes before their checkpoint: keep until the put
                self._early_writes.setdefault(ident, {}).update(writes)
                _trim(self._early_writes, self.capacity)

    def forget_thread(self, pk: str) -> None:
        with self._lock:
            for blob in [k for k in self._blobs if k[0] == pk]:
                del self._blobs[blob]
            for ident in [k for k in self._checkpoints if k[0] == pk]:
                del self._checkpoints[ident]
            for ident in [k for k in self._early_writes if k[0] == pk]:
                del self._early_writes[ident]


def _trim(mapping: OrderedDict[Any, Any], capacity: int) -> None:
    while len(mapping) > capacity:
        mapping.popitem(last=False)


@dataclass(slots=True)
class Refresh:
    """An item (with its chunks) whose expiry a write pushes out."""

    sk: str
    info: KnownItem
    vis: bool = False


class Manifests:
    """TTL bookkeeping: which blobs are list manifests, and what they name (bounded LRU).

    A put keeps alive the elements of the checkpoint's manifests; for the channels it does
    not rewrite it learns them here (from this process' own writes and reads), else reads
    the manifest once (blobs marked ``ls``).
    """

    def __init__(self, capacity: int = MANIFEST_CAPACITY) -> None:
        #: (pk, sk) -> the manifest, or None for a blob known to be plain
        self.known: ThreadLRU[tuple[str, str], Typed | None] = ThreadLRU(capacity)

    def knows(self, pk: str, sk: str) -> bool:
        return (pk, sk) in self.known

    def element_sks(self, pk: str, sk: str) -> list[str]:
        """Sort keys of the elements the blob ``sk`` names (none for a plain blob)."""
        manifest = self.known.get((pk, sk))
        if manifest is None:
            return []
        ns_part = keys.parse_sk(sk).ns
        channel = keys.escape(ELEMENT_CHANNEL)
        return [keys.blob_sk(ns_part, channel, key) for key in manifest_keys(manifest)]

    def set(self, pk: str, sk: str, value: Typed | None) -> None:
        self.known.put((pk, sk), value if is_manifest(value) else None)

    def forget_thread(self, pk: str) -> None:
        self.known.drop_thread(pk)


def known_checkpoint(coll: Collection, summary: Summary) -> KnownCheckpoint:
    """What a read head and its writes tell about their expiries."""
    assert coll.head is not None
    items = {s(coll.head, SK): KnownItem(n(coll.head, EXP))}
    for write in coll.writes:
        items[s(write, SK)] = KnownItem(n(write, EXP), chunk_sks(write))
    return KnownCheckpoint(summary, items)


class ExpiringTable(CheckpointTable):
    """The checkpoint table with this process' TTL bookkeeping (:attr:`known` expiries,
    :attr:`manifests`) and the planning of what a put or a read refreshes."""

    def __init__(
        self,
        table: str,
        *,
        key_prefix: str,
        ttl: float | None,
        refresh_ttl_on_read: bool,
        compress: bool | int,
        clock: Callable[[], float],
    ) -> None:
        super().__init__(table, key_prefix=key_prefix, ttl=ttl, compress=compress, clock=clock)
        self.refresh_on_read = bool(refresh_ttl_on_read) and self.ttl is not None
        self.known = Known()
        self.manifests = Manifests()
        #: list elements written or read here (:class:`.elements.ElementCache`); no TTL only
        self.element_cache = ElementCache()

    # -- what reads teach -----------------------------------------------------------------

    def walked(
        self,
        pk: str,
        ns_part: str,
        checkpoint_id: str | None,
        channels: Iterable[str],
        now: float,
    ) -> Op[Walk]:
        """:func:`.ancestors.walk`, remembering what it read (the target included, as the
        first link of a chain a put may need) when items expire."""
        found = yield from walk(self, pk, ns_part, checkpoint_id, channels, now)
        if self.ttl:
            for link in ([found.target] if found.target else []) + found.ancestors:
                self.known.set_checkpoint(
                    pk, link.summary.ns, known_checkpoint(link.coll, link.summary)
                )
        return found

    def remember(
        self,
        coll: Collection,
        summary: Summary,
        fetched: dict[str, dict[str, Any]],
        blob_sks: dict[str, str],
    ) -> None:
        """Record the expiries of a loaded checkpoint and of its channel values."""
        assert coll.head is not None
        self.known.set_checkpoint(coll.pk, summary.ns, known_checkpoint(coll, summary))
        for sk in blob_sks.values():
            item = fetched.get(sk)
            info = KnownItem(n(item, EXP), owner_chunks(item)) if item is not None else None
            self.known.set_blob(coll.pk, sk, info)

    def remember_blob(self, pk: str, sk: str, item: dict[str, Any], value: Typed) -> None:
        """Record a read channel value's expiry and, unless an element, whether it is a
        manifest."""
        self.known.set_blob(pk, sk, KnownItem(n(item, EXP), owner_chunks(item)))
        if not is_element_sk(sk):
            self.manifests.set(pk, sk, value)

    # -- planning ----------------------------------------------------------------------

    def due_for_put(
        self, pk: str, record: CheckpointRecord, blobs: list[BlobRecord], now: float
    ) -> Op[list[Refresh]]:
        """Items the new checkpoint needs whose expiry would fall before its own.

        That includes the list elements its manifests name: those of the manifests it
        writes (all but the new elements were written before) and of unchanged channels.
        """
        new_channels = {x.channel for x in blobs}
        present = set(record.present)
        element_channel = keys.escape(ELEMENT_CHANNEL)
        ns_part = keys.part(record.ns)[0]
        writing = {x.version for x in blobs if x.channel == ELEMENT_CHANNEL}
        elements = [
            keys.blob_sk(ns_part, element_channel, element)
            for blob in blobs
            if blob.channel in present and is_manifest(blob.value)
            for element in manifest_keys(blob.value)
            if element not in writing
        ]
        blob_sks = [
            blob_sk(record.ns, ch, record.versions[ch])[0]
            for ch in record.present
            if ch not in new_channels and ch in record.versions
        ]
        ancestors: list[KnownCheckpoint] = []
        channels = set(record.needs_history) - set(record.present)
        if channels and record.parent_id:
            ancestors = yield from self.known_chain(pk, record.ns, record.parent_id, channels, now)
            blob_sks += self.seed_sks(record.ns, ancestors, channels)
        return (yield from self.due(pk, blob_sks, ancestors, now, elements))

    def due(
        self,
        pk: str,
        blob_sks: list[str],
        ancestors: list[KnownCheckpoint],
        now: float,
        elements: Iterable[str] = (),
    ) -> Op[list[Refresh]]:
        """What is due for a refresh: the blobs, the elements their manifests (and
        ``elements``) name, and the ancestors' items; unknown expiries are read first."""
        assert self.ttl is not None
        blob_sks = list(dict.fromkeys(blob_sks))
        unknown = [
            sk
            for sk in blob_sks
            if self.known.blob(pk, sk) is None or not self.manifests.knows(pk, sk)
        ]
        if unknown:
            yield from self._learn_blobs(pk, unknown)
        named = [e for sk in blob_sks for e in self.manifests.element_sks(pk, sk)]
        plain = set(blob_sks)
        element_sks = [e for e in dict.fromkeys([*elements, *named]) if e not in plain]
        unknown = [sk for sk in element_sks if self.known.blob(pk, sk) is None]
        if unknown:
            yield from self._learn_blobs(pk, unknown)
        threshold = now + self.ttl
        due: list[Refresh] = []
        for sk in blob_sks + element_sks:
            info = self.known.blob(pk, sk)
            if info is not None and info.exp is not None and info.exp < threshold:
                due.append(Refresh(sk, info))
        for ancestor in ancestors:
            for sk, info in ancestor.items.items():
                if info.exp is not None and info.exp < threshold:
                    due.append(Refresh(sk, info))
        return due

    @staticmethod
    def seed_sks(ns: str, ancestors: list[KnownCheckpoint], channels: set[str]) -> list[str]:
        """Sort keys of the values that seed ``channels`` in a chain of ancestors."""
        remaining = set(channels)
        found = []
        for ancestor in ancestors:
            for ch in ancestor.summary.present:
                if ch in remaining and ch in ancestor.summary.versions:
                    remaining.discard(ch)
                    found.append(blob_sk(ns, ch, ancestor.summary.versions[ch])[0])
        return found

    def _learn_blobs(self, pk: str, sks: list[str]) -> Op[None]:
        """Expiries and chunk keys of blobs (elements by range), and what manifests name."""
        by_sk = yield from read_items(self, pk, sks, projection=[EXP, NCHUNKS, DIGEST, LIST])
        manifests: list[str] = []
        for sk in sks:
            item = by_sk.get(sk)
            if item is None:
                self.known.set_blob(pk, sk, None)
            else:
                self.known.set_blob(pk, sk, KnownItem(n(item, EXP), owner_chunks(item)))
            if is_element_sk(sk):
                continue
            if item is not None and LIST in item:
                manifests.append(sk)
            else:
                self.manifests.set(pk, sk, None)
        if manifests:  # small items: read whole
            full = yield from read_items(self, pk, manifests)
            for sk in manifests:
                item = full.get(sk)
                value = None
                if item is not None and has_payload(item):
                    value = codec.unpack_typed(read_payload(item, full))
                self.manifests.set(pk, sk, value)

    def known_chain(
        self, pk: str, ns: str, parent_id: str, channels: set[str], now: float
    ) -> Op[list[KnownCheckpoint]]:
        """The DeltaChannel ancestors from ``parent_id`` rootward, by :func:`walk_op`'s rule:
        from the bookkeeping first, else (once) read with :meth:`walked`."""
        chain: list[KnownCheckpoint] = []
        learned = False

        def read(checkpoint_id: str) -> Op[Summary | None]:
            nonlocal learned
            known = self.known.checkpoint(pk, ns, checkpoint_id)
            if known is None and not learned:
                learned = True
                remaining = set(channels).difference(*(k.summary.present for k in chain))
                ns_part = keys.part(ns)[0]
                yield from self.walked(pk, ns_part, checkpoint_id, remaining, now)
                known = self.known.checkpoint(pk, ns, checkpoint_id)
            if known is None:
                return None
            chain.append(known)
            return known.summary

        yield from walk_op(parent_id, channels, read)
        return chain

    # -- refreshing --------------------------------------------------------------------

    def refresh_actions(
        self, pk: str, refresh: list[Refresh], now: float, *, first_owner: int
    ) -> tuple[list[dict[str, Any]], list[int]]:
        """The UpdateItem actions that push out the expiry of ``refresh`` (and chunks), with
        their transaction groups (``first_owner`` on)."""
        actions: list[dict[str, Any]] = []
        owners: list[int] = []
        if not refresh:
            return actions, owners
        exp = self.exp(now)
        for offset, entry in enumerate(refresh):
            for sk in (entry.sk, *entry.info.chunks):
                update = "SET #e = :e"
                values: dict[str, Any] = {":e": N(exp)}
                names = {"#e": EXP, "#sk": SK}
                if entry.vis and sk == entry.sk:
                    update += ", #v = :v"
                    values[":v"] = N(self.vis(now))
                    names["#v"] = VIS
                actions.append(
                    {
                        "Update": {
                            "TableName": self.table,
                            "Key": key(pk, sk),
                            "UpdateExpression": update,
                            # never resurrect an item that is gone as a stub
                            "ConditionExpression": "attribute_exists(#sk)",
                            "ExpressionAttributeNames": names,
                            "ExpressionAttributeValues": values,
                        }
                    }
                )
                owners.append(first_owner + offset)
        return actions, owners

    def refreshed(
        self, refresh: list[Refresh], failed: dict[int, Any], first_owner: int, now: float
    ) -> None:
        """Record the new expiries (None for items that were gone)."""
        if not refresh:
            return
        exp = self.exp(now)
        for offset, entry in enumerate(refresh):
            entry.info.exp = None if first_owner + offset in failed else exp

    def apply_refresh(self, pk: str, refresh: list[Refresh], now: float) -> Op[None]:
        """Refresh on its own: TransactWriteItems per 100 actions, then record it."""
        actions, owners = self.refresh_actions(pk, refresh, now, first_owner=0)
        failed: dict[int, Any] = {}
        for start in range(0, len(actions), TRANSACT_MAX_ITEMS):
            failed.update(
                (
                    yield from transact(
                        actions[start : start + TRANSACT_MAX_ITEMS],
                        owners[start : start + TRANSACT_MAX_ITEMS],
                    )
                )
            )
        self.refreshed(refresh, failed, 0, now)

    def refresh_loaded(self, pk: str, coll: Collection, loaded: Loaded, now: float) -> Op[None]:
        """``refresh_ttl_on_read``: a read keeps the checkpoint (and what it needs) alive."""
        assert self.ttl is not None and coll.head is not None
        vis = n(coll.head, VIS)
        if vis is None or vis >= now + self.ttl - self.slack:
            return  # refreshed (or written) less than a slack period ago
        record = loaded.record
        known = self.known.checkpoint(pk, record.ns, record.checkpoint_id)
        if known is None:
            return
        head_sk = s(coll.head, SK)
        refresh = [Refresh(head_sk, known.items[head_sk], vis=True)]
        refresh += [Refresh(sk, info) for sk, info in known.items.items() if sk != head_sk]
        blob_sks = [blob_sk(record.ns, ch, record.versions[ch])[0] for ch in loaded.blobs]
        ancestors: list[KnownCheckpoint] = []
        channels = set(record.needs_history) - set(record.present)
        if channels and record.parent_id:
            ancestors = yield from self.known_chain(pk, record.ns, record.parent_id, channels, now)
            blob_sks += self.seed_sks(record.ns, ancestors, channels)
        refresh += yield from self.due(pk, blob_sks, ancestors, now)
        yield from self.apply_refresh(pk, refresh, now)

    def refresh_chain(
        self, pk: str, ns: str, summaries: list[Summary], seeds: list[str], now: float
    ) -> Op[None]:
        """``refresh_ttl_on_read`` for a DeltaChannel chain: its ancestors and seeds."""
        known = [
            k
            for k in (self.known.checkpoint(pk, ns, x.checkpoint_id) for x in summaries)
            if k is not None
        ]
        refresh = yield from self.due(pk, seeds, known, now)
        yield from self.apply_refresh(pk, refresh, now)
