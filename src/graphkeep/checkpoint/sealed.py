"""The checkpoint records encrypted at their place (``encryption=``): a port over a port.

:class:`SealedPort` wraps a backend's :class:`~graphkeep.checkpoint.port.CheckpointPort`:
each payload going to the store is sealed with the saver's
:class:`~graphkeep.port.encryption.KeyRing` bound to where it lives, and each coming back is
opened at the place it was read from (a copy from elsewhere, a changed byte, plaintext or an
unknown key raise :class:`~graphkeep.errors.CorruptData`, never state). The places:

- the checkpoint and its metadata: ``(part, thread, ns, checkpoint id)``;
- a channel value: ``("value", thread, ns, channel, version)``; a shared list's element is
  the value of its reserved channel at its key; a list's manifest (element keys only: the
  backends read it to expire and fetch elements) stays readable and carries a GMAC of its
  place instead;
- a pending write: ``("write", thread, ns, checkpoint id, task, idx, channel)``.

Nothing of a value stays readable: the metadata's plain copy for server-side filters is not
stored, so ``list(filter=...)`` filters in the client. Ids, namespaces, channel names,
versions, a checkpoint's ``source`` and ``run_id`` stay readable: stores index them.
Every other method is the wrapped port's.

A list's elements are read with every checkpoint that names them (75 at turn 25 of a chat),
so the port remembers, per (thread, namespace), the elements it sealed or opened:
their envelope bytes and what they opened to (:class:`OpenedElements`). An element read back
with exactly those bytes at that place is not decrypted again (an element's key is written
once, and the same bytes at the same place open to the same payload); any other bytes are
opened, so a changed, copied or replaced element fails as before.

The next turn reads back the checkpoint the last put wrote, so the port also remembers, per
(thread, namespace), the records of its last put (:class:`LastPuts`): the checkpoint, its
metadata, its manifests and channel values, each by place with its stored tag and bytes. A
read of that checkpoint takes a record's payload (a manifest's verified body) instead of
decrypting it (verifying its signature) only when the store returned those very tag and bytes
at that place; anything else is opened and refused as before.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from graphkeep.checkpoint.lists import ELEMENT_CHANNEL, MANIFEST_TAG
from graphkeep.checkpoint.records import (
    BlobRecord,
    Chain,
    CheckpointRecord,
    ListQuery,
    Loaded,
    ThreadDump,
    Typed,
    WriteRecord,
)
from graphkeep.errors import CorruptData, Place
from graphkeep.port import Op, codec
from graphkeep.port.encryption import ENVELOPE_TAG, KeyRing


def value_place(thread_id: str, ns: str, channel: str, version: str) -> tuple[Any, ...]:
    """Where a channel value (or a shared list's element) lives, for its envelope."""
    kind = "element" if channel == ELEMENT_CHANNEL else "value"
    return (kind, thread_id, ns, channel, version)


def record_place(part: str, record: CheckpointRecord) -> tuple[Any, ...]:
    """Where a checkpoint's ``part`` (``"checkpoint"`` or ``"metadata"``) lives."""
    return (part, record.thread_id, record.ns, record.checkpoint_id)


def write_place(thread_id: str, ns: str, cid: str, write: WriteRecord) -> tuple[Any, ...]:
    """Where a pending write lives."""
    return ("write", thread_id, ns, cid, write.task_id, write.idx, write.channel)


def manifest_fields(value: Typed) -> list[Any]:
    """A stored list manifest's ``[version, runs, signature or None]``."""
    return codec.unpack_fields(value.data, 2, optional=1)


def signed_manifest(ring: KeyRing, place: tuple[Any, ...], version: Any, runs: Any) -> Typed:
    """A manifest ``(version, runs)`` signed under the ring's current key at ``place`` (its
    value place)."""
    return _signed_manifest(ring, place, version, runs)[0]


def _signed_manifest(
    ring: KeyRing, place: tuple[Any, ...], version: Any, runs: Any
) -> tuple[Typed, Typed]:
    """:func:`signed_manifest`, and the manifest as a read that verified it returns."""
    body = codec.packb([version, runs])
    signature = ring.sign(body, ("manifest", *place))
    return (
        Typed(MANIFEST_TAG, codec.packb([version, runs, signature])),
        Typed(MANIFEST_TAG, body),
    )


#: how many opened list elements a sealed port remembers, over all its (thread, namespace)
#: slots, and how many bytes of them (envelopes and payloads): least recently used slots go
#: first; a chat message is about 1 KiB each, so the bytes bound a process's memory where
#: elements are large (tool outputs, documents)
OPENED_ELEMENTS = 16384
OPENED_BYTES = 32 * 1024 * 1024


def entry_bytes(entry: tuple[bytes, Typed]) -> int:
    """One remembered element's bytes: its envelope and its payload."""
    return len(entry[0]) + len(entry[1].data)


class OpenedElements:
    """The list elements a sealed port sealed or opened, per (thread, namespace): element key
    -> (its envelope bytes, the payload they open to). Bounded in elements and in bytes: the
    least recently used slots go when there are more than ``limit`` elements or
    ``limit_bytes`` bytes in all, and a slot alone over either is not kept. A slot's bytes
    are kept beside it and updated by the entries a call adds or replaces, so remembering
    costs what it adds, not what the slot holds."""

    def __init__(self, limit: int = OPENED_ELEMENTS, limit_bytes: int = OPENED_BYTES) -> None:
        self.limit = limit
        self.limit_bytes = limit_bytes
        self._slots: OrderedDict[tuple[str, str], dict[str, tuple[bytes, Typed]]] = OrderedDict()
        self._sizes: dict[tuple[str, str], int] = {}
        self._count = 0
        self._bytes = 0
        self._lock = threading.Lock()

    def known(self, thread_id: str, ns: str) -> dict[str, tuple[bytes, Typed]]:
        """The slot's elements (now its most recently used); never changed once handed out."""
        slot = (thread_id, ns)
        with self._lock:
            held = self._slots.get(slot)
            if held is None:
                return {}
            self._slots.move_to_end(slot)
            return held

    def remember(self, thread_id: str, ns: str, opened: dict[str, tuple[bytes, Typed]]) -> None:
        """``opened`` joins its slot's elements (a new dict: one handed out by :meth:`known`
        never changes)."""
        slot = (thread_id, ns)
        with self._lock:
            held = self._slots.pop(slot, None) or {}
            size = self._sizes.pop(slot, 0)
            self._count -= len(held)
            self._bytes -= size
            for key, entry in opened.items():
                old = held.get(key)
                size += entry_bytes(entry) - (0 if old is None else entry_bytes(old))
            merged = {**held, **opened}
            if len(merged) <= self.limit and size <= self.limit_bytes:
                self._slots[slot] = merged
                self._sizes[slot] = size
                self._count += len(merged)
                self._bytes += size
            while len(self._slots) > 1 and (
                self._count > self.limit or self._bytes > self.limit_bytes
            ):
                gone, evicted = self._slots.popitem(last=False)
                self._count -= len(evicted)
                self._bytes -= self._sizes.pop(gone)

    @property
    def remembered(self) -> tuple[int, int]:
        """(slots, elements) held now."""
        return len(self._slots), self._count

    @property
    def remembered_bytes(self) -> int:
        """The bytes held now (envelopes and payloads)."""
        return self._bytes


#: how many (thread, namespace) slots of last puts a sealed port remembers, and how many
#: bytes of them (envelopes and payloads); a put over a quarter of the bytes is not kept
LAST_PUTS = 1024
LAST_PUT_BYTES = 16 * 1024 * 1024

#: a remembered record: its stored tag and bytes, and what they open to
Held = tuple[str, bytes, Typed]


class LastPuts:
    """The records of the last checkpoint a sealed port put, per (thread, namespace): its
    checkpoint, metadata, manifests and channel values, each by ``(part or channel, checkpoint
    id or version)`` -> (stored tag, stored bytes, the payload they open to). A put replaces
    its slot's records; a read of the same tag and bytes at the same place takes the payload
    instead of decrypting (or verifying a manifest's signature) again. Bounded: the least
    recently used slots go past ``limit`` slots or ``limit_bytes`` bytes."""

    def __init__(self, limit: int = LAST_PUTS, limit_bytes: int = LAST_PUT_BYTES) -> None:
        self.limit = limit
        self.limit_bytes = limit_bytes
        self._slots: OrderedDict[tuple[str, str], tuple[dict[Any, Held], int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def known(self, thread_id: str, ns: str) -> dict[Any, Held]:
        """The slot's records (never changed once handed out)."""
        with self._lock:
            found = self._slots.get((thread_id, ns))
            return {} if found is None else found[0]

    def remember(self, thread_id: str, ns: str, records: dict[Any, Held]) -> None:
        """``records`` replace the slot's."""
        slot = (thread_id, ns)
        size = sum(len(data) + len(plain.data) for _, data, plain in records.values())
        with self._lock:
            old = self._slots.pop(slot, None)
            if old is not None:
                self._bytes -= old[1]
            if size <= self.limit_bytes // 4:
                self._slots[slot] = (records, size)
                self._bytes += size
            while self._slots and (len(self._slots) > self.limit or self._bytes > self.limit_bytes):
                _, (_, gone) = self._slots.popitem(last=False)
                self._bytes -= gone

    @property
    def remembered(self) -> tuple[int, int]:
        """(slots, bytes) held now."""
        return len(self._slots), self._bytes


class SealedPort:
    """``port`` with every payload sealed on the way in and opened on the way out."""

    #: payloads are compressed before they are sealed (ciphertext does not compress)
    compresses = False

    def __init__(self, port: Any, ring: KeyRing) -> None:
        self.inner = port
        self.ring = ring
        self.elements = OpenedElements()
        self.last_puts = LastPuts()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    # -- sealing ---------------------------------------------------------------------------

    def _seal_blob(self, thread_id: str, ns: str, blob: BlobRecord) -> BlobRecord:
        return self._sealed_blob(thread_id, ns, blob)[0]

    def _sealed_blob(self, thread_id: str, ns: str, blob: BlobRecord) -> tuple[BlobRecord, Typed]:
        """``blob`` sealed, and what a read of it returns (the value, or a manifest as
        :meth:`_open_value` returns it once its signature verified)."""
        place = value_place(thread_id, ns, blob.channel, blob.version)
        if blob.value.tag == MANIFEST_TAG:
            version, runs = codec.unpack_fields(blob.value.data, 2)
            stored, read = _signed_manifest(self.ring, place, version, runs)
            return blob.with_value(stored), read
        return blob.with_value(self.ring.seal(blob.value, place)), blob.value

    def _seal_record(self, record: CheckpointRecord) -> CheckpointRecord:
        return record.with_payloads(
            self.ring.seal(record.checkpoint, record_place("checkpoint", record)),
            self.ring.seal(record.metadata, record_place("metadata", record)),
            {},
        )

    def _seal_write(self, thread_id: str, ns: str, cid: str, write: WriteRecord) -> WriteRecord:
        place = write_place(thread_id, ns, cid, write)
        return write.with_value(self.ring.seal(write.value, place))

    # -- opening ---------------------------------------------------------------------------

    def _open_value(
        self,
        thread_id: str,
        ns: str,
        channel: str,
        version: str,
        value: Typed,
        checkpoint_id: str | None = None,
    ) -> Typed:
        place = value_place(thread_id, ns, channel, version)
        try:
            if value.tag == MANIFEST_TAG:
                fields = manifest_fields(value)
                body = codec.packb(fields[:2])
                self.ring.verify(body, ("manifest", *place), fields[2])
                return Typed(MANIFEST_TAG, body)
            return self.ring.open(value, place)
        except CorruptData as exc:
            where = Place(thread_id, ns, checkpoint_id, channel=channel, part=f"version {version}")
            raise exc.at(where) from None

    def _open_record(self, record: CheckpointRecord) -> CheckpointRecord:
        where = Place(record.thread_id, record.ns, record.checkpoint_id)
        try:
            checkpoint = self.ring.open(record.checkpoint, record_place("checkpoint", record))
        except CorruptData as exc:
            raise exc.at(replace(where, part="checkpoint")) from None
        try:
            metadata = self.ring.open(record.metadata, record_place("metadata", record))
        except CorruptData as exc:
            raise exc.at(replace(where, part="metadata")) from None
        return record.with_payloads(checkpoint, metadata)

    def _open_write(self, thread_id: str, ns: str, cid: str, write: WriteRecord) -> WriteRecord:
        place = write_place(thread_id, ns, cid, write)
        try:
            return write.with_value(self.ring.open(write.value, place))
        except CorruptData as exc:
            raise exc.at(
                Place(
                    thread_id, ns, cid, channel=write.channel, task_id=write.task_id, idx=write.idx
                )
            ) from None

    def _open_loaded(self, loaded: Loaded) -> Loaded:
        stored = loaded.record
        t, ns, cid = stored.thread_id, stored.ns, stored.checkpoint_id
        # the records of this port's last put there, when these are the same bytes
        last = self.last_puts.known(t, ns)
        checkpoint = _same(last.get(("checkpoint", cid)), stored.checkpoint)
        metadata = _same(last.get(("metadata", cid)), stored.metadata)
        if checkpoint is None or metadata is None:
            rec = self._open_record(stored)
        else:
            rec = stored.with_payloads(checkpoint, metadata)
        blobs: dict[str, Typed] = {}
        for ch, blob in loaded.blobs.items():
            version = rec.versions.get(ch, "")
            held = _same(last.get((ch, version)), blob)
            blobs[ch] = (
                held if held is not None else self._open_value(t, ns, ch, version, blob, cid)
            )
        return Loaded(
            record=rec,
            blobs=blobs,
            writes=[self._open_write(t, ns, cid, w) for w in loaded.writes],
            elements=self._open_elements(t, ns, loaded.elements, cid),
        )

    def _open_elements(
        self,
        thread_id: str,
        ns: str,
        elements: Mapping[str, Typed],
        checkpoint_id: str | None,
    ) -> dict[str, Typed]:
        """A read's list elements (key -> stored value) opened; those whose bytes are the ones
        this port sealed or opened at the same key are not decrypted again."""
        known = self.elements.known(thread_id, ns)
        out = {
            key: held[1]
            for key, value in elements.items()
            if (held := known.get(key)) is not None
            and held[0] == value.data
            and value.tag == ENVELOPE_TAG
        }
        if len(out) == len(elements):
            return out
        opened: dict[str, tuple[bytes, Typed]] = {}
        for key, value in elements.items():
            if key in out:
                continue
            out[key] = plain = self._open_value(
                thread_id, ns, ELEMENT_CHANNEL, key, value, checkpoint_id
            )
            if value.tag == ENVELOPE_TAG:  # never a plaintext one (allow_plaintext)
                opened[key] = (value.data, plain)
        if opened:
            self.elements.remember(thread_id, ns, opened)
        return {key: out[key] for key in elements}  # in the read's order

    # -- the port's methods that carry payloads ---------------------------------------------

    def put_checkpoint(
        self, record: CheckpointRecord, blobs: list[BlobRecord], fence: int | None = None
    ) -> Op[None]:
        pairs = [self._sealed_blob(record.thread_id, record.ns, b) for b in blobs]
        sealed = [b for b, _ in pairs]
        stored = self._seal_record(record)
        yield from self.inner.put_checkpoint(stored, sealed, fence)
        # stored: a later read of these bytes at these places needs no decryption
        cid = record.checkpoint_id
        new: dict[str, tuple[bytes, Typed]] = {}
        last: dict[Any, Held] = {
            ("checkpoint", cid): (ENVELOPE_TAG, stored.checkpoint.data, record.checkpoint),
            ("metadata", cid): (ENVELOPE_TAG, stored.metadata.data, record.metadata),
        }
        for b, (s, read) in zip(blobs, pairs, strict=True):
            if b.channel == ELEMENT_CHANNEL:
                new[b.version] = (s.value.data, read)
            else:
                last[(b.channel, b.version)] = (s.value.tag, s.value.data, read)
        if new:
            self.elements.remember(record.thread_id, record.ns, new)
        self.last_puts.remember(record.thread_id, record.ns, last)

    def put_writes(
        self,
        thread_id: str,
        ns: str,
        checkpoint_id: str,
        writes: list[WriteRecord],
        fence: int | None = None,
    ) -> Op[None]:
        sealed = [self._seal_write(thread_id, ns, checkpoint_id, w) for w in writes]
        yield from self.inner.put_writes(thread_id, ns, checkpoint_id, sealed, fence)

    def load(self, thread_id: str, ns: str, checkpoint_id: str | None) -> Op[Loaded | None]:
        loaded = yield from self.inner.load(thread_id, ns, checkpoint_id)
        return None if loaded is None else self._open_loaded(loaded)

    def load_leased(
        self, thread_id: str, ns: str, checkpoint_id: str | None, token: str, ttl_ms: int
    ) -> Op[tuple[int, Loaded | None]]:
        fence, loaded = yield from self.inner.load_leased(
            thread_id, ns, checkpoint_id, token, ttl_ms
        )
        return fence, None if loaded is None else self._open_loaded(loaded)

    def list_page(
        self, query: ListQuery, cursor: Any, page_size: int
    ) -> Op[tuple[list[Loaded], Any]]:
        if query.filter:  # no plain metadata is stored: the saver filters what it reads
            query = replace(query, filter={}, limit=None)
        items, cursor = yield from self.inner.list_page(query, cursor, page_size)
        return [self._open_loaded(item) for item in items], cursor

    def chain(
        self, thread_id: str, ns: str, checkpoint_id: str | None, channels: list[str]
    ) -> Op[Chain]:
        found: Chain = yield from self.inner.chain(thread_id, ns, checkpoint_id, channels)
        return Chain(
            target_id=found.target_id,
            ancestors=found.ancestors,
            writes={
                cid: [self._open_write(thread_id, ns, cid, w) for w in writes]
                for cid, writes in found.writes.items()
            },
            blobs={
                (ch, v): self._open_value(thread_id, ns, ch, v, blob)
                for (ch, v), blob in found.blobs.items()
            },
        )

    def get_blobs(
        self, thread_id: str, keys: list[tuple[str, str, str]]
    ) -> Op[dict[tuple[str, str, str], Typed]]:
        got = yield from self.inner.get_blobs(thread_id, keys)
        out: dict[tuple[str, str, str], Typed] = {}
        elements: dict[str, dict[str, Typed]] = {}
        for (ns, ch, v), value in got.items():
            if ch == ELEMENT_CHANNEL:
                elements.setdefault(ns, {})[v] = value
            else:
                out[(ns, ch, v)] = self._open_value(thread_id, ns, ch, v, value)
        for ns, found in elements.items():
            for v, value in self._open_elements(thread_id, ns, found, None).items():
                out[(ns, ELEMENT_CHANNEL, v)] = value
        return out

    def export_thread(self, thread_id: str) -> Op[ThreadDump]:
        dump: ThreadDump = yield from self.inner.export_thread(thread_id)
        return self.opened(thread_id, dump)

    def opened(self, thread_id: str, dump: ThreadDump) -> ThreadDump:
        """``dump``, the thread's records as stored (the wrapped port's export), opened:
        :class:`CorruptData` for the first that does not open at its place."""
        return ThreadDump(
            checkpoints=[self._open_record(r) for r in dump.checkpoints],
            writes=[
                (ns, cid, self._open_write(thread_id, ns, cid, w)) for ns, cid, w in dump.writes
            ],
            blobs=[
                (
                    ns,
                    replace(
                        b, value=self._open_value(thread_id, ns, b.channel, b.version, b.value)
                    ),
                )
                for ns, b in dump.blobs
            ],
        )

    def import_thread(self, thread_id: str, dump: ThreadDump, fence: int | None = None) -> Op[None]:
        sealed = ThreadDump(
            checkpoints=[self._seal_record(r.renamed(thread_id)) for r in dump.checkpoints],
            writes=[
                (ns, cid, self._seal_write(thread_id, ns, cid, w)) for ns, cid, w in dump.writes
            ],
            blobs=[(ns, self._seal_blob(thread_id, ns, b)) for ns, b in dump.blobs],
        )
        yield from self.inner.import_thread(thread_id, sealed, fence)


def _same(held: Held | None, value: Typed) -> Typed | None:
    """The payload ``held`` remembers when ``value`` is its stored tag and bytes (None: open
    ``value`` as read)."""
    if held is None or held[1] != value.data or held[0] != value.tag:
        return None
    return held[2]


def sealed(port: Any, ring: KeyRing | None) -> Any:
    """``port`` sealed with ``ring`` (``port`` itself without one)."""
    return port if ring is None else SealedPort(port, ring)
