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

The saver remembers, per (thread, namespace, channel), the content hashes of
the elements of the last list it wrote or read there, and writes only the
elements that list did not have. Hashes never reach the store (they are only
this memory), and are taken over the serializer's plain bytes, so
``EncryptedSerializer`` (random nonces) still dedups while every stored element
is encrypted. Elements are serialized one by one with the saver's ``serde``.
What the saver remembers is updated only after the store acknowledged the
write: a failed put never leaves a reference to an element that was not
written. Element keys are reserved at allocation, so a put whose reply was
lost (but which the store applied) never has its keys reused.

Data written before (plain blobs) keeps reading: only blobs tagged
:data:`MANIFEST_TAG` are expanded.
"""

from __future__ import annotations

import hashlib
import os
import threading
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
#: elements of at least this size are compressed (when that saves >= 10 %)
COMPRESS_ELEMENT_BYTES = 128
#: how many (thread, namespace, channel) a saver remembers (least recently used go) ...
CACHE_ENTRIES = 4096
#: ... and how many element hashes in all (about 250 bytes each: ~16 MB)
CACHE_ELEMENTS = 65536

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
    # a third field, when present, is the manifest's signature (encryption=, checkpoint/sealed)
    version, runs, _ = codec.unpack_fields(manifest.data, 2, optional=1)
    if version != 1:
        raise CorruptData(
            reason=f"its list manifest has the unknown format {version!r}", kind=CORRUPT_FRAMING
        )
    try:
        return [
            element_key(epoch, seq)
            for epoch, start, count in runs
            for seq in range(start, start + count)
        ]
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
    try:
        return [codec.load(serde, typed) for _, typed in pairs], pairs
    except CorruptData as exc:
        bad = next(k for k, typed in pairs if not _loads(serde, typed))
        raise exc.at(replace(place, part=f"list element {bad}")) from None


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


def _digest(tag: str, data: bytes) -> bytes:
    """Identifies an element's content in this process only (never stored)."""
    if tag == "msgpack":  # LangGraph's default serializer: skip the concatenation
        return hashlib.sha1(data).digest()
    return hashlib.sha1(tag.encode() + b"\x00" + data).digest() + b"t"


@dataclass(slots=True)
class _Entry:
    epoch: str
    next_seq: int = 0
    #: content hash -> the element's key and its parts, for the last list written or read here
    known: dict[bytes, Known] = field(default_factory=dict)


@dataclass(slots=True)
class SharedList:
    """One list value prepared for a put: its manifest and the elements to write."""

    channel: str
    manifest: Typed
    elements: list[BlobRecord]
    known: dict[bytes, Known]


class ListSharer:
    """What a saver remembers of the lists it wrote or read (see the module docs)."""

    def __init__(
        self,
        serde: Any,
        squeeze: Callable[[Typed, int], Typed] = codec.squeeze,
        *,
        entries: int = CACHE_ENTRIES,
        elements: int = CACHE_ELEMENTS,
    ) -> None:
        self.serde = serde
        self.squeeze = squeeze
        self.plain = plain_serde(serde)
        self.entries = entries
        self.elements = elements
        self._cache: OrderedDict[tuple[str, str, str], _Entry] = OrderedDict()
        self._known = 0  # element hashes held over all entries
        self._lock = threading.Lock()

    def _entry(self, slot: tuple[str, str, str]) -> _Entry:
        entry = self._cache.get(slot)
        if entry is None:
            entry = self._cache[slot] = _Entry(os.urandom(8).hex())
        else:
            self._cache.move_to_end(slot)
        return entry

    def _remember(self, slot: tuple[str, str, str], known: dict[bytes, Known]) -> None:
        """Set a slot's known elements; the least recently used slots go past the bounds."""
        entry = self._entry(slot)
        self._known += len(known) - len(entry.known)
        entry.known = known
        while len(self._cache) > 1 and (
            len(self._cache) > self.entries or self._known > self.elements
        ):
            _, evicted = self._cache.popitem(last=False)
            self._known -= len(evicted.known)

    @property
    def remembered(self) -> tuple[int, int]:
        """(slots, element hashes) held now."""
        return len(self._cache), self._known

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
        known: dict[bytes, Known] = {}
        with self._lock:
            entry = self._entry((thread_id, ns, channel))
            seen = entry.known
            for i, (tag, data) in enumerate(plain):
                digest = _digest(tag, data)
                found = known.get(digest) or seen.get(digest)
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
                known[digest] = found
                order.append(found)
        return SharedList(channel, encode_manifest(order), elements, known)

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
                self._remember((thread_id, ns, item.channel), item.known)

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
        known: dict[bytes, Known] = {}
        epochs: dict[str, str] = {}  # one string per epoch, not one per element
        for item, (key, typed) in zip(values, pairs, strict=True):
            if self.plain is not self.serde:
                typed = codec.dump(self.plain, item, "a list element")
            else:
                typed = codec.unsqueeze(typed)
            epoch, seq = split_key(key)
            known[_digest(typed.tag, typed.data)] = (key, epochs.setdefault(epoch, epoch), seq)
        with self._lock:
            self._remember(slot, known)

    def forget(self, thread_id: str) -> None:
        """The thread was deleted or pruned here: trust nothing remembered of it."""
        with self._lock:
            for slot in [s for s in self._cache if s[0] == thread_id]:
                self._remember(slot, {})
