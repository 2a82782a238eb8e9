"""The byte formats of a Redis thread's values and script replies: the fields ("ns NUL id
..."), heads, payloads and writes the scripts store, and how replies and feed entries read
back as records (the key layout is in :mod:`.checkpoint_scripts`)."""

from __future__ import annotations

import uuid
from dataclasses import replace
from typing import Any

from graphkeep.checkpoint.records import (
    CheckpointRecord,
    Loaded,
    Summary,
    Typed,
    WriteRecord,
)
from graphkeep.errors import CorruptData, Place
from graphkeep.port import codec

__all__ = [
    "SEP",
    "feed_id",
    "join_field",
    "loaded_of",
    "pack_head",
    "record_of",
    "split_index_member",
    "stream_entries",
    "summary_of",
    "text",
    "writes_of",
]

#: what separates the parts of a field or index member (names never contain NUL)
SEP = b"\x00"


def join_field(*parts: str) -> bytes:
    return SEP.join(p.encode() for p in parts)


def split_index_member(member: bytes, *, id_first: bool) -> tuple[str, str]:
    """``(ns, checkpoint_id)`` of an index member ("id\\0ns" in ``a``, "ns\\0id" in ``x``)."""
    left, _, right = member.partition(SEP)
    if id_first:
        return right.decode(), left.decode()
    return left.decode(), right.decode()


def text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def feed_id(field: Any, value: bytes) -> str:
    """A checkpoint id as the feed holds it: text (``c``) or a UUID's 16 bytes (``u``)."""
    if text(field) == "u":
        return str(uuid.UUID(bytes=value))
    return value.decode()


def stream_entries(raw: Any) -> list[tuple[str, str, str]]:
    """``(entry_id, ns, checkpoint_id)`` of an XREAD reply on one stream.

    redis-py answers ``[[key, [(id, {field: value}), ...]]]`` on RESP2 and
    ``{key: [[(id, {field: value}), ...]]}`` on RESP3 (some versions without the inner
    list); empty or None when nothing came.
    """
    if not raw:
        return []
    streams = list(raw.values()) if isinstance(raw, dict) else [item[1] for item in raw]
    out = []
    for entries in streams:
        if entries and isinstance(entries[0], list | tuple) and entries[0]:
            if isinstance(entries[0][0], list | tuple):  # wrapped once more
                entries = [entry for part in entries for entry in part]
        for entry_id, fields in entries:
            if not isinstance(fields, dict):  # a flat [field, value, ...] list
                fields = dict(zip(fields[::2], fields[1::2], strict=True))
            values = {text(k): v for k, v in fields.items()}
            ns = text(values.get("n", b""))
            field = "u" if "u" in values else "c"
            out.append((text(entry_id), ns, feed_id(field, values.get(field, b""))))
    return out


def pack_head(record: CheckpointRecord) -> bytes:
    """[parent, versions, present, needs, run_id] and, when the metadata has one, its
    ``source`` (a sixth field since issue 45: heads without it read as before)."""
    # strings only: the Lua side decodes heads with cmsgpack, which has no bin type
    fields: list[Any] = [
        record.parent_id or "",
        record.versions,
        record.present,
        record.needs_history,
        record.run_id or "",
    ]
    if record.source:
        fields.append(record.source)
    return codec.packb(fields)


def _head_fields(head: bytes) -> list[Any]:
    return codec.unpack_fields(head, 5, optional=1)


def summary_of(ns: str, checkpoint_id: str, head: bytes) -> Summary:
    parent, versions, present, needs, run_id, source = _head_fields(head)
    return Summary(
        ns, checkpoint_id, parent or None, versions, present, needs, run_id or None, source or None
    )


def record_of(
    thread_id: str, ns: str, checkpoint_id: str, head: bytes, payload: bytes
) -> CheckpointRecord:
    parent, versions, present, needs, run_id, source = _head_fields(head)
    ctag, cdata, mtag, mdata = codec.unpack_fields(payload, 4)
    return CheckpointRecord(
        thread_id=thread_id,
        ns=ns,
        checkpoint_id=checkpoint_id,
        parent_id=parent or None,
        versions=versions,
        present=present,
        needs_history=needs,
        run_id=run_id or None,
        checkpoint=Typed(ctag, cdata),
        metadata=Typed(mtag, mdata),
        source=source or None,
    )


def writes_of(fields: list[bytes], values: list[bytes | None]) -> list[WriteRecord]:
    out = []
    for field, value in zip(fields, values, strict=True):
        if value is None:
            continue
        _ns, _cid, task_id, idx = field.split(SEP, 3)
        channel, task_path, tag, data = codec.unpack_fields(value, 4)
        out.append(WriteRecord(task_id.decode(), int(idx), channel, task_path, Typed(tag, data)))
    return out


def loaded_of(thread_id: str, raw: list[Any], pages: dict[str, dict[str, Typed]]) -> Loaded:
    """One item of a script reply. ``pages`` holds the list elements of the whole
    reply by namespace: the script sends each element once per call, so every
    item of a namespace shares one dict (absent elements are left out)."""
    ns_raw, cid, head, payload, chans, blobs, wfields, wvalues, packed = raw
    ns = ns_raw.decode()
    place = Place(thread_id, ns, cid.decode())
    try:
        record = record_of(thread_id, ns, place.checkpoint_id or "", head, payload)
        writes = writes_of(wfields, wvalues)
        elements = pages.setdefault(ns, {})
        if packed:  # [key, [tag, data] or nil, ...]: see ``elements`` in the scripts
            flat = codec.unpackb(packed)
            for i in range(0, len(flat), 2):
                value = flat[i + 1]
                if value is not None:
                    elements[flat[i]] = Typed(value[0], value[1])
    except CorruptData as exc:
        raise exc.at(place) from None
    except (TypeError, ValueError, IndexError) as exc:
        raise codec.framing_error(exc).at(place) from None
    values = {}
    for ch, blob in zip(chans, blobs, strict=True):
        if blob is not None:
            try:
                values[ch.decode()] = codec.unpack_typed(blob)
            except CorruptData as exc:
                raise exc.at(replace(place, channel=ch.decode())) from None
    return Loaded(record, values, writes, elements)
