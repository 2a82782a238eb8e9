"""List elements in the table, and reading items of one partition by sort key.

Element sort keys (``lists.element_key``: 16 hex digits of epoch, 8 of sequence number, see
:mod:`graphkeep.checkpoint.lists`) of one (namespace, epoch) sort by sequence number, so a run
of them is one Query ``BETWEEN`` its first and last key; :func:`read_items` reads long runs
that way and everything else with BatchGetItem.

:class:`ElementCache`: the elements a port wrote (once the store acknowledged the put) or read,
in their stored form, by (partition, sort key). An element key names one content for good (a
key is never written with other bytes: :mod:`graphkeep.checkpoint.lists`), so a read needs from
the store only the elements it does not hold: a thread read or written here again reads its
new elements only, not its whole list (the W50 turn is one Query, not a Query of every element
at every step; the profile in issue 48's note). The head, which names the elements, is always
read strongly consistent from the store. Not used with a TTL (elements expire and the reads'
expiries feed the refresh bookkeeping); dropped per thread when this port deletes, prunes or
rewrites (``import_thread``: copy, rekey) the thread. See docs/architecture.md.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from collections.abc import Iterable
from typing import Any

from graphkeep.backends.dynamodb import keys
from graphkeep.backends.dynamodb.encoding import CheckpointTable
from graphkeep.backends.dynamodb.items import PK, SK, chunk_sks, key, s
from graphkeep.backends.dynamodb.requests import batch_get, get_items, query_all
from graphkeep.checkpoint.lists import ELEMENT_CHANNEL
from graphkeep.checkpoint.records import Typed
from graphkeep.port import Op

#: element keys (``lists.element_key``): 16 hex digits of epoch, 8 of sequence number
ELEMENT_KEY_LENGTH = 24
ELEMENT_SEQ_DIGITS = 8
#: elements of one epoch this far apart (in sequence numbers) are read by separate Queries;
#: closer ones by one Query over the whole span (reading a few unnamed items costs less
#: than another request: a Query is billed by the bytes it reads, not per item)
ELEMENT_GAP = 64
#: runs of fewer elements are read by exact key with BatchGetItem (100 keys a request,
#: pooled with the other keys), not by a Query each: a list written by many processes
#: (one epoch each) costs ceil(n / 100) requests, not one per process
ELEMENT_QUERY_MIN = 50
#: bytes of stored elements an :class:`ElementCache` holds (least recently used go first)
ELEMENT_CACHE_BYTES = 32 * 1024 * 1024
#: what an entry costs besides its bytes (keys, the record, the map's slot)
ELEMENT_ENTRY_BYTES = 200

_ELEMENT_SK = re.compile(
    re.escape(f"{keys.SEP}{keys.escape(ELEMENT_CHANNEL)}{keys.SEP}")
    + f"[0-9a-f]{{{ELEMENT_KEY_LENGTH}}}$"
)


def is_element_sk(sk: str) -> bool:
    """A list element's sort key: ``b#<ns>#__graphkeep.element__#<epoch><seq>``.

    Element keys are fixed-width lowercase hex and never shortened, so the elements of one
    (namespace, epoch) share a sort key prefix and sort by sequence number: a range.
    """
    return sk.startswith("b#") and _ELEMENT_SK.search(sk) is not None


def element_runs(sks: Iterable[str]) -> list[list[str]]:
    """Element sort keys grouped into sorted runs, each readable by one range Query.

    Keys of one (namespace, epoch) whose sequence numbers are at most :data:`ELEMENT_GAP`
    apart share a run (an append-only list is one run, whatever its length).
    """
    by_prefix: dict[str, list[tuple[int, str]]] = {}
    for sk in sks:
        prefix, seq = sk[:-ELEMENT_SEQ_DIGITS], int(sk[-ELEMENT_SEQ_DIGITS:], 16)
        by_prefix.setdefault(prefix, []).append((seq, sk))
    runs: list[list[str]] = []
    for entries in by_prefix.values():
        entries.sort()
        run = [entries[0][1]]
        for (before, _), (seq, sk) in zip(entries, entries[1:], strict=False):
            if seq - before > ELEMENT_GAP:
                runs.append(run)
                run = []
            run.append(sk)
        runs.append(run)
    return runs


def read_items(
    t: CheckpointTable, pk: str, sks: Iterable[str], *, projection: list[str] | None = None
) -> Op[dict[str, dict[str, Any]]]:
    """Items of one partition by sort key: long runs of list elements with one Query
    per range (:func:`element_runs`), everything else with BatchGetItem. Without
    ``projection`` the chunks of chunked items come too (one more BatchGetItem when
    there are any)."""
    wanted = dict.fromkeys(sks)
    others = [sk for sk in wanted if not is_element_sk(sk)]
    ranges: list[tuple[str, str]] = []
    for run in element_runs(sk for sk in wanted if is_element_sk(sk)):
        if len(run) < ELEMENT_QUERY_MIN:
            others += run
        else:
            ranges.append((run[0], run[-1]))
    found: dict[str, dict[str, Any]] = {}
    for low, high in ranges:
        params = t.query(pk, between=(low, high), projection=projection)
        items = yield from query_all(params)
        found.update((s(item, SK), item) for item in items if s(item, SK) in wanted)
    if others and projection is None:
        got = yield from get_items(t.table, {(pk, sk): None for sk in others})
        found.update((sk, item) for (_pk, sk), item in got.items())
    elif others and projection is not None:
        fields = [PK, SK, *projection]
        names = {f"#p{i}": name for i, name in enumerate(fields)}
        items = yield from batch_get(
            t.table,
            [key(pk, sk) for sk in others],
            projection=", ".join(names),
            names=names,
        )
        found.update((s(item, SK), item) for item in items)
    if projection is None:
        chunks = {
            (pk, sk): None for item in found.values() for sk in chunk_sks(item) if sk not in found
        }
        if chunks:
            got = yield from get_items(t.table, chunks)
            found.update((sk, item) for (_pk, sk), item in got.items())
    return found


class ElementCache:
    """List elements by (partition, sort key), as stored: a bounded, thread-safe LRU (see
    the module docs for why an element's bytes never go stale)."""

    def __init__(self, budget: int = ELEMENT_CACHE_BYTES) -> None:
        self.budget = budget
        self.used = 0
        self._items: OrderedDict[tuple[str, str], Typed] = OrderedDict()
        self._lock = threading.Lock()

    def get_many(self, pk: str, sks: Iterable[str]) -> dict[str, Typed]:
        """The elements held among ``sks`` (now the most recently used)."""
        found: dict[str, Typed] = {}
        with self._lock:
            for sk in sks:
                value = self._items.get((pk, sk))
                if value is not None:
                    self._items.move_to_end((pk, sk))
                    found[sk] = value
        return found

    def put(self, pk: str, sk: str, value: Typed) -> None:
        size = len(value.data) + ELEMENT_ENTRY_BYTES
        if size > self.budget:
            return
        with self._lock:
            old = self._items.pop((pk, sk), None)
            if old is not None:
                self.used -= len(old.data) + ELEMENT_ENTRY_BYTES
            self._items[(pk, sk)] = value
            self.used += size
            while self.used > self.budget:
                _, gone = self._items.popitem(last=False)
                self.used -= len(gone.data) + ELEMENT_ENTRY_BYTES

    def forget_thread(self, pk: str) -> None:
        with self._lock:
            for ident in [k for k in self._items if k[0] == pk]:
                self.used -= len(self._items.pop(ident).data) + ELEMENT_ENTRY_BYTES
