"""How checkpoint records become items of the table and are read back.

:class:`CheckpointTable` is one checkpoint port's view of its table: its settings (key prefix,
TTL, compression, clock), partition keys, the head / write / blob items it writes and the
records it decodes, and the shapes of its Queries and Scans. Beside it the decoding helpers:
the raw names behind shortened keys (:func:`names_of`), head summaries (:func:`summary_of`)
and heads grouped with their writes (:class:`Collection`, :class:`Descending`,
:func:`collections_of`). Key layout in :mod:`.keys`, attributes in :mod:`.items`; see
docs/architecture.md.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from graphkeep.backends.dynamodb import keys
from graphkeep.backends.dynamodb.items import (
    EXP,
    GROUP,
    HEAD,
    INLINE,
    INLINE_TOTAL_BYTES,
    INLINE_VALUE_BYTES,
    LIST,
    PK,
    RAW,
    RUN,
    SK,
    SMALL_COMPRESS_MIN_BYTES,
    SOURCE,
    VIS,
    B,
    Encoded,
    N,
    S,
    attach_payload,
    b,
    compress_level,
    read_payload,
    s,
)
from graphkeep.backends.dynamodb.requests import query_params
from graphkeep.backends.dynamodb.schema import check_table_name
from graphkeep.checkpoint.ids import unique_version
from graphkeep.checkpoint.lists import ELEMENT_CHANNEL, is_manifest
from graphkeep.checkpoint.records import (
    BlobRecord,
    CheckpointRecord,
    Summary,
    Typed,
    WriteRecord,
)
from graphkeep.errors import GraphkeepError
from graphkeep.port import codec

# --------------------------------------------------------------------------- inline values


def attach_inline(head: dict[str, Any], blobs: Iterable[BlobRecord]) -> None:
    """Copy the small values of ``blobs`` (a put's new channel values, list elements
    excluded) into ``head`` (``iv``): a read of this checkpoint finds them there.

    The value items are written all the same (other heads name them too, and every other
    path reads them there); the copy is only ever read with its head, so it can neither
    arrive before the head nor outlive it. Only values whose version is unique to this put
    (:func:`~graphkeep.checkpoint.ids.unique_version`) are copied: a version a caller chose
    may be stored again with another value, which every checkpoint naming it then reads
    (LangGraph's semantics), and a copy would go on answering the first."""
    entries: list[list[Any]] = []
    used = 0
    for blob in blobs:
        if blob.channel == ELEMENT_CHANNEL or not unique_version(blob.version):
            continue
        packed = codec.pack_typed(blob.value)
        if len(packed) > INLINE_VALUE_BYTES or used + len(packed) > INLINE_TOTAL_BYTES:
            continue
        entries.append([blob.channel, blob.version, packed])
        used += len(packed)
    if entries:
        head[INLINE] = B(codec.packb(entries))


def inline_values(head: dict[str, Any]) -> dict[tuple[str, str], bytes]:
    """The values a head carries a copy of (``iv``), by (channel, version)."""
    if INLINE not in head:
        return {}
    entries = codec.unpackb(b(head, INLINE))
    try:
        return {(str(ch), str(version)): bytes(packed) for ch, version, packed in entries}
    except (ValueError, TypeError) as exc:
        raise codec.framing_error(exc) from None


# --------------------------------------------------------------------------- decoding


@dataclass(slots=True)
class Collection:
    """A checkpoint head with its writes, as read (``ns``/``checkpoint_id`` key-escaped)."""

    pk: str
    ns: str
    checkpoint_id: str
    head: dict[str, Any] | None
    writes: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Names:
    """The raw names behind an item's keys."""

    thread: str
    ns: str
    checkpoint_id: str = ""
    task_id: str = ""
    channel: str = ""
    version: str = ""


def names_of(item: dict[str, Any], parsed: keys.ParsedKey) -> Names:
    if RAW in item:
        raw = codec.unpackb(b(item, RAW))
        if parsed.kind == "c":
            return Names(raw[0], raw[1], checkpoint_id=raw[2])
        if parsed.kind == "w":
            return Names(raw[0], raw[1], checkpoint_id=raw[2], task_id=raw[3])
        if parsed.kind == "b":
            return Names(raw[0], raw[1], channel=raw[2], version=raw[3])
    thread = keys.decode(keys.thread_part_of(s(item, PK)))
    parts = [parsed.ns, parsed.checkpoint_id, parsed.task_id, parsed.channel, parsed.version]
    decoded = [keys.decode(p) for p in parts]
    if thread is None or any(d is None for d in decoded):
        raise GraphkeepError(f"item {s(item, SK)!r} has a shortened key but no raw names")
    ns, checkpoint_id, task_id, channel, version = (d or "" for d in decoded)
    return Names(thread, ns, checkpoint_id, task_id, channel, version)


def head_names(head: dict[str, Any]) -> Names:
    """The raw names of a head item."""
    return names_of(head, keys.parse_sk(s(head, SK)))


def summary_of(ns: str, checkpoint_id: str, head: dict[str, Any]) -> Summary:
    parent, versions, present, needs, run_id = codec.unpack_fields(b(head, HEAD), 5)
    source = s(head, SOURCE) if SOURCE in head else None
    return Summary(
        ns, checkpoint_id, parent or None, versions, present, needs, run_id or None, source
    )


def pack_head(record: CheckpointRecord) -> bytes:
    return codec.packb(
        [
            record.parent_id or "",
            record.versions,
            record.present,
            record.needs_history,
            record.run_id or "",
        ]
    )


def _plain(*tags: str) -> bool:
    """Worth compressing: encrypted payloads are not (LangGraph's ``EncryptedSerializer``,
    tag "<inner>+<cipher>", and graphkeep.encryption's envelopes, compressed before they
    were sealed: :func:`graphkeep.checkpoint.saver.squeezer`). Items written before this
    rule may hold compressed envelopes (``z``): they read as every compressed item does."""
    return not any("+" in tag or tag.startswith(codec.SEALED_TAG_PREFIX) for tag in tags)


class Descending:
    """Groups a descending stream of checkpoint items (writes come just before their head)."""

    def __init__(self) -> None:
        self.ident: tuple[str, str, str] | None = None
        self.writes: list[dict[str, Any]] = []

    def feed(self, pk: str, item: dict[str, Any]) -> Collection | None:
        parsed = keys.parse_sk(s(item, SK))
        ident = (pk, parsed.ns, parsed.checkpoint_id)
        if parsed.kind == "w":
            if ident != self.ident:
                self.ident, self.writes = ident, []
            self.writes.append(item)
        elif parsed.kind == "c":
            writes = self.writes if ident == self.ident else []
            self.ident, self.writes = None, []
            return Collection(pk, parsed.ns, parsed.checkpoint_id, item, writes)
        return None


def collections_of(items: Iterable[dict[str, Any]]) -> dict[tuple[str, str, str], Collection]:
    """Heads and writes grouped per checkpoint, in any order (writes without a head kept)."""
    found: dict[tuple[str, str, str], Collection] = {}
    for item in items:
        parsed = keys.parse_sk(s(item, SK))
        if parsed.kind not in ("c", "w"):
            continue
        pk = s(item, PK)
        ident = (pk, parsed.ns, parsed.checkpoint_id)
        coll = found.get(ident)
        if coll is None:
            coll = found[ident] = Collection(pk, parsed.ns, parsed.checkpoint_id, None)
        if parsed.kind == "c":
            coll.head = item
        else:
            coll.writes.append(item)
    return found


def record_of(
    names: Names, summary: Summary, head: dict[str, Any], chunks: dict[str, dict[str, Any]]
) -> CheckpointRecord:
    """The checkpoint record of a head item (``chunks``: chunk items by sort key)."""
    ctag, cdata, mtag, mdata = codec.unpack_fields(read_payload(head, chunks), 4)
    return CheckpointRecord(
        thread_id=names.thread,
        ns=names.ns,
        checkpoint_id=names.checkpoint_id,
        parent_id=summary.parent_id,
        versions=summary.versions,
        present=summary.present,
        needs_history=summary.needs_history,
        run_id=summary.run_id,
        checkpoint=Typed(ctag, cdata),
        metadata=Typed(mtag, mdata),
        source=summary.source,
    )


def write_records_of(item: dict[str, Any], chunks: dict[str, dict[str, Any]]) -> list[WriteRecord]:
    """The pending write records of a write item: its own, then those of its group (``wg``:
    several regular writes of one ``put_writes`` call in one item, see :mod:`.writes`)."""
    parsed = keys.parse_sk(s(item, SK))
    names = names_of(item, parsed)
    if GROUP not in item:
        channel, task_path, tag, data = codec.unpack_fields(read_payload(item, chunks), 4)
        return [WriteRecord(names.task_id, parsed.idx, channel, task_path, Typed(tag, data))]
    channel, task_path, tag, data, rest = codec.unpack_fields(read_payload(item, chunks), 5)
    found = [WriteRecord(names.task_id, parsed.idx, channel, task_path, Typed(tag, data))]
    for idx, ch, path, tg, dt in rest:
        found.append(WriteRecord(names.task_id, idx, ch, path, Typed(tg, dt)))
    return found


def group_indexes(item: dict[str, Any]) -> list[int]:
    """The ``idx`` of the writes a write item holds beyond its own (its group's, ``wg``)."""
    if GROUP not in item:
        return []
    return [int(i) for i in codec.unpackb(b(item, GROUP))]


def writes_of(
    items: Iterable[dict[str, Any]], chunks: dict[str, dict[str, Any]]
) -> list[WriteRecord]:
    """The pending write records of write items, one per (task, idx): a write both in a
    group and in an item of its own (two ``put_writes`` calls of one task whose first
    regular writes differ) reads as the one whose item sorts first."""
    found: dict[tuple[str, int], WriteRecord] = {}
    for item in items:
        for record in write_records_of(item, chunks):
            found.setdefault((record.task_id, record.idx), record)
    return list(found.values())


def blob_sk(ns: str, channel: str, version: str) -> tuple[str, bool]:
    """A channel value's sort key, and whether a component had to be shortened."""
    ns_part, a = keys.part(ns)
    ch_part, b_ = keys.part(channel)
    ver_part, c = keys.part(version)
    return keys.blob_sk(ns_part, ch_part, ver_part), a or b_ or c


def blob_sks(
    idents: Iterable[tuple[str, str, str]],
) -> dict[str, tuple[str, str, str]]:
    """:func:`blob_sk` of many (ns, channel, version), by sort key: each namespace and
    channel escaped once (a list's elements are many versions of one channel)."""
    heads: dict[tuple[str, str], str] = {}
    found: dict[str, tuple[str, str, str]] = {}
    for ident in idents:
        ns, channel, version = ident
        head = heads.get((ns, channel))
        if head is None:
            head = heads[(ns, channel)] = keys.blob_sk(keys.part(ns)[0], keys.part(channel)[0], "")
        found[head + keys.part(version)[0]] = ident
    return found


# --------------------------------------------------------------------------- the table


class CheckpointTable:
    """One checkpoint port's table: settings, keys, item encoding and Query shapes."""

    def __init__(
        self,
        table: str,
        *,
        key_prefix: str,
        ttl: float | None,
        compress: bool | int,
        clock: Callable[[], float],
    ) -> None:
        self.table = check_table_name(table)
        self.key_prefix = key_prefix
        self.prefix = keys.check_prefix(key_prefix)
        self.ttl = int(math.ceil(ttl)) if ttl else None
        self.slack = max(1, self.ttl // 2) if self.ttl else 0
        self.level = compress_level(compress)
        self.clock = clock

    # -- keys -------------------------------------------------------------------------

    def thread_key(self, thread_id: str) -> tuple[str, bool]:
        part, shortened = keys.part(thread_id, keys.THREAD_LIMIT)
        return keys.partition(self.prefix, part), shortened

    def run_key(self, run_id: str) -> str:
        return keys.partition(self.prefix, keys.part(run_id, keys.THREAD_LIMIT)[0])

    # -- expiry attributes --------------------------------------------------------------

    def exp(self, now: float) -> int:
        """``exp`` of an item written at ``now``: ttl plus the slack of one refresh period."""
        assert self.ttl is not None
        return math.ceil(now + self.ttl + self.slack)

    def vis(self, now: float) -> int:
        """``vis`` of a head written at ``now``: visible for ttl."""
        assert self.ttl is not None
        return math.ceil(now + self.ttl)

    def _stamp(self, item: dict[str, Any], now: float, *, head: bool = False) -> None:
        if self.ttl:
            item[EXP] = N(self.exp(now))
            if head:
                item[VIS] = N(self.vis(now))

    # -- items --------------------------------------------------------------------------

    def _item(self, pk: str, sk: str, raw: list[str] | None) -> dict[str, Any]:
        item: dict[str, Any] = {PK: S(pk), SK: S(sk)}
        if raw is not None:
            item[RAW] = B(codec.packb(raw))
        return item

    def head(self, record: CheckpointRecord, now: float) -> Encoded:
        """The head item of a checkpoint (and its chunks)."""
        pk, short_thread = self.thread_key(record.thread_id)
        ns, short_ns = keys.part(record.ns)
        cid, short_id = keys.part(record.checkpoint_id)
        raw = [record.thread_id, record.ns, record.checkpoint_id]
        item = self._item(
            pk, keys.head_sk(ns, cid), raw if short_thread or short_ns or short_id else None
        )
        item[HEAD] = B(pack_head(record))
        if record.run_id:
            item[RUN] = S(self.run_key(record.run_id))
        if record.source:
            item[SOURCE] = S(record.source)
        self._stamp(item, now, head=True)
        checkpoint, metadata = record.checkpoint, record.metadata
        payload = codec.packb([checkpoint.tag, checkpoint.data, metadata.tag, metadata.data])
        return attach_payload(
            item,
            payload,
            level=self.level,
            compressible=_plain(record.checkpoint.tag, record.metadata.tag),
            min_bytes=SMALL_COMPRESS_MIN_BYTES,
        )

    def write(
        self,
        thread_id: str,
        ns: str,
        checkpoint_id: str,
        write: WriteRecord,
        now: float,
        group: list[WriteRecord] | None = None,
    ) -> Encoded:
        """The item of one pending write (and its chunks); with ``group``, the item of a write
        group: ``write`` (the first) keys it, the records of ``group`` follow in its payload
        and their ``idx`` in ``wg`` (:func:`write_records_of` reads them back)."""
        pk, short_thread = self.thread_key(thread_id)
        ns_part, short_ns = keys.part(ns)
        cid, short_id = keys.part(checkpoint_id)
        task, short_task = keys.part(write.task_id)
        shortened = short_thread or short_ns or short_id or short_task
        item = self._item(
            pk,
            keys.write_sk(ns_part, cid, task, write.idx),
            [thread_id, ns, checkpoint_id, write.task_id] if shortened else None,
        )
        self._stamp(item, now)
        fields: list[Any] = [write.channel, write.task_path, write.value.tag, write.value.data]
        tags = [write.value.tag]
        if group:
            item[GROUP] = B(codec.packb([w.idx for w in group]))
            fields.append(
                [[w.idx, w.channel, w.task_path, w.value.tag, w.value.data] for w in group]
            )
            tags += [w.value.tag for w in group]
        return attach_payload(
            item,
            codec.packb(fields),
            level=self.level,
            compressible=_plain(*tags),
            min_bytes=SMALL_COMPRESS_MIN_BYTES,
        )

    def blob(self, thread_id: str, ns: str, blob: BlobRecord, now: float) -> Encoded:
        """The item of one channel value (and its chunks); list manifests carry ``ls``."""
        pk, short_thread = self.thread_key(thread_id)
        sk, short = blob_sk(ns, blob.channel, blob.version)
        item = self._item(
            pk, sk, [thread_id, ns, blob.channel, blob.version] if short or short_thread else None
        )
        self._stamp(item, now)
        if is_manifest(blob.value):
            item[LIST] = N(1)
        payload = codec.pack_typed(blob.value)
        return attach_payload(
            item,
            payload,
            level=self.level,
            compressible=_plain(blob.value.tag),
            min_bytes=SMALL_COMPRESS_MIN_BYTES,
        )

    # -- request shapes -----------------------------------------------------------------

    def query(
        self,
        pk: str,
        *,
        begins: str | None = None,
        between: tuple[str, str] | None = None,
        forward: bool = True,
        limit: int | None = None,
        projection: Iterable[str] | None = None,
    ) -> dict[str, Any]:
        """A consistent Query of one partition (:func:`.requests.query_params`)."""
        return query_params(
            self.table,
            pk,
            begins=begins,
            between=between,
            forward=forward,
            limit=limit,
            projection=projection,
        )

    def scan(self, projection: Iterable[str] | None = None) -> dict[str, Any]:
        """A consistent Scan of this prefix' checkpoint items (heads and writes)."""
        names = {"#pk": PK, "#sk": SK}
        params: dict[str, Any] = {
            "_op": "scan",
            "TableName": self.table,
            "ConsistentRead": True,
            "FilterExpression": "begins_with(#pk, :p) AND begins_with(#sk, :c)",
            "ExpressionAttributeValues": {
                ":p": S(keys.partition_prefix(self.prefix)),
                ":c": S("c#"),
            },
        }
        if projection is not None:
            wanted = list(dict.fromkeys([PK, SK, *projection]))
            names.update({f"#p{i}": a for i, a in enumerate(wanted)})
            params["ProjectionExpression"] = ", ".join(f"#p{i}" for i in range(len(wanted)))
        params["ExpressionAttributeNames"] = names
        return params
