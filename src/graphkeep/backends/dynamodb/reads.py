"""The checkpoint port's reads: ``load``, ``list_page``, ``get_blobs`` and DeltaChannel ``chain``.

Requests (measured in the tests): ``load`` is 1 Query (strongly consistent; the newest head of
a namespace comes with its writes just before it in a descending Query of
:data:`LATEST_FIRST_PAGE` items; a newest checkpoint with more pending writes costs a second
Query narrowed to it) + 1 BatchGetItem for channel values and chunks, +1 BatchGetItem when a
channel value itself is chunked. A head written by ``put`` carries a copy of the small values
that put wrote (``iv``, :func:`.encoding.attach_inline`): those are taken from it, so a
checkpoint whose values are all such needs no BatchGetItem (without a TTL: with one, the value
items are read for their expiries). ``list_page`` reads Query pages of the namespace +
BatchGetItem for the page's values; ``list(None)`` Scans the table and ``list`` of a thread
without a namespace reads the whole thread partition. ``get_blobs`` reads list elements by
range (:mod:`.elements`), only those this port did not write or read before
(:class:`.elements.ElementCache`; without a TTL: with one, all). ``chain`` is the walk of
:mod:`.ancestors` + 1 BatchGetItem for the seed values. Reads hide heads past ``vis`` and
other items past ``exp``. See docs/architecture.md.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from graphkeep.backends.dynamodb import keys
from graphkeep.backends.dynamodb.elements import read_items
from graphkeep.backends.dynamodb.encoding import (
    Collection,
    Descending,
    blob_sk,
    blob_sks,
    collections_of,
    head_names,
    inline_values,
    record_of,
    summary_of,
    writes_of,
)
from graphkeep.backends.dynamodb.items import (
    EXP,
    SK,
    chunk_sks,
    has_payload,
    head_hidden,
    hidden,
    key,
    read_payload,
    s,
)
from graphkeep.backends.dynamodb.requests import get_items, query_all, query_page
from graphkeep.backends.dynamodb.ttl import ExpiringTable
from graphkeep.checkpoint.lists import ELEMENT_CHANNEL
from graphkeep.checkpoint.records import Chain, ListQuery, Loaded, Summary, Typed
from graphkeep.errors import CorruptData, Place
from graphkeep.port import Op, codec

#: items read by the first page of a "latest checkpoint" Query (head + up to 15 writes)
LATEST_FIRST_PAGE = 16
#: ``list`` pages of at least this many checkpoints read whole 1 MB Query pages
LIST_PAGE_FULL = 100


def load(t: ExpiringTable, thread_id: str, ns: str, checkpoint_id: str | None) -> Op[Loaded | None]:
    now = t.clock()
    pk, _ = t.thread_key(thread_id)
    ns_part = keys.part(ns)[0]
    coll: Collection | None
    if checkpoint_id:
        begins = keys.head_sk(ns_part, keys.part(checkpoint_id)[0])
        items = yield from query_all(t.query(pk, begins=begins))
        coll = next(iter(collections_of(items).values()), None)
    else:
        coll = yield from _latest(t, pk, ns_part)
    if coll is None or coll.head is None or head_hidden(coll.head, now):
        return None
    (loaded,) = yield from complete(t, [coll], now)
    if t.refresh_on_read:
        yield from t.refresh_loaded(pk, coll, loaded, now)
    return loaded


def _latest(t: ExpiringTable, pk: str, ns_part: str) -> Op[Collection | None]:
    """The newest head of a namespace with its writes, reading as little as possible.

    A descending Query yields the newest checkpoint's writes, then its head. The first
    page is small; if it ends inside that checkpoint, the next Query is narrowed to it.
    """
    broad = t.query(
        pk, begins=keys.namespace_prefix(ns_part), forward=False, limit=LATEST_FIRST_PAGE
    )
    params = broad
    grouping = Descending()
    start: dict[str, Any] | None = None
    narrowed = False
    while True:
        page = yield from query_page(params, start)
        items = page.get("Items", [])
        for item in items:
            found = grouping.feed(pk, item)
            if found is not None:
                return found
        start = page.get("LastEvaluatedKey")
        if start is None:
            if not narrowed or not items and grouping.ident is None:
                return None
            # the narrowed checkpoint has writes but no head: continue below it
            params, narrowed = broad, False
            start = key(pk, s((items or grouping.writes)[-1], SK))
            grouping = Descending()
            continue
        if grouping.ident is not None and not narrowed:
            _pk, ns, cid = grouping.ident
            params = t.query(pk, begins=keys.head_sk(ns, cid), forward=False)
            narrowed = True


def complete(t: ExpiringTable, colls: list[Collection], now: float) -> Op[list[Loaded]]:
    """Fetch the channel values and chunks the heads and writes refer to."""
    wanted: dict[tuple[str, str], None] = {}
    plans = []
    for coll in colls:
        assert coll.head is not None
        names = head_names(coll.head)
        summary = summary_of(names.ns, names.checkpoint_id, coll.head)
        # the values the head carries a copy of need no request (with a TTL they are read
        # as items: their expiries feed the refresh bookkeeping)
        try:
            inline = {} if t.ttl else inline_values(coll.head)
        except CorruptData as exc:
            raise exc.at(Place(names.thread, names.ns, names.checkpoint_id)) from None
        blob_sks: dict[str, str] = {}
        copies: dict[str, bytes] = {}
        for ch in summary.present:
            version = summary.versions.get(ch)
            if version is None:
                continue
            copy = inline.get((ch, version))
            if copy is not None:
                copies[ch] = copy
                continue
            blob_sks[ch] = blob_sk(names.ns, ch, version)[0]
            wanted[(coll.pk, blob_sks[ch])] = None
        for sk in chunk_sks(coll.head):
            wanted[(coll.pk, sk)] = None
        writes = [w for w in coll.writes if not hidden(w, now)]
        for write in writes:
            for sk in chunk_sks(write):
                wanted[(coll.pk, sk)] = None
        plans.append((coll, names, summary, blob_sks, copies, writes))
    got = yield from get_items(t.table, wanted)
    more: dict[tuple[str, str], None] = {}
    for (pk, _sk), item in got.items():
        for sk in chunk_sks(item):
            if (pk, sk) not in got:
                more[(pk, sk)] = None
    if more:
        got.update((yield from get_items(t.table, more)))
    by_pk: dict[str, dict[str, dict[str, Any]]] = {}
    for (pk, sk), item in got.items():
        by_pk.setdefault(pk, {})[sk] = item
    loaded = []
    for coll, names, summary, blob_sks, copies, writes in plans:
        assert coll.head is not None
        fetched = by_pk.get(coll.pk, {})
        values: dict[str, Typed] = {}
        place = Place(names.thread, names.ns, names.checkpoint_id)
        for ch, copy in copies.items():
            try:
                values[ch] = codec.unpack_typed(copy)
            except CorruptData as exc:
                raise exc.at(replace(place, channel=ch)) from None
        for ch, sk in blob_sks.items():
            item = fetched.get(sk)
            if item is not None and not hidden(item, now) and has_payload(item):
                try:
                    values[ch] = codec.unpack_typed(read_payload(item, fetched))
                except CorruptData as exc:
                    raise exc.at(replace(place, channel=ch)) from None
        try:
            record = record_of(names, summary, coll.head, fetched)
            pending = writes_of(writes, fetched)
        except CorruptData as exc:
            raise exc.at(place) from None
        loaded.append(Loaded(record, values, pending))
        if t.ttl:
            t.remember(coll, summary, fetched, blob_sks)
            for ch, sk in blob_sks.items():
                t.manifests.set(coll.pk, sk, values.get(ch))
    return loaded


# --------------------------------------------------------------------------- list


def list_page(
    t: ExpiringTable, query: ListQuery, cursor: Any, page_size: int
) -> Op[tuple[list[Loaded], Any]]:
    now = t.clock()
    if query.thread_id is None or query.ns is None:
        return (yield from _list_materialized(t, query, cursor, page_size, now))
    if query.checkpoint_id is not None:
        if query.before and query.checkpoint_id >= query.before:
            return [], None
        exact = yield from load(t, query.thread_id, query.ns, query.checkpoint_id)
        return ([exact] if exact else []), None
    pk, _ = t.thread_key(query.thread_id)
    ns_part = keys.part(query.ns)[0]
    upper = cursor if cursor is not None else query.before
    lower = keys.namespace_prefix(ns_part)
    limit = None if page_size >= LIST_PAGE_FULL else page_size * 4 + 4
    if upper:
        bound = keys.before_bound(ns_part, keys.part(upper)[0])
        params = t.query(pk, between=(lower, bound), forward=False, limit=limit)
    else:
        params = t.query(pk, begins=lower, forward=False, limit=limit)
    grouping = Descending()
    colls: list[Collection] = []
    start: dict[str, Any] | None = None
    exhausted = False
    while len(colls) < page_size:
        page = yield from query_page(params, start)
        for item in page.get("Items", []):
            found = grouping.feed(pk, item)
            if found is not None and found.head is not None:
                if not head_hidden(found.head, now):
                    colls.append(found)
                    if len(colls) >= page_size:
                        break
        start = page.get("LastEvaluatedKey")
        if start is None:
            exhausted = len(colls) < page_size or not page.get("Items")
            break
    loaded = yield from complete(t, colls, now)
    if exhausted or not loaded:
        return loaded, None
    return loaded, loaded[-1].record.checkpoint_id


def _list_materialized(
    t: ExpiringTable, query: ListQuery, cursor: Any, page_size: int, now: float
) -> Op[tuple[list[Loaded], Any]]:
    # A thread without a namespace reads the whole partition; no thread at all is a
    # Scan of the table (documented as costly). Both are sorted by id, newest first.
    if cursor is None:
        if query.thread_id is None:
            items = yield from query_all(t.scan())
        else:
            pk, _ = t.thread_key(query.thread_id)
            items = yield from query_all(t.query(pk, begins="c#"))
        entries: list[tuple[str, str, Collection]] = []
        for coll in collections_of(items).values():
            if coll.head is None or head_hidden(coll.head, now):
                continue
            names = head_names(coll.head)
            if query.before is not None and not names.checkpoint_id < query.before:
                continue
            if query.checkpoint_id is not None and names.checkpoint_id != query.checkpoint_id:
                continue
            if query.ns is not None and names.ns != query.ns:
                continue
            entries.append((names.checkpoint_id, names.ns, coll))
        entries.sort(key=lambda e: (e[0], e[1]), reverse=True)
        cursor = (entries, 0)
    entries, pos = cursor
    page = entries[pos : pos + page_size]
    loaded = yield from complete(t, [coll for _, _, coll in page], now)
    pos += len(page)
    return loaded, ((entries, pos) if pos < len(entries) else None)


# --------------------------------------------------------------------------- blobs by key


def get_blobs(
    t: ExpiringTable, thread_id: str, wanted_keys: list[tuple[str, str, str]]
) -> Op[dict[tuple[str, str, str], Typed]]:
    """Blobs by (ns, channel, version): list elements with one Query per range of
    their sort keys (an append-only list is one range), others with BatchGetItem,
    chunks reassembled and payloads decompressed as on every read."""
    now = t.clock()
    pk, _ = t.thread_key(thread_id)
    wanted = blob_sks(wanted_keys)
    # the elements written or read here before are not read again (:class:`.ElementCache`)
    held = {} if t.ttl else t.element_cache.get_many(pk, wanted)
    fetched = yield from read_items(t, pk, [sk for sk in wanted if sk not in held])
    found: dict[tuple[str, str, str], Typed] = {}
    for sk, ident in wanted.items():
        value = held.get(sk)
        if value is not None:
            found[ident] = value
            continue
        item = fetched.get(sk)
        if item is None or hidden(item, now) or not has_payload(item):
            continue
        found[ident] = codec.unpack_typed(read_payload(item, fetched))
        if t.ttl:
            t.remember_blob(pk, sk, item, found[ident])
        elif ident[1] == ELEMENT_CHANNEL and EXP not in item:
            t.element_cache.put(pk, sk, found[ident])
    return found


# --------------------------------------------------------------------------- DeltaChannel chain


def chain(
    t: ExpiringTable, thread_id: str, ns: str, checkpoint_id: str | None, channels: list[str]
) -> Op[Chain]:
    """The target and its ancestors until ``channels`` are seeded, with the ancestors'
    writes and the seed values (one BatchGetItem, +1 for chunks)."""
    now = t.clock()
    pk, _ = t.thread_key(thread_id)
    ns_part = keys.part(ns)[0]
    walked = yield from t.walked(pk, ns_part, checkpoint_id, set(channels), now)
    if walked.target is None:
        return Chain(None, [], {}, {})
    summaries: list[Summary] = []
    wanted: dict[tuple[str, str], None] = {}
    seeds: dict[tuple[str, str], str] = {}
    remaining = set(channels)
    for link in walked.ancestors:
        summary = link.summary
        summaries.append(summary)
        for ch in summary.present:
            if ch in remaining and ch in summary.versions:
                remaining.discard(ch)
                sk = blob_sk(ns, ch, summary.versions[ch])[0]
                seeds[(ch, summary.versions[ch])] = sk
                wanted[(pk, sk)] = None
        for write in link.coll.writes:
            for sk in chunk_sks(write):
                wanted[(pk, sk)] = None
    got = yield from get_items(t.table, wanted)
    more = {(pk, sk): None for (_, _), item in got.items() for sk in chunk_sks(item)}
    more = {k: None for k in more if k not in got}
    if more:
        got.update((yield from get_items(t.table, more)))
    fetched = {sk: item for (_pk, sk), item in got.items()}
    blobs: dict[tuple[str, str], Typed] = {}
    for ident, sk in seeds.items():
        item = fetched.get(sk)
        if item is not None and not hidden(item, now) and has_payload(item):
            blobs[ident] = codec.unpack_typed(read_payload(item, fetched))
            if t.ttl:
                t.remember_blob(pk, sk, item, blobs[ident])
    writes = {
        link.summary.checkpoint_id: writes_of(
            [w for w in link.coll.writes if not hidden(w, now)], fetched
        )
        for link in walked.ancestors
    }
    found = Chain(walked.target.summary.checkpoint_id, summaries, writes, blobs)
    if t.refresh_on_read and summaries:
        yield from t.refresh_chain(pk, ns, summaries, list(seeds.values()), now)
    return found
