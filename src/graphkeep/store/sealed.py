"""The store's items encrypted at their place (``encryption=``): a store port over a port.

:class:`SealedStorePort` wraps a backend's :class:`~graphkeep.store.port.StorePort`: each
item's value *and its embeddings* go to the store as one envelope of the store's
:class:`~graphkeep.port.encryption.KeyRing`, sealed at ``("item", namespace, key)``, and come
back opened at the namespace and key they were read from. What the backend is handed as the
value is ``{SEALED_FIELD: base64 envelope}`` with no vectors and ``filterable=False``, so no
backend keeps a readable copy of anything in it: the Redis store's value JSON, the MongoDB
store's filter copy (``doc``), the DynamoDB store's filter attributes (``fa``) and every
backend's stored embeddings hold the ciphertext or nothing. A value too large for one record
is chunked by the backend after sealing: a chunk moved, dropped or changed fails the one tag
of the whole value (``tampered``), so each chunk is bound to its item and its index too.

Reads fail closed (:class:`~graphkeep.errors.CorruptData` naming the namespace and key): a
value that is not an envelope (``plaintext``, unless the ring allows plaintext: then it is
returned as stored, logged and counted), an envelope under a key id the ring lacks
(``unknown_key``), one copied from another item or changed (``tampered``).

Search: a search without filter and query is the backend's own (its order, ``updated_at``,
needs no value). A filtered or semantic search cannot run on the server, which holds no
readable value or vector: it reads every live item under the prefix (pages of
:data:`SCAN_PAGE`), opens them and ranks them in the client exactly as
:func:`~graphkeep.store.ranking.rank` does on every backend; its TTL refresh then touches the
returned page only. :func:`rekey` rewrites items under the ring's current key.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass, field, replace
from typing import Any

from graphkeep.errors import CorruptData, GraphkeepError, Place
from graphkeep.port import Op, codec
from graphkeep.port.clock import now_ms
from graphkeep.port.encryption import ENVELOPE_TAG, KeyRing
from graphkeep.store.port import ItemKey, Namespace, SearchQuery, StoredItem, Vector
from graphkeep.store.ranking import rank
from graphkeep.store.values import decode_value, encode_value

#: the one field of a sealed item's value as the backend stores it (base64 of the envelope)
SEALED_FIELD = "__graphkeep_sealed__"
#: the inner payload's tag: msgpack ``[value JSON, [[path, digest, float32 bytes], ...]]``
ITEM_TAG = "graphkeep.item/1"
#: items read per request by a client-side search and by :func:`rekey`
SCAN_PAGE = 500
#: the key id :func:`rekey` counts items stored in plaintext under
PLAINTEXT = "plaintext"


def item_place(namespace: Namespace, key: str) -> tuple[Any, ...]:
    """Where a store item lives, for its encryption."""
    return ("item", list(namespace), key)


def envelope_of(value: dict[str, Any]) -> codec.Typed | None:
    """The envelope a stored value holds (None: a value that is not sealed)."""
    if len(value) != 1 or SEALED_FIELD not in value:
        return None
    text = value[SEALED_FIELD]
    try:
        data = base64.b64decode(text, validate=True) if isinstance(text, str) else b""
    except (binascii.Error, ValueError):
        data = b""
    return codec.Typed(ENVELOPE_TAG, data)  # bad base64: an empty envelope, refused as tampered


class SealedStorePort:
    """``port`` with every item sealed on the way in and opened on the way out."""

    def __init__(self, port: Any, ring: KeyRing) -> None:
        self.inner = port
        self.ring = ring

    def __getattr__(self, name: str) -> Any:  # setup, namespaces, sweep, switch_done: no values
        return getattr(self.inner, name)

    # -- sealing and opening -------------------------------------------------------------

    def seal(self, item: StoredItem) -> StoredItem:
        """``item`` as the backend stores it: value and vectors in one envelope."""
        inner = codec.packb(
            [encode_value(item.value), [[v.path, v.digest, v.data] for v in item.vectors]]
        )
        sealed = self.ring.seal(codec.Typed(ITEM_TAG, inner), item_place(item.namespace, item.key))
        text = base64.b64encode(sealed.data).decode()
        return replace(item, value={SEALED_FIELD: text}, vectors=[], filterable=False)

    def key_id(self, item: StoredItem) -> str:
        """The key id ``item`` is stored under (:data:`PLAINTEXT`: not sealed)."""
        envelope = envelope_of(item.value)
        if envelope is None:
            return PLAINTEXT
        try:
            return self.ring.key_id(envelope) or PLAINTEXT
        except CorruptData as exc:
            raise exc.at(Place(namespace=item.namespace, key=item.key)) from None

    def open(self, item: StoredItem) -> StoredItem:
        """``item`` as stored, opened at its namespace and key (or :class:`CorruptData`)."""
        where = Place(namespace=item.namespace, key=item.key)
        envelope = envelope_of(item.value)
        try:
            if envelope is None:
                self.ring.open(codec.Typed("json", b""), item_place(item.namespace, item.key))
                return item  # plaintext under allow_plaintext: logged and counted by the ring
            opened = self.ring.open(envelope, item_place(item.namespace, item.key))
            if opened.tag != ITEM_TAG:
                raise CorruptData(reason=f"its sealed payload is a {opened.tag!r}, not an item")
            value, vectors = codec.unpack_fields(opened.data, 2)
        except CorruptData as exc:
            raise exc.at(where) from None
        except Exception:  # a payload that opened but is not an item's: not state
            reason = "its sealed payload is not a store item"
            raise CorruptData(reason=reason, place=where) from None
        return replace(
            item,
            value=decode_value(value, item.namespace, item.key),
            vectors=[Vector(str(p), str(d), bytes(b)) for p, d, b in vectors],
        )

    # -- the port ---------------------------------------------------------------------------

    def get(
        self, keys: list[ItemKey], refresh: list[bool], now_ms: int, vectors: bool = False
    ) -> Op[list[StoredItem | None]]:
        found = yield from self.inner.get(keys, refresh, now_ms, False)
        return [None if item is None else self.open(item) for item in found]

    def put(
        self,
        items: list[StoredItem],
        deletes: list[ItemKey],
        now_ms: int,
        tombstones: bool = False,
    ) -> Op[None]:
        sealed = [self.seal(item) for item in items]
        yield from self.inner.put(sealed, deletes, now_ms, tombstones)

    def adopt(self, items: list[StoredItem], now_ms: int) -> Op[None]:
        """A fallback's items copied in (``fallback=``): sealed like any other write."""
        yield from self.inner.adopt([self.seal(item) for item in items], now_ms)

    def search(self, query: SearchQuery) -> Op[list[StoredItem]]:
        if not query.conditions and query.vector is None:
            page = yield from self.inner.search(query)
            return [self.open(item) for item in page]
        if query.limit == 0:
            return []
        candidates = yield from self.scan(query.prefix, query.now_ms)
        page = rank(candidates, query)
        if query.refresh and page:  # the TTL of what is returned only, as the backends do
            keys = [(item.namespace, item.key) for item in page]
            fresh = yield from self.inner.get(keys, [True] * len(keys), query.now_ms, False)
            for item, now in zip(page, fresh, strict=True):
                if now is not None:
                    item.expires_ms = now.expires_ms
        return page

    def scan(self, prefix: Namespace, now: int) -> Op[list[StoredItem]]:
        """Every live item under ``prefix``, opened."""
        found: list[StoredItem] = []
        for raw in (yield from self.scan_raw(prefix, now)):
            found.append(self.open(raw))
        return found

    def scan_raw(self, prefix: Namespace, now: int) -> Op[list[StoredItem]]:
        """Every live item under ``prefix`` as stored (newest first), page by page."""
        found: list[StoredItem] = []
        while True:
            query = SearchQuery(prefix, (), SCAN_PAGE, len(found), refresh=False, now_ms=now)
            page = yield from self.inner.search(query)
            found += page
            if len(page) < SCAN_PAGE:
                return found


@dataclass
class RekeyCounts:
    """What :func:`rekey` found and did: items ``scanned``, the key id each was under
    before (``by_key_id``; :data:`PLAINTEXT` for items not sealed), how many were under
    another key than the current one (``stale``) and how many were ``rewritten`` (0 on a dry
    run)."""

    current: str
    scanned: int = 0
    stale: int = 0
    rewritten: int = 0
    by_key_id: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "current": self.current,
            "scanned": self.scanned,
            "stale": self.stale,
            "rewritten": self.rewritten,
            "by_key_id": dict(self.by_key_id),
        }


def rekey(port: SealedStorePort, dry_run: bool = False) -> Op[RekeyCounts]:
    """Every item under an older key id (or in plaintext, when the ring allows plaintext)
    written again under the current key: same namespace, key, ``created_at``, ``updated_at``
    and expiry; verified by reading it back. Page by page, so a run stopped halfway is
    resumed by running again (current items are skipped). An item that does not open (a key
    the ring lacks, tampered, plaintext not allowed) stops the run with its
    :class:`CorruptData`, nothing of it rewritten."""
    ring = port.ring
    counts = RekeyCounts(current=ring.current)
    offset = 0
    while True:
        now = now_ms()
        query = SearchQuery(
            prefix=(), conditions=(), limit=SCAN_PAGE, offset=offset, refresh=False, now_ms=now
        )
        page = yield from port.inner.search(query)
        offset += len(page)
        stale: list[StoredItem] = []
        for raw in page:
            key_id = port.key_id(raw)
            counts.scanned += 1
            counts.by_key_id[key_id] = counts.by_key_id.get(key_id, 0) + 1
            if key_id != ring.current:
                stale.append(port.open(raw))  # refuses what does not open, before any write
        counts.stale += len(stale)
        if stale and not dry_run:
            yield from _rewrite(port, stale, now)
            counts.rewritten += len(stale)
        if len(page) < SCAN_PAGE:
            return counts


def _rewrite(port: SealedStorePort, items: list[StoredItem], now: int) -> Op[None]:
    """``items`` (opened) written again under the current key, then read back. An item
    changed since it was read (a newer ``updated_at``: written under the current key by its
    writer) is left as it is."""
    keys = [(i.namespace, i.key) for i in items]
    again = yield from port.inner.get(keys, [False] * len(keys), now, False)
    todo = [
        item
        for item, found in zip(items, again, strict=True)
        if found is not None and found.updated_us == item.updated_us
    ]
    if not todo:
        return
    yield from port.put(todo, [], now)
    keys = [(i.namespace, i.key) for i in todo]
    back = yield from port.inner.get(keys, [False] * len(keys), now, False)
    for item, stored in zip(todo, back, strict=True):
        if stored is None:
            continue  # deleted or expired meanwhile: nothing left to rekey
        if port.key_id(stored) != port.ring.current or (
            stored.updated_us == item.updated_us and port.open(stored).value != item.value
        ):
            raise GraphkeepError(
                f"rekey: item {item.key!r} in namespace {item.namespace!r} did not read back"
                " under the current key; nothing else was rewritten after it"
            )


def sealed(port: Any, ring: KeyRing | None) -> Any:
    """``port`` sealed with ``ring`` (``port`` itself without one)."""
    return port if ring is None else SealedStorePort(port, ring)
