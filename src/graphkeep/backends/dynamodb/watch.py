"""``saver.watch`` on DynamoDB: a thread's commits by checkpoint id, polled with one Query.

``commits`` / ``newest_commit``: one consistent Query of one namespace's heads above an id,
keys only (a filter on ``h`` drops the writes); an idle poll reads no item and costs one read
unit. ``checkpoint_ns=None`` reads the thread's whole ``c#`` range per poll (the namespace
precedes the id in the sort key) and sorts it here.

Watch uses the shared poller (:mod:`graphkeep.checkpoint.watch`), not DynamoDB Streams: a stream
must be enabled on the table (a table-level change teams that own their schema would have to
make), each watcher would need its own shard discovery and shard iterators (``GetRecords``
polling too, at most five reads per shard per second shared by every consumer, records up to
24 h), and a stream shows every item change of the table, not one thread's commits. Polling
a Query is exact (strongly consistent, ordered by checkpoint id, resumable from any id) and
an idle watcher costs one read unit per poll, backing off to ``max_poll_interval``.
See docs/architecture.md.
"""

from __future__ import annotations

from typing import Any

from graphkeep.backends.dynamodb import keys
from graphkeep.backends.dynamodb.encoding import (
    CheckpointTable,
    collections_of,
    group_indexes,
    head_names,
    names_of,
    summary_of,
)
from graphkeep.backends.dynamodb.items import (
    EXP,
    GROUP,
    HEAD,
    RAW,
    SK,
    SOURCE,
    VIS,
    head_hidden,
    hidden,
    s,
)
from graphkeep.backends.dynamodb.reads import LATEST_FIRST_PAGE
from graphkeep.backends.dynamodb.requests import query_all, query_page
from graphkeep.checkpoint.records import CheckpointKeys, Link
from graphkeep.port import Op


def _heads(
    t: CheckpointTable,
    pk: str,
    *,
    between: tuple[str, str] | None,
    forward: bool,
    limit: int | None,
    summaries: bool = False,
) -> dict[str, Any]:
    """A consistent Query for checkpoint heads only, returning their keys (no payload);
    ``summaries``: with the head summary and source too (the same items and read units:
    DynamoDB bills the items a Query reads, whatever it projects).

    Heads are the ``c#`` items carrying ``h``; a write of the same range lacks it, so
    the filter drops writes (they still count towards ``Limit`` and the read units:
    DynamoDB filters after reading).
    """
    projection = [RAW, VIS, EXP, *([HEAD, SOURCE] if summaries else [])]
    if between is None:
        params = t.query(pk, begins="c#", forward=forward, limit=limit, projection=projection)
    else:
        params = t.query(pk, between=between, forward=forward, limit=limit, projection=projection)
    params["ExpressionAttributeNames"]["#h"] = HEAD
    params["FilterExpression"] = "attribute_exists(#h)"
    return params


def _commit_of(item: dict[str, Any], now: float) -> tuple[str, str] | None:
    """``(ns, checkpoint_id)`` of a head item; None when its TTL hides it."""
    if head_hidden(item, now):
        return None
    names = names_of(item, keys.parse_sk(s(item, SK)))
    return names.ns, names.checkpoint_id


def recent_links(
    t: CheckpointTable, thread_id: str, above: str | None, limit: int
) -> Op[list[Link]]:
    """:func:`commits` of every namespace (``ns=None``) with each head's
    :class:`~graphkeep.checkpoint.records.Link`: the same Query of the thread's ``c#``
    range, projecting the head summary and source as well."""
    now = t.clock()
    pk, _ = t.thread_key(thread_id)
    items = yield from query_all(
        _heads(t, pk, between=None, forward=True, limit=None, summaries=True)
    )
    found = []
    for item in items:
        commit = _commit_of(item, now)
        if commit is not None and (above is None or commit[1] > above):
            found.append(summary_of(commit[0], commit[1], item).link())
    found.sort(key=lambda link: (link.checkpoint_id, link.ns))
    return found[:limit]


def _all_commits(t: CheckpointTable, pk: str, now: float) -> Op[list[tuple[str, str]]]:
    """Every visible head of the thread, any namespace, ascending by (id, namespace)."""
    items = yield from query_all(_heads(t, pk, between=None, forward=True, limit=None))
    found = [c for c in (_commit_of(i, now) for i in items) if c is not None]
    found.sort(key=lambda c: (c[1], c[0]))
    return found


def commits(
    t: CheckpointTable, thread_id: str, ns: str | None, above: str | None, limit: int
) -> Op[list[tuple[str, str]]]:
    """The thread's heads with an id above ``above``, ascending, at most ``limit``.

    One namespace: one consistent Query ``BETWEEN c#<ns>#<above>#~ AND c#<ns>$`` (just
    past ``above`` and its writes, up to the namespace's end) returning keys only,
    followed through ``LastEvaluatedKey`` only while fewer than ``limit`` heads were
    found. Nothing new costs one Query that reads no item (one read unit).

    ``ns=None``: the sort key puts the namespace before the id, so ids of different
    namespaces interleave and no key range is "every id above X". The whole ``c#``
    range of the thread is read (keys only, every page) and sorted by (id, namespace)
    here; the first ``limit`` above ``above`` are returned. Paging on the id is then
    exact: the poller asks again above the last id of a full page and this re-reads and
    re-sorts. The cost grows with the thread's checkpoint items (heads and writes, as
    billed by size), so watching one namespace is the cheap form on long threads.
    """
    now = t.clock()
    pk, _ = t.thread_key(thread_id)
    if ns is None:
        everything = yield from _all_commits(t, pk, now)
        return [c for c in everything if above is None or c[1] > above][:limit]
    ns_part = keys.part(ns)[0]
    low = (
        keys.namespace_prefix(ns_part)
        if above is None
        else keys.through_bound(ns_part, keys.part(above)[0])
    )
    params = _heads(t, pk, between=(low, keys.namespace_end(ns_part)), forward=True, limit=None)
    found: list[tuple[str, str]] = []
    start: dict[str, Any] | None = None
    while True:
        page = yield from query_page(params, start)
        for item in page.get("Items", []):
            commit = _commit_of(item, now)
            if commit is not None and (above is None or commit[1] > above):
                found.append(commit)
        start = page.get("LastEvaluatedKey")
        if not start or len(found) >= limit:
            break
    found.sort(key=lambda c: c[1])  # key order is id order unless an id was shortened
    return found[:limit]


def newest_commit(t: CheckpointTable, thread_id: str, ns: str | None) -> Op[str | None]:
    """The highest visible checkpoint id of the thread (in ``ns``, or any when None).

    One namespace: a descending Query of the namespace's heads (small first page: the
    newest checkpoint's writes come before its head), paged only until a head shows up.
    ``ns=None`` reads the thread's ``c#`` range like :meth:`commits`.
    """
    now = t.clock()
    pk, _ = t.thread_key(thread_id)
    if ns is None:
        everything = yield from _all_commits(t, pk, now)
        return max((c[1] for c in everything), default=None)
    ns_part = keys.part(ns)[0]
    bounds = (keys.namespace_prefix(ns_part), keys.namespace_end(ns_part))
    params = _heads(t, pk, between=bounds, forward=False, limit=LATEST_FIRST_PAGE)
    start: dict[str, Any] | None = None
    newest: str | None = None
    while True:
        page = yield from query_page(params, start)
        for item in page.get("Items", []):
            commit = _commit_of(item, now)
            if commit is None:
                continue
            if newest is None and keys.HASH_MARK not in s(item, SK):
                return commit[1]
            # a shortened id sorts by its head only: then every head is compared
            newest = commit[1] if newest is None else max(newest, commit[1])
        start = page.get("LastEvaluatedKey")
        if not start:
            return newest


def write_indexes(t: CheckpointTable, thread_id: str, ns: str, checkpoint_id: str) -> Op[list[int]]:
    """The ``idx`` of the checkpoint's pending writes, from their sort keys
    (``c#<ns>#<id>#w#<task>#<idx>``): one consistent Query of the checkpoint's range,
    projecting the sort key only (a health scan's interrupt check)."""
    pk, _ = t.thread_key(thread_id)
    begins = keys.head_sk(keys.part(ns)[0], keys.part(checkpoint_id)[0])
    items = yield from query_all(t.query(pk, begins=begins, projection=[GROUP]))
    found: list[int] = []
    for item in items:
        parsed = keys.parse_sk(s(item, SK))
        if parsed.kind == "w":
            found += [parsed.idx, *group_indexes(item)]
    return found


def checkpoint_keys(
    t: CheckpointTable, thread_id: str, ns: str, checkpoint_id: str, newer: bool
) -> Op[list[CheckpointKeys]]:
    """The checkpoint's head and writes (and, when ``newer``, every newer checkpoint's) from
    their sort keys: one consistent Query of ``c#<ns>#<id>#`` (or ``BETWEEN`` it and the
    namespace's end), projecting keys, raw names and expiry only. Expired items are left
    out as ``load`` leaves them out."""
    now = t.clock()
    pk, _ = t.thread_key(thread_id)
    ns_part = keys.part(ns)[0]
    first = keys.head_sk(ns_part, keys.part(checkpoint_id)[0])
    projection = [RAW, VIS, EXP, GROUP]
    if newer:
        params = t.query(pk, between=(first, keys.namespace_end(ns_part)), projection=projection)
    else:
        params = t.query(pk, begins=first, projection=projection)
    items = yield from query_all(params)
    found: list[CheckpointKeys] = []
    for coll in collections_of(items).values():
        if coll.head is None or head_hidden(coll.head, now):
            continue
        cid = head_names(coll.head).checkpoint_id
        if cid < checkpoint_id or (cid != checkpoint_id and not newer):
            continue  # a shortened id sorts by its head only
        indexes = tuple(
            idx
            for w in coll.writes
            if not hidden(w, now)
            for idx in (keys.parse_sk(s(w, SK)).idx, *group_indexes(w))
        )
        found.append(CheckpointKeys(cid, indexes))
    found.sort(key=lambda k: k.checkpoint_id)
    return found
