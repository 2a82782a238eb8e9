"""Structural sharing of list values: a growing list costs what changed.

A chat thread's ``messages`` list is a new, longer list at every step; storing
it whole per version makes a thread's storage quadratic. Instead, a list value
(of at least :data:`MIN_SHARED_BYTES` serialized) is stored as

- **element records**: one blob per element, at the reserved channel
  :data:`ELEMENT_CHANNEL` of the checkpoint's namespace, keyed by
  ``<epoch><seq>`` (16 + 8 hex digits). An *epoch* is a random id owned by one
  saver object for one (thread, namespace, channel); within it ``seq`` only
  grows. So two processes never write the same key, and a key, once written,
  never changes (content is immutable per key);
- a **manifest** in place of the channel's blob (tag :data:`MANIFEST_TAG`, the
  storage-format marker): the element keys as runs ``[epoch, start, count]``,
  so an append-only list's manifest stays one run, O(1), at every version.

The saver remembers, per (thread, namespace, channel), the identities of the
elements of the last list it wrote or read there, and writes only the
elements that list did not have. An element's identity is its serializer's
plain bytes themselves up to :data:`IDENTITY_BYTES` (compared exactly, through
Python's own hash of bytes: no digest to compute), a SHA-1 digest of them
above; identities never reach the store (they are only this memory), so
``EncryptedSerializer`` (random nonces) still dedups while every stored element
is encrypted. Elements are serialized one by one with the saver's ``serde``,
every put: an element mutated in place since the last put has other bytes, so
it is a new element, stored as it is now.
What the saver remembers is updated only after the store acknowledged the
write: a failed put never leaves a reference to an element that was not
written. Element keys are reserved at allocation, so a put whose reply was
lost (but which the store applied) never has its keys reused.

Data written before (plain blobs) keeps reading: only blobs tagged
:data:`MANIFEST_TAG` are expanded.
"""

from __future__ import annotations

import functools
import hashlib
import os
import threading
import zlib
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import astuple, dataclass, field, replace
from typing import Any

from graphkeep.checkpoint.records import BlobRecord, Typed
from graphkeep.errors import CORRUPT_FRAMING, MISSING_VALUE, CorruptData, Place
from graphkeep.port import codec

#: the reserved channel name element records are stored under (never a user channel)
ELEMENT_CHANNEL = "__graphkeep.element__"
#: the tag of a manifest blob; the trailing number is the manifest format
MANIFEST_TAG = "graphkeep.list/1"
#: lists smaller than this (serialized) keep the plain one-blob path
MIN_SHARED_BYTES = 1024
#: elements of at least this size are compressed (when that saves >= 10 %). Below it zlib
#: does not pay: a chat message under 512 bytes saves 4-24 % (a few dozen bytes) for ~30 us
#: to deflate it once and ~4 us to inflate it at every read of every later checkpoint
COMPRESS_ELEMENT_BYTES = 512
#: elements up to this size (serialized) are remembered by their bytes, larger ones by a
#: SHA-1 digest (see the module docs)
IDENTITY_BYTES = 1024
#: how many (thread, namespace, channel) a saver remembers (least recently used go) ...
CACHE_ENTRIES = 4096
#: ... how many element identities in all ...
CACHE_ELEMENTS = 65536
#: ... and how many bytes of them (bytes held, or 20 per digest, plus ~150 per element)
CACHE_BYTES = 24 << 20
#: the bytes an identity is counted for beyond its own (dict slot, key tuple)
_IDENTITY_OVERHEAD = 150

_SEQ_DIGITS = 8


def element_key(epoch: str, seq: int) -> str:
    return f"{epoch}{seq:0{_SEQ_DIGITS}x}"


def split_key(key: str) -> tuple[str, int]:
    return key[:-_SEQ_DIGITS], int(key[-_SEQ_DIGITS:], 16)


#: an element's key with its two parts: ``(key, epoch, seq)``
Known = tuple[str, str, int]


def encode_manifest(elements: Iterable[Known]) -> Typed:
    """Runs of consecutive keys within one epoch: ``[1, [[epoch, start, count], ...]]``."""
    runs: list[list[Any]] = []
    last: list[Any] = [None, 0, 0]
    for _, epoch, seq in elements:
        if last[0] == epoch and last[1] + last[2] == seq:
            last[2] += 1
        else:
            last = [epoch, seq, 1]
            runs.append(last)
    return Typed(MANIFEST_TAG, codec.packb([1, runs]))


def manifest_keys(manifest: Typed) -> list[str]:
    """Element keys of a manifest, in list order (a key may repeat)."""
    return list(_manifest_keys(manifest.data))


@functools.lru_cache(maxsize=4)
def _manifest_keys(data: bytes) -> tuple[str, ...]:
    """:func:`manifest_keys` of a manifest's bytes, the last few remembered: ``get_tuple``
    expands its manifest twice in a row (the elements to fetch, then the list)."""
    # a third field, when present, is the manifest's signature (encryption=, checkpoint/sealed)
    version, runs, _ = codec.unpack_fields(data, 2, optional=1)
    if version != 1:
        raise CorruptData(
            reason=f"its list manifest has the unknown format {version!r}", kind=CORRUPT_FRAMING
        )
    try:
        return tuple(
            element_key(epoch, seq)
            for epoch, start, count in runs
            for seq in range(start, start + count)
        )
    except (TypeError, ValueError) as exc:
        raise codec.framing_error(exc) from None


def is_manifest(blob: Typed | None) -> bool:
    return blob is not None and blob.tag == MANIFEST_TAG


def element_blob_keys(ns: str, manifests: Iterable[Typed]) -> list[tuple[str, str, str]]:
    """Blob keys ``(ns, ELEMENT_CHANNEL, key)`` of every element the manifests name, once."""
    keys: dict[tuple[str, str, str], None] = {}
    for manifest in manifests:
        for key in manifest_keys(manifest):
            keys[(ns, ELEMENT_CHANNEL, key)] = None
    return list(keys)


def rebuild(
    serde: Any, manifest: Typed, elements: Mapping[str, Typed], where: Place | str
) -> tuple[list[Any], list[tuple[str, Typed]]]:
    """The list a manifest describes, and its (key, stored element) pairs.

    A missing element is corruption (or a thread deleted under a running
    writer): raise, naming ``where``, never return a shorter list. So is an element
    that does not decode (:func:`graphkeep.port.codec.load`).
    """
    place = where if isinstance(where, Place) else Place(part=where)
    try:
        keys = manifest_keys(manifest)
    except CorruptData as exc:
        raise exc.at(place) from None
    missing = [k for k in keys if k not in elements]
    if missing:
        raise CorruptData(
            reason=(
                f"{len(missing)} of {len(keys)} list elements are missing from the store"
                f" (first: {missing[0]}); the list cannot be rebuilt"
            ),
            kind=MISSING_VALUE,
            place=place,
        )
    pairs = [(k, elements[k]) for k in keys]
    values = _decode_plain(serde, pairs)
    if values is not None:
        return values, pairs
    try:
        return [codec.load(serde, typed) for _, typed in pairs], pairs
    except CorruptData as exc:
        bad = next(k for k, typed in pairs if not _loads(serde, typed))
        raise exc.at(replace(place, part=f"list element {bad}")) from None


_ZMSGPACK = codec.COMPRESSED_PREFIX + "msgpack"


def _decode_plain(serde: Any, pairs: list[tuple[str, Typed]]) -> list[Any] | None:
    """The elements decoded on the hot path, when every one is a ``msgpack`` payload
    (compressed or not) that decodes to what it stands for: ``serde.loads_typed`` in a
    row, without :func:`graphkeep.port.codec.load`'s per-call checks. None otherwise
    (other tags, a failure, a None that is not msgpack's nil): the caller decodes them
    all through ``codec.load``, which names what is wrong."""
    loads = serde.loads_typed
    values = []
    try:
        for _, typed in pairs:
            data = typed.data
            if typed.tag == _ZMSGPACK:
                data = zlib.decompress(data)
            elif typed.tag != "msgpack":
                return None
            value = loads(("msgpack", data))
            if value is None and data != b"\xc0":
                return None
            values.append(value)
    except Exception:
        return None
    return values


def _loads(serde: Any, typed: Typed) -> bool:
    try:
        codec.load(serde, typed)
    except CorruptData:
        return False
    return True


def where(thread_id: str, ns: str, checkpoint_id: str, channel: str) -> Place:
    """Where a stored value is, for :class:`~graphkeep.errors.CorruptData` (its ``str`` is
    the text error messages use)."""
    return Place(
        thread_id=thread_id, checkpoint_ns=ns, checkpoint_id=checkpoint_id, channel=channel
    )


def load_value(serde: Any, blob: Typed, elements: Mapping[str, Typed], where: Place) -> Any:
    """A stored channel value: a manifest is rebuilt into its list, anything else decoded.

    A manifest whose elements are missing, or a value that does not decode, raises
    :class:`~graphkeep.errors.CorruptData` naming ``where``; a shorter list is never returned.
    """
    if is_manifest(blob):
        return rebuild(serde, blob, elements, where)[0]
    return codec.load(serde, blob, where)


def plain_serde(serde: Any) -> Any:
    """The serializer whose bytes identify content (``EncryptedSerializer`` wraps one)."""
    inner = getattr(serde, "serde", None)
    if inner is not None and getattr(serde, "cipher", None) is not None:
        return inner
    return serde


#: an element's identity (:func:`identity`): its bytes, ``(tag, bytes)``, or
#: ``(tag, digest, size)`` above :data:`IDENTITY_BYTES` (kinds that never compare equal)
Identity = bytes | tuple[str, bytes] | tuple[str, bytes, int]


def identity(tag: str, data: bytes) -> Identity:
    """Identifies an element's content in this process only (never stored): equal
    identities are equal serialized bytes (for a digest, but for a SHA-1 collision)."""
    if len(data) > IDENTITY_BYTES:
        return (tag, hashlib.sha1(data).digest(), len(data))
    if tag == "msgpack":  # LangGraph's default serializer: the bytes are the identity
        return data
    return (tag, data)


def identity_bytes(ident: Identity) -> int:
    """What remembering ``ident`` costs, as :data:`CACHE_BYTES` counts it."""
    if isinstance(ident, bytes):
        return len(ident) + _IDENTITY_OVERHEAD
    return len(ident[1]) + _IDENTITY_OVERHEAD


@dataclass(slots=True)
class _Entry:
    epoch: str
    next_seq: int = 0
    #: identity -> the element's key and its parts, for the last list written or read here
    known: dict[Identity, Known] = field(default_factory=dict)
    #: what ``known`` costs (:func:`identity_bytes`)
    size: int = 0


@dataclass(slots=True)
class SharedList:
    """One list value prepared for a put: its manifest and the elements to write."""

    channel: str
    manifest: Typed
    elements: list[BlobRecord]
    known: dict[Identity, Known]
    #: what ``known`` costs (:func:`identity_bytes`)
    size: int = 0


class ListSharer:
    """What a saver remembers of the lists it wrote or read (see the module docs)."""

    def __init__(
        self,
        serde: Any,
        squeeze: Callable[[Typed, int], Typed] = codec.squeeze,
        *,
        entries: int = CACHE_ENTRIES,
        elements: int = CACHE_ELEMENTS,
        budget: int = CACHE_BYTES,
    ) -> None:
        self.serde = serde
        self.squeeze = squeeze
        self.plain = plain_serde(serde)
        self.entries = entries
        self.elements = elements
        self.budget = budget
        self._cache: OrderedDict[tuple[str, str, str], _Entry] = OrderedDict()
        self._known = 0  # element identities held over all entries
        self._size = 0  # and what they cost (identity_bytes)
        self._lock = threading.Lock()

    def _entry(self, slot: tuple[str, str, str]) -> _Entry:
        entry = self._cache.get(slot)
        if entry is None:
            entry = self._cache[slot] = _Entry(os.urandom(8).hex())
        else:
            self._cache.move_to_end(slot)
        return entry

    def _remember(
        self, slot: tuple[str, str, str], known: dict[Identity, Known], size: int
    ) -> None:
        """Set a slot's known elements; the least recently used slots go past the bounds."""
        entry = self._entry(slot)
        self._known += len(known) - len(entry.known)
        self._size += size - entry.size
        entry.known, entry.size = known, size
        while len(self._cache) > 1 and (
            len(self._cache) > self.entries
            or self._known > self.elements
            or self._size > self.budget
        ):
            _, evicted = self._cache.popitem(last=False)
            self._known -= len(evicted.known)
            self._size -= evicted.size

    @property
    def remembered(self) -> tuple[int, int]:
        """(slots, element identities) held now."""
        return len(self._cache), self._known

    @property
    def remembered_bytes(self) -> int:
        """What the identities held now cost, as :data:`CACHE_BYTES` counts it."""
        return self._size

    def share(
        self, thread_id: str, ns: str, channel: str, value: Any, what: str
    ) -> SharedList | None:
        """The shared form of ``value``, or None when it keeps the plain path."""
        if type(value) is not list or len(value) < 2:
            return None
        plain = self._dump_all(value, what)
        size = 0
        for _, data in plain:
            size += len(data)
            if size >= MIN_SHARED_BYTES:
                break
        else:
            return None
        encrypt = self.plain is not self.serde
        order: list[Known] = []
        elements: list[BlobRecord] = []
        known: dict[Identity, Known] = {}
        size = 0
        with self._lock:
            entry = self._entry((thread_id, ns, channel))
            seen = entry.known
            for i, (tag, data) in enumerate(plain):
                if tag == "msgpack" and len(data) <= IDENTITY_BYTES:
                    ident: Identity = data  # identity() inlined: the common case
                    cost = len(data) + _IDENTITY_OVERHEAD
                else:
                    ident = identity(tag, data)
                    cost = identity_bytes(ident)
                found = known.get(ident)
                if found is not None:  # a repeat within this list
                    order.append(found)
                    continue
                found = seen.get(ident)
                if found is None:
                    # reserved now, even if this put fails: a key is never reused
                    seq = entry.next_seq
                    entry.next_seq += 1
                    found = (element_key(entry.epoch, seq), entry.epoch, seq)
                    stored = (
                        codec.dump(self.serde, value[i], f"{what}[{i}]")
                        if encrypt
                        else Typed(tag, data)
                    )
                    elements.append(
                        BlobRecord(
                            ELEMENT_CHANNEL, found[0], self.squeeze(stored, COMPRESS_ELEMENT_BYTES)
                        )
                    )
                known[ident] = found
                size += cost
                order.append(found)
        return SharedList(channel, encode_manifest(order), elements, known, size)

    def _dump_all(self, value: list[Any], what: str) -> list[tuple[str, bytes]]:
        """Every element serialized alone (the hot path: no per-element wrapper)."""
        dumps = self.plain.dumps_typed
        try:
            return [dumps(item) for item in value]
        except Exception:  # find and name the element that fails
            return [astuple(codec.dump(self.plain, x, f"{what}[{i}]")) for i, x in enumerate(value)]

    def committed(self, thread_id: str, ns: str, shared: Iterable[SharedList]) -> None:
        """The store acknowledged ``shared``: its elements are now known there."""
        with self._lock:
            for item in shared:
                self._remember((thread_id, ns, item.channel), item.known, item.size)

    def learned(
        self,
        thread_id: str,
        ns: str,
        channel: str,
        values: list[Any],
        pairs: list[tuple[str, Typed]],
    ) -> None:
        """A read returned this list: its elements exist, so later puts reference them."""
        slot = (thread_id, ns, channel)
        with self._lock:
            entry = self._cache.get(slot)
            if entry is not None and {k for k, _, _ in entry.known.values()}.issuperset(
                k for k, _ in pairs
            ):
                return  # this saver wrote (or read) them: nothing new to learn
        known: dict[Identity, Known] = {}
        size = 0
        epochs: dict[str, str] = {}  # one string per epoch, not one per element
        for item, (key, typed) in zip(values, pairs, strict=True):
            if self.plain is not self.serde:
                typed = codec.dump(self.plain, item, "a list element")
            else:
                typed = codec.unsqueeze(typed)
            epoch, seq = split_key(key)
            ident = identity(typed.tag, typed.data)
            if ident not in known:
                size += identity_bytes(ident)
            known[ident] = (key, epochs.setdefault(epoch, epoch), seq)
        with self._lock:
            self._remember(slot, known, size)

    def forget(self, thread_id: str) -> None:
        """The thread was deleted or pruned here: trust nothing remembered of it."""
        with self._lock:
            for slot in [s for s in self._cache if s[0] == thread_id]:
                self._remember(slot, {}, 0)
