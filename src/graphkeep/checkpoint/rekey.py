"""Key rotation: a thread's records rewritten under the ring's current key, in place.

:func:`rekey_thread` is the op ``graphkeep rekey`` runs per thread (sync through
``saver.drive``, async through ``saver.adrive``), on a saver with ``encryption=``
(its port a :class:`~graphkeep.checkpoint.sealed.SealedPort`):

1. the thread's lease is taken (``saver.lock``: fenced, so a run that held the thread before
   writes nothing after);
2. the thread's records are read as stored (the wrapped port's ``export_thread``: every
   checkpoint and its metadata, channel value, list element, pending write; chunks joined);
3. each record not under the current key is opened at its place and sealed again under the
   current key; a list manifest is signed again; a payload in LangGraph's
   ``EncryptedSerializer`` form (tag ``<serde>+aes``) is decrypted by ``legacy`` (the caller
   gives the cipher of ``LANGGRAPH_AES_KEY``) and sealed, and the thread's list manifests,
   which nothing signed then, are signed. What does not open fails closed as a
   read does (:class:`~graphkeep.errors.CorruptData` ``plaintext`` — unless the ring was made
   with ``allow_plaintext=True`` —, ``unknown_key``, ``tampered``): nothing of the thread is
   written then, so a planted record never becomes trusted data;
4. the thread is written back with ``import_thread`` under the lease's fencing token: the same
   ids, the same history (upserts of the same addresses);
5. it is read back: every record must be under the current key and open to the payload that
   was sealed (else ``CorruptData``); then the chunks of the payloads rewritten (DynamoDB's
   content-addressed chunk items, MongoDB's tail documents of the old generation: the old
   ciphertext) are deleted
   (:meth:`~graphkeep.checkpoint.port.CheckpointPort.drop_chunks`).

A thread whose records are all current is not written (so a run killed halfway is run again:
the threads it finished are skipped). :func:`key_counts` counts stored records per key id
(``graphkeep check --deep`` and the report of ``rekey``): an envelope's key id,
:data:`PLAINTEXT` or :data:`LANGGRAPH_AES`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from graphkeep.checkpoint.lists import ELEMENT_CHANNEL, MANIFEST_TAG
from graphkeep.checkpoint.records import BlobRecord, CheckpointRecord, ThreadDump, WriteRecord
from graphkeep.checkpoint.sealed import (
    SealedPort,
    manifest_fields,
    record_place,
    signed_manifest,
    value_place,
    write_place,
)
from graphkeep.errors import TAMPERED, UNDECODABLE, ConfigurationError, CorruptData, Place
from graphkeep.port import Op, codec
from graphkeep.port.codec import Typed
from graphkeep.port.encryption import KeyRing, envelope_key_id

if TYPE_CHECKING:
    from graphkeep.checkpoint.saver import SaverBase

__all__ = [
    "KINDS",
    "LANGGRAPH_AES",
    "PLAINTEXT",
    "Legacy",
    "Rekeyed",
    "key_counts",
    "rekey_thread",
    "stored_key_id",
]

#: what a stored payload that is not an envelope counts under
PLAINTEXT = "plaintext"
#: what a payload in LangGraph's ``EncryptedSerializer`` form counts under
LANGGRAPH_AES = "langgraph-aes"
#: the kinds of records counted (a shared list's element and manifest apart from values)
KINDS = ("checkpoint", "metadata", "value", "element", "manifest", "write")
#: a payload in LangGraph's ``EncryptedSerializer`` form -> the serializer's plain payload
Legacy = Callable[[Typed], Typed]
#: counts per record kind, then per key id
Counts = dict[str, dict[str, int]]


def stored_key_id(value: Typed) -> str:
    """What a stored payload is under: its envelope's key id (a manifest: its signature's),
    :data:`PLAINTEXT`, or :data:`LANGGRAPH_AES`."""
    if value.tag == MANIFEST_TAG:
        try:
            signature = manifest_fields(value)[2]
        except CorruptData:
            return TAMPERED
        if isinstance(signature, list) and signature and isinstance(signature[0], str):
            return signature[0]
        return PLAINTEXT
    try:
        key_id = envelope_key_id(value)
    except CorruptData:
        return TAMPERED
    if key_id is not None:
        return key_id
    return LANGGRAPH_AES if "+" in value.tag.removeprefix(codec.COMPRESSED_PREFIX) else PLAINTEXT


def _blob_kind(blob: BlobRecord) -> str:
    if blob.value.tag == MANIFEST_TAG:
        return "manifest"
    return "element" if blob.channel == ELEMENT_CHANNEL else "value"


def _payloads(thread_id: str, dump: ThreadDump) -> Iterator[tuple[str, tuple[Any, ...], Typed]]:
    """Every payload of ``dump``: its kind, its place (its address) and the payload."""
    for record in dump.checkpoints:
        for part in ("checkpoint", "metadata"):
            yield part, record_place(part, record), getattr(record, part)
    for ns, blob in dump.blobs:
        place = value_place(thread_id, ns, blob.channel, blob.version)
        yield _blob_kind(blob), place, blob.value
    for ns, cid, write in dump.writes:
        yield "write", write_place(thread_id, ns, cid, write), write.value


def key_counts(thread_id: str, dump: ThreadDump) -> Counts:
    """``{kind: {key id: records}}`` of a thread's records as stored (see
    :func:`stored_key_id`)."""
    counts: dict[str, Counter[str]] = {}
    for kind, _, value in _payloads(thread_id, dump):
        counts.setdefault(kind, Counter())[stored_key_id(value)] += 1
    return {kind: dict(sorted(c.items())) for kind, c in sorted(counts.items())}


@dataclass(slots=True)
class Rekeyed:
    """One thread's rotation: its records per kind and key id before and after."""

    thread_id: str
    before: Counts = field(default_factory=dict)
    after: Counts = field(default_factory=dict)
    #: records sealed (or signed) again; 0: the thread was current already
    rewritten: int = 0
    #: the thread was written (not a dry run, something to change)
    written: bool = False
    #: the answer of ``rekey_thread``'s ``held`` op (None without one)
    held: Any = None


class _Renewal:
    """The records of one thread sealed again under the ring's current key."""

    def __init__(self, ring: KeyRing, thread_id: str, legacy: Legacy | None) -> None:
        self.ring = ring
        self.thread_id = thread_id
        self.legacy = legacy
        self.rewritten = 0
        #: the thread is in LangGraph's form and ``legacy`` opens it (see :meth:`dump`)
        self.migrating = False
        #: place -> the payload sealed there (what the read-back must open to)
        self.plain: dict[tuple[Any, ...], Typed] = {}

    def payload(self, value: Typed, place: tuple[Any, ...], where: Place) -> Typed:
        key_id = stored_key_id(value)
        if key_id == self.ring.current:
            return value
        try:
            if key_id == LANGGRAPH_AES:
                plain = self._legacy(value)
            else:
                plain = self.ring.open(value, place)  # plaintext, unknown key, tampered: raise
        except CorruptData as exc:
            raise exc.at(where) from None
        self.rewritten += 1
        self.plain[place] = plain
        return self.ring.seal(plain, place)

    def _legacy(self, value: Typed) -> Typed:
        if self.legacy is None:
            raise CorruptData(
                reason="it is in LangGraph's EncryptedSerializer form",
                kind=UNDECODABLE,
                advice="Set LANGGRAPH_AES_KEY to the key the application used, then run"
                " graphkeep rekey again; nothing of the thread was written",
            )
        return self.legacy(value)

    def manifest(self, blob: BlobRecord, place: tuple[Any, ...], where: Place) -> BlobRecord:
        try:
            version, runs, signature = manifest_fields(blob.value)
        except CorruptData as exc:
            raise exc.at(where) from None
        if isinstance(signature, list) and signature and signature[0] == self.ring.current:
            return blob
        body = codec.packb([version, runs])
        try:
            if signature is not None or not self.migrating:
                self.ring.verify(body, ("manifest", *place), signature)
        except CorruptData as exc:
            raise exc.at(where) from None
        self.rewritten += 1
        return replace(blob, value=signed_manifest(self.ring, place, version, runs))

    def record(self, record: CheckpointRecord) -> CheckpointRecord:
        where = Place(record.thread_id, record.ns, record.checkpoint_id)
        return replace(
            record,
            checkpoint=self.payload(
                record.checkpoint,
                record_place("checkpoint", record),
                replace(where, part="checkpoint"),
            ),
            metadata=self.payload(
                record.metadata, record_place("metadata", record), replace(where, part="metadata")
            ),
            metadata_doc={},  # nothing of a value stays readable
        )

    def blob(self, ns: str, blob: BlobRecord) -> BlobRecord:
        place = value_place(self.thread_id, ns, blob.channel, blob.version)
        where = Place(
            self.thread_id, ns, None, channel=blob.channel, part=f"version {blob.version}"
        )
        if blob.value.tag == MANIFEST_TAG:
            return self.manifest(blob, place, where)
        return replace(blob, value=self.payload(blob.value, place, where))

    def write(self, ns: str, cid: str, write: WriteRecord) -> WriteRecord:
        place = write_place(self.thread_id, ns, cid, write)
        where = Place(
            self.thread_id, ns, cid, channel=write.channel, task_id=write.task_id, idx=write.idx
        )
        return replace(write, value=self.payload(write.value, place, where))

    def dump(self, stored: ThreadDump) -> ThreadDump:
        # a thread in LangGraph's EncryptedSerializer form, migrated with its key: its list
        # manifests were never signed (they name element keys only; the elements are
        # LangGraph's ciphertext, opened by ``legacy``), so they are signed now
        self.migrating = self.legacy is not None and any(
            stored_key_id(value) == LANGGRAPH_AES
            for _, _, value in _payloads(self.thread_id, stored)
        )
        return ThreadDump(
            checkpoints=[self.record(r) for r in stored.checkpoints],
            writes=[(ns, cid, self.write(ns, cid, w)) for ns, cid, w in stored.writes],
            blobs=[(ns, self.blob(ns, b)) for ns, b in stored.blobs],
        )


def _verify(port: SealedPort, renewal: _Renewal, written: ThreadDump, read: ThreadDump) -> None:
    """The read-back: every record written is stored under the current key and opens at its
    place to the payload sealed there."""
    thread_id = renewal.thread_id
    stored = {place: value for _, place, value in _payloads(thread_id, read)}
    current = renewal.ring.current
    for _, place, _value in _payloads(thread_id, written):
        found = stored.get(place)
        if found is None or stored_key_id(found) != current:
            what = "is gone" if found is None else f"is under {stored_key_id(found)!r}"
            raise CorruptData(
                reason=f"the rewritten record at {place[0]} {list(place[2:])!r} {what} on"
                " reading back",
                kind=UNDECODABLE,
                place=Place(thread_id),
            )
        want = renewal.plain.get(place)
        if want is not None and renewal.ring.open(found, place) != want:
            raise CorruptData(
                reason=f"the rewritten record at {place[0]} does not read back as written",
                kind=UNDECODABLE,
                place=Place(thread_id),
            )
    port.opened(thread_id, read)  # the whole thread opens, manifests verified


def sealed_port(saver: SaverBase) -> SealedPort:
    """The saver's sealed port, or :class:`~graphkeep.errors.ConfigurationError`."""
    port = saver.port
    if not isinstance(port, SealedPort):
        raise ConfigurationError(
            "rekey rewrites records under the saver's encryption: open the saver with"
            " encryption=KeyRing(...) (the CLI: set GRAPHKEEP_KEYS, the new key first)"
        )
    return port


def rekey_thread(
    saver: SaverBase,
    thread_id: str,
    *,
    legacy: Legacy | None = None,
    dry_run: bool = False,
    lease: float = 60.0,
    timeout: float | None = 60.0,
    held: Callable[[int | None], Op[Any]] | None = None,
) -> Op[Rekeyed]:
    """The op rewriting ``thread_id``'s records under ``saver.encryption``'s current key
    (see the module's docstring); ``dry_run``: counted, nothing written, no lease taken.
    ``lease``: the lease's ttl (seconds); ``timeout``: how long to wait for a busy thread
    (:class:`~graphkeep.errors.LockNotAcquired` then). ``held``: what else of the thread
    to rewrite under the same lease, an op given its fencing token (None in a dry run: no
    lease) whose answer is :attr:`Rekeyed.held`, run after the checkpoints whether or not
    they were current (``graphkeep rekey``: the thread's effect-ledger records, another
    product this layer does not import)."""
    port = sealed_port(saver)
    thread_id = saver.check_thread_id(thread_id)
    if dry_run:
        stored = yield from port.inner.export_thread(thread_id)
        counts = key_counts(thread_id, stored)
        renewal = _Renewal(port.ring, thread_id, legacy)
        renewal.dump(stored)  # what would fail, fails
        also = None if held is None else (yield from held(None))
        return Rekeyed(thread_id, counts, counts, renewal.rewritten, held=also)
    lock = saver.lock(thread_id, ttl=lease, timeout=timeout)
    fence = yield from lock.acquire_op()
    try:
        done = yield from _rekey_held(port, thread_id, legacy, fence)
        if held is not None:
            done.held = yield from held(fence)
    except GeneratorExit:
        raise
    except BaseException:
        yield from lock.release_op()
        raise
    yield from lock.release_op()
    return done


def _rekey_held(port: SealedPort, thread_id: str, legacy: Legacy | None, fence: int) -> Op[Rekeyed]:
    stored = yield from port.inner.export_thread(thread_id)
    before = key_counts(thread_id, stored)
    renewal = _Renewal(port.ring, thread_id, legacy)
    renewed = renewal.dump(stored)
    if not renewal.rewritten:
        return Rekeyed(thread_id, before, before)
    chunks = yield from port.inner.chunk_refs(thread_id)
    yield from port.inner.import_thread(thread_id, renewed, fence)
    read = yield from port.inner.export_thread(thread_id)
    _verify(port, renewal, renewed, read)
    # the old ciphertext of a rewritten chunked payload goes (its chunks are content-addressed)
    yield from port.inner.drop_chunks(thread_id, chunks, fence)
    return Rekeyed(thread_id, before, key_counts(thread_id, read), renewal.rewritten, True)


def counted_export(port: Any, thread_id: str) -> Op[tuple[Counts, ThreadDump | CorruptData]]:
    """``graphkeep check --deep``'s read of a thread: its records' counts per kind and key id
    as stored, and its export as ``port`` reads it (a sealed port's: opened; what does not
    open, the :class:`CorruptData`) — one export either way."""
    inner = port.inner if isinstance(port, SealedPort) else port
    stored: ThreadDump = yield from inner.export_thread(thread_id)
    counts = key_counts(thread_id, stored)
    if inner is port:
        return counts, stored
    try:
        return counts, port.opened(thread_id, stored)
    except CorruptData as exc:
        return counts, exc
