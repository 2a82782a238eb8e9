"""What the saver's documents and filters look like, and how they read back (no I/O).

Pure builders and decoders, testable without a server: identity encodings, payload
chunking and re-assembly into records, list element ranges, the queryable metadata
copy and the server-side filter pushdown. The indexes are in :mod:`.schema`, the
format-1 rewrite in :mod:`.migrate`; see docs/architecture.md.
"""

from __future__ import annotations

import base64
import hashlib
import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import bson

from graphkeep.checkpoint.lists import ELEMENT_CHANNEL, element_key, split_key
from graphkeep.checkpoint.records import CheckpointRecord, Typed, WriteRecord
from graphkeep.errors import MISSING_VALUE, ConfigurationError, Place
from graphkeep.port import codec
from graphkeep.port.torn import Torn

#: bump when the document layout changes; readers keep accepting older formats.
#: 1: checkpoints in ``<prefix>_checkpoints`` (0.1.x); 2: checkpoints are ``kind: "cp"``
#: documents of the one thread collection, ``_id`` is a digest of the identity and the
#: fields no query names are short or packed (``setup()`` rewrites format-1 documents)
FORMAT = 2

#: a checkpoint document (``ref`` = checkpoint id)
KIND_CP = "cp"
KIND_BLOB = "blob"
KIND_WRITE = "write"
#: the packed payload of a checkpoint too large to inline (``ref`` = checkpoint id)
KIND_CHECKPOINT = "checkpoint"
#: every kind whose ``ref`` is a checkpoint id: what goes (and stays alive) with a checkpoint
CHECKPOINT_KINDS = [KIND_CP, KIND_WRITE, KIND_CHECKPOINT]
#: the thread's fencing token (one per thread, :mod:`.fences`): not the thread's data, so no
#: read, inventory, export or deletion of the thread names it (see :func:`thread_data`)
KIND_FENCE = "fence"

#: a run of list element keys of one epoch: (epoch, first seq, last seq), both inclusive
Run = tuple[str, int, int]

#: payload bytes kept inline in one document; larger payloads are chunked. 8 MiB
#: leaves half of the 16 MiB BSON limit for the identity fields, which are
#: bounded (ids 1 KiB, task_path 64 KiB), and keeps an update statement, which
#: may be at most 16 MiB + 16 KiB on the wire, far from the limit.
CHUNK_SIZE = 8 * 1024 * 1024
#: budget of the queryable metadata copy; keys beyond it are only filtered in Python
METADATA_DOC_BUDGET = 1024 * 1024
#: hard BSON limit of one document
BSON_LIMIT = 16 * 1024 * 1024
#: nesting depth accepted in the queryable metadata copy
MAX_DEPTH = 32

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1


class Opaque:
    """Marks a metadata value that the queryable copy could not hold (see export)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<opaque>"


OPAQUE = Opaque()


# -- names ------------------------------------------------------------------------


def check_prefix(prefix: Any) -> str:
    """``key_prefix`` becomes the start of collection names: keep it a safe name."""
    if not isinstance(prefix, str) or not prefix:
        raise ConfigurationError("key_prefix must be a non-empty string")
    if "$" in prefix or "\x00" in prefix or prefix.startswith("system."):
        raise ConfigurationError(
            f"key_prefix {prefix!r} cannot name a MongoDB collection: it must not contain"
            " '$' or NUL nor start with 'system.'"
        )
    if len(prefix.encode("utf-8")) > 100:
        raise ConfigurationError(f"key_prefix {prefix!r} is too long (max 100 bytes)")
    return prefix


# -- identities ------------------------------------------------------------------------


def blob_ref(channel: str, version: str) -> str:
    """``ref`` of a blob: length-prefixed so no (channel, version) pair collides."""
    return f"{len(channel)}:{channel}:{version}"


def parse_blob_ref(ref: str) -> tuple[str, str]:
    """(channel, version) of a blob ``ref`` (the inverse of :func:`blob_ref`)."""
    size, _, rest = ref.partition(":")
    n = int(size)
    return rest[:n], rest[n + 1 :]


def write_sub(task_id: str, idx: int) -> str:
    """``sub`` of a write: length-prefixed task id and the write index."""
    return f"{len(task_id)}:{task_id}:{idx}"


def parse_write_sub(sub: str) -> tuple[str, int]:
    """(task id, write index) of a write's ``sub`` (the inverse of :func:`write_sub`)."""
    size, _, rest = sub.partition(":")
    n = int(size)
    return rest[:n], int(rest[n + 1 :])


def doc_id(*parts: str) -> str:
    """A document's ``_id``: a 128-bit digest of its identity fields (each length-prefixed,
    so distinct identities never hash the same input), 22 base64url characters.

    Upserts name a document by ``_id`` alone: the primary key, the one lookup every
    MongoDB-compatible server serves from an index (FerretDB's SQLite handler pushes
    down nothing else, so any other filter costs a collection scan there). A digest
    keeps the key short however long thread and checkpoint ids are (format 1 spelled
    the identity out, which made ``_id`` the largest field of most documents).
    """
    identity = "".join(f"{len(part)}:{part}" for part in parts).encode("utf-8", "surrogatepass")
    digest = hashlib.blake2b(identity, digest_size=16, person=b"graphkeep.id.2").digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def checkpoint_id_key(thread_id: str, ns: str, checkpoint_id: str) -> str:
    """``_id`` of a checkpoint document."""
    return doc_id("c", thread_id, ns, checkpoint_id)


def payload_id(thread_id: str, ns: str, kind: str, ref: str, sub: str, part: str) -> str:
    """``_id`` of a payload document (a head has ``part`` "")."""
    return doc_id("p", thread_id, ns, kind, ref, sub, part)


def fence_id(thread_id: str) -> str:
    """``_id`` of the thread's fence document (:mod:`.fences`)."""
    return doc_id("f", thread_id)


def thread_data(thread_id: str) -> dict[str, Any]:
    """The filter of every document of the thread but its fence document: what
    ``delete_thread`` deletes and an inventory or export reads."""
    return {"thread_id": thread_id, "kind": {"$ne": KIND_FENCE}}


def identity(thread_id: str, ns: str, kind: str, ref: str, sub: str = "") -> dict[str, Any]:
    """The indexed identity fields of a document; an empty ``sub`` is left out (it indexes
    as null, the same for every document of a kind that has none)."""
    for value in (thread_id, ns, ref, sub):
        # values only, never operators: every caller passes validated strings
        if not isinstance(value, str):
            raise TypeError(f"identity fields must be str, got {type(value).__name__}")
    ident = {"thread_id": thread_id, "ns": ns, "kind": kind, "ref": ref}
    if sub:
        ident["sub"] = sub
    return ident


# -- checkpoint documents ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Heading:
    """What a checkpoint document says besides its identity and its payload: packed into
    one binary field ``s`` in format 2 (read only by the client, never queried)."""

    parent_id: str | None
    versions: dict[str, str]
    present: list[str]
    needs_history: list[str]
    #: DeltaChannel bookkeeping: channel -> (checkpoint id, seed version or None)
    delta: dict[str, tuple[str, str | None]]
    #: list channels: channel -> (version, runs of element keys)
    lists: dict[str, tuple[str, list[Run]]]
    #: the checkpoint and metadata are in a ``kind: "checkpoint"`` payload
    chunked: bool = False


def pack_heading(heading: Heading) -> bytes:
    """``s`` of a checkpoint document: msgpack ``[format, parent, versions, present,
    needs_history, delta, lists, chunked]`` (plain maps: channel names may hold "." or "$")."""
    lists = {ch: [v, [list(r) for r in runs]] for ch, (v, runs) in heading.lists.items()}
    return codec.packb(
        [
            FORMAT,
            heading.parent_id,
            heading.versions,
            heading.present,
            heading.needs_history,
            {ch: list(entry) for ch, entry in heading.delta.items()},
            lists,
            heading.chunked,
        ]
    )


def heading_of(doc: Mapping[str, Any]) -> Heading:
    """The heading of a checkpoint document, format 2 (``s``) or format 1 (named fields)."""
    packed = doc.get("s")
    if packed is not None:
        _format, parent, versions, present, needs, delta, lists, chunked = codec.unpack_fields(
            bytes(packed), 8
        )
        return Heading(
            parent or None,
            dict(versions),
            list(present),
            list(needs),
            {ch: (cid, v) for ch, (cid, v) in delta.items()},
            {
                ch: (v, [(e, int(lo), int(hi)) for e, lo, hi in runs])
                for ch, (v, runs) in lists.items()
            },
            bool(chunked),
        )
    old_lists: dict[str, tuple[str, list[Run]]] = {}
    for e in doc.get("lists") or []:
        old_lists.setdefault(e["c"], (e["v"], []))[1].append((e["e"], int(e["lo"]), int(e["hi"])))
    return Heading(
        doc.get("parent_id") or None,
        {e["c"]: e["v"] for e in doc.get("versions") or []},
        list(doc.get("present") or []),
        list(doc.get("needs_history") or []),
        {e["c"]: (e["id"], e.get("v")) for e in doc.get("delta") or []},
        old_lists,
        bool(doc.get("chunked")),
    )


def checkpoint_payload(doc: Mapping[str, Any]) -> bytes | None:
    """The packed ``[checkpoint tag, bytes, metadata tag, bytes]`` inlined in a checkpoint
    document, None when it is chunked (format 1 kept four named fields)."""
    packed = doc.get("d")
    if packed is not None:
        return bytes(packed)
    if "checkpoint" not in doc:
        return None
    return codec.packb(
        [doc["checkpoint_type"], bytes(doc["checkpoint"]), doc["metadata_type"], doc["metadata"]]
    )


# -- list elements -----------------------------------------------------------------------

#: ``ref`` of every element blob starts with this; keys are fixed-width after it
ELEMENT_PREFIX = blob_ref(ELEMENT_CHANNEL, "")
_KEY_LEN = len(element_key("0" * 16, 0))


def element_ref(key: str) -> str:
    return ELEMENT_PREFIX + key


def key_runs(keys: Iterable[str]) -> list[Run]:
    """Distinct element keys as runs of consecutive sequence numbers within an epoch."""
    runs: list[Run] = []
    for key in sorted(set(keys)):
        epoch, seq = split_key(key)
        if runs and runs[-1][0] == epoch and runs[-1][2] + 1 == seq:
            runs[-1] = (epoch, runs[-1][1], seq)
        else:
            runs.append((epoch, seq, seq))
    return runs


def merge_runs(runs: Iterable[Run]) -> list[Run]:
    """The union of ``runs`` as the fewest runs (overlapping or adjacent ones join)."""
    merged: list[Run] = []
    for epoch, low, high in sorted(runs):
        if merged and merged[-1][0] == epoch and low <= merged[-1][2] + 1:
            merged[-1] = (epoch, merged[-1][1], max(high, merged[-1][2]))
        else:
            merged.append((epoch, low, high))
    return merged


def run_clauses(runs: Iterable[Run]) -> list[dict[str, Any]]:
    """``ref`` conditions selecting exactly the element blobs of ``runs``.

    Keys of one epoch are fixed-width (16 + 8 hex digits), so a run is one index
    range on ``ref``; a run of one key, or of keys of another width, is an ``$in``.
    """
    clauses: list[dict[str, Any]] = []
    single: list[str] = []
    for epoch, low, high in runs:
        first, last = element_key(epoch, low), element_key(epoch, high)
        if low == high or len(first) != _KEY_LEN or len(last) != _KEY_LEN:
            single += [element_ref(element_key(epoch, seq)) for seq in range(low, high + 1)]
        else:
            clauses.append({"$gte": element_ref(first), "$lte": element_ref(last)})
    for batch in in_batches(single):
        clauses.append({"$in": batch})
    return clauses


def element_clauses(thread_id: str, ns: str, runs: list[Run]) -> list[dict[str, Any]]:
    """Filters (each index-backed alone) selecting the element blobs of ``runs``."""
    base = {"thread_id": thread_id, "ns": ns, "kind": KIND_BLOB}
    return [{**base, "ref": clause} for clause in run_clauses(merge_runs(runs))]


def element_key_of(ref: str) -> str | None:
    """The element key of a blob ``ref``, or None when it is not an element."""
    return ref[len(ELEMENT_PREFIX) :] if ref.startswith(ELEMENT_PREFIX) else None


# -- payload chunking ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PayloadDoc:
    """One document to upsert into the payloads collection."""

    #: ``{"_id": ...}``
    filter: dict[str, Any]
    doc: dict[str, Any]
    #: True for the head document (no ``part``), which decides overwrite vs insert-once
    head: bool


def tail_part(gen: str, n: int) -> str:
    """``part`` of the ``n``-th chunk of generation ``gen`` (format 1 wrote ``gen:n``)."""
    return f"{gen}/{n}"


def tail_generation(part: str) -> str:
    """The generation a tail's ``part`` belongs to (format 2 ``<g>/<i>``, format 1
    ``<gen>:<i>``)."""
    return part.rsplit("/", 1)[0] if "/" in part else part.rsplit(":", 1)[0]


def payload_docs(
    ident: Mapping[str, Any],
    fields: Mapping[str, Any],
    tag: str,
    data: bytes,
    chunk_size: int,
) -> list[PayloadDoc]:
    """The head document (and tail chunks, tails first) holding one payload.

    The head carries the type tag ``y``, the (first chunk of the) bytes ``d`` (left out
    when empty) and, when chunked, the chunk count ``n`` and ``g`` (a digest of the
    whole payload); tails are keyed by ``part = "<g>/<i>"``. A reader assembles only
    the tails of the head's generation, so an overwrite or a retry that writes
    different bytes can never mix chunks of two payloads.
    """
    base = {**ident, **fields}
    key = [ident["thread_id"], ident["ns"], ident["kind"], ident["ref"], ident.get("sub", "")]

    def by_id(part: str) -> dict[str, Any]:
        return {"_id": payload_id(key[0], key[1], key[2], key[3], key[4], part)}

    if len(data) <= chunk_size:
        head = {**base, "y": tag, "d": data} if data else {**base, "y": tag}
        return [PayloadDoc(by_id(""), head, True)]
    pieces = [data[i : i + chunk_size] for i in range(0, len(data), chunk_size)]
    gen = hashlib.blake2b(data, digest_size=12).hexdigest()
    docs = []
    for n in range(1, len(pieces)):
        part = tail_part(gen, n)
        docs.append(PayloadDoc(by_id(part), {**base, "part": part, "d": pieces[n]}, False))
    head = {**base, "y": tag, "n": len(pieces), "g": gen, "d": pieces[0]}
    docs.append(PayloadDoc(by_id(""), head, True))
    return docs


def group_key(doc: Mapping[str, Any]) -> tuple[str, str, str, str, str]:
    return (doc["thread_id"], doc["ns"], doc["kind"], doc["ref"], doc.get("sub") or "")


def group_payloads(
    docs: Iterable[Mapping[str, Any]],
) -> dict[tuple[str, str, str, str, str], list[Mapping[str, Any]]]:
    groups: dict[tuple[str, str, str, str, str], list[Mapping[str, Any]]] = {}
    for doc in docs:
        groups.setdefault(group_key(doc), []).append(doc)
    return groups


def payload_type(head: Mapping[str, Any]) -> str:
    """The type tag of a payload head (``y``; format 1: ``type``)."""
    return str(head["y"] if "y" in head else head["type"])


def assemble(docs: list[Mapping[str, Any]]) -> tuple[Mapping[str, Any], bytes] | None:
    """(head, payload bytes), or None while the payload is incomplete.

    Reads format 2 (``y``/``d``/``n``/``g``, tails ``<g>/<i>``) and format 1
    (``type``/``data``/``count``/``gen``, tails ``<gen>:<i>``); while ``setup()``
    rewrites a format-1 document both may be stored, with the same bytes.
    """
    heads = [d for d in docs if not d.get("part")]
    if not heads:
        return None
    head = next((d for d in heads if "y" in d), heads[0])
    new = "y" in head
    count = int(head.get("n" if new else "count", 1))
    data = bytes(head.get("d" if new else "data", b""))
    if count <= 1:
        return head, data
    gen = str(head.get("g" if new else "gen"))
    parts = {d.get("part"): d.get("d" if "d" in d else "data") for d in docs}
    pieces = [data]
    for n in range(1, count):
        # a format-2 head may meet format-1 tails of its bytes while setup() rewrites them
        piece = parts.get(tail_part(gen, n)) if new else None
        piece = parts.get(f"{gen}:{n}") if piece is None else piece
        if piece is None:
            return None
        pieces.append(bytes(piece))
    return head, b"".join(pieces)


def complete_payloads(
    found: Iterable[Mapping[str, Any]], *, strict: bool = False
) -> Iterator[tuple[str, str, str, str, Mapping[str, Any], bytes]]:
    """(thread, ns, kind, ref, head document, payload bytes) of each complete payload;
    chunks are reassembled, tails without their head (a payload still being written) are
    left out. A head whose tails are not all found is left out too (an inventory or export
    reports it), or, ``strict`` (the saver's reads), raises :class:`~graphkeep.port.torn.Torn`:
    the tails are written before their head, so only an overwrite since the head was read
    (or damage) removes them, and the value is never read as absent."""
    for (t, ns, kind, ref, sub), group in group_payloads(found).items():
        assembled = assemble(group)
        if assembled is not None:
            yield t, ns, kind, ref, assembled[0], assembled[1]
        elif strict and any(not d.get("part") for d in group):
            raise torn(t, ns, kind, ref, sub)


def torn(thread_id: str, ns: str, kind: str, ref: str, sub: str = "") -> Torn:
    """The error of a payload head read without the chunks it names."""
    if kind == KIND_BLOB:
        channel, version = parse_blob_ref(ref)
        place = Place(thread_id, ns, channel=channel, part=f"version {version}")
    elif kind == KIND_WRITE:
        task_id, idx = parse_write_sub(sub)
        place = Place(thread_id, ns, ref, task_id=task_id, idx=idx)
    else:
        place = Place(thread_id, ns, ref, part="checkpoint")
    return Torn(
        reason="the chunk documents its head names are not stored",
        kind=MISSING_VALUE,
        place=place,
        advice="It was read again and still lacks them: the data is damaged (or its"
        " documents expired apart); `graphkeep check --deep` reports it, restore it from a"
        " backup or delete it",
    )


def write_record(head: Mapping[str, Any], data: bytes) -> WriteRecord:
    """The pending write a payload head (format 2 or 1) and its bytes hold."""
    if "y" in head:  # format 2: task id and index are in ``sub``
        task_id, idx = parse_write_sub(head["sub"])
        task_path = head.get("p", "")
    else:
        task_id, idx, task_path = head["task_id"], int(head["idx"]), head.get("task_path", "")
    return WriteRecord(
        task_id=task_id,
        idx=idx,
        channel=head["channel"],
        task_path=task_path,
        value=Typed(payload_type(head), data),
    )


def checkpoint_record(
    doc: Mapping[str, Any], chunked: bytes | None, *, strict: bool = False
) -> CheckpointRecord | None:
    """The record of a checkpoint document (``chunked``: its payload when stored apart),
    None when its payload is not found whole; ``strict`` (the saver's reads): raises
    :class:`~graphkeep.port.torn.Torn` then (the payload is written before the document, so
    it went since: an overwrite, or damage)."""
    heading = heading_of(doc)
    packed = chunked if heading.chunked else checkpoint_payload(doc)
    if packed is None:
        if strict:
            raise torn(doc["thread_id"], doc["ns"], KIND_CHECKPOINT, doc["ref"])
        return None  # treat as absent (an inventory or export reports it)
    ctag, cdata, mtag, mdata = codec.unpack_fields(packed, 4)
    metadata_doc: dict[str, Any] = dict(doc.get("metadata_doc") or {})
    for key in doc.get("metadata_opaque") or []:
        metadata_doc[key] = OPAQUE  # re-marked opaque if this record is stored again
    return CheckpointRecord(
        thread_id=doc["thread_id"],
        ns=doc["ns"],
        checkpoint_id=doc["ref"],
        parent_id=heading.parent_id,
        versions=heading.versions,
        present=heading.present,
        needs_history=heading.needs_history,
        run_id=doc.get("run_id"),
        checkpoint=Typed(ctag, bytes(cdata)),
        metadata=Typed(mtag, bytes(mdata)),
        metadata_doc=metadata_doc,
        source=source_of(doc),
    )


#: the projection that adds a checkpoint's ``source`` to :data:`SUMMARY_FIELDS` (the fork
#: rule of ``graphkeep check``): the queryable metadata copy holds it
SOURCE_FIELD = "metadata_doc.source"


def source_of(doc: Mapping[str, Any]) -> str | None:
    """The metadata's ``source`` of a checkpoint document, from its queryable copy (None
    when not projected, absent, or left out of a copy too large to keep)."""
    copy = doc.get("metadata_doc")
    source = copy.get("source") if isinstance(copy, Mapping) else None
    return source if isinstance(source, str) and source else None


# -- metadata --------------------------------------------------------------------------


def safe_key(key: Any, *, top: bool = False) -> bool:
    """A key that is a legal field name on MongoDB *and* wire-compatible servers."""
    if not isinstance(key, str) or "\x00" in key or "." in key:
        return False
    if top and (not key or "$" in key):  # top-level keys become query paths
        return False
    return not key.startswith("$") and _utf8(key)


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def storable(value: Any, depth: int = 0, in_array: bool = False) -> bool:
    """Can ``value`` go into a document on MongoDB and on FerretDB alike?

    Conservative on purpose: ints beyond int64, NaN/inf, lone surrogates, keys
    with '.' or a leading '$' and arrays directly inside arrays are rejected
    (the last three are rejected by some wire-compatible servers).
    """
    if depth > MAX_DEPTH:
        return False
    if value is None or isinstance(value, bool):
        return True
    if isinstance(value, int):
        return INT64_MIN <= value <= INT64_MAX
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, str):
        return _utf8(value)
    if isinstance(value, Mapping):
        return all(safe_key(k) and storable(v, depth + 1) for k, v in value.items())
    if isinstance(value, list):
        if in_array:
            return False
        return all(storable(v, depth + 1, in_array=True) for v in value)
    return False


def metadata_fields(metadata: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The queryable copy of the metadata and the keys it could not hold.

    Keys that are not safe field names are left out (filters on them are never
    pushed down); values a document cannot hold, and values past the size
    budget, are listed as *opaque* so a pushed-down filter still selects the
    checkpoint and the saver decides in Python.
    """
    doc: dict[str, Any] = {}
    opaque: list[str] = []
    used = 0
    for key, value in metadata.items():
        if not safe_key(key, top=True):
            continue
        if not storable(value):
            opaque.append(key)
            continue
        size = len(bson.encode({"v": value}))
        if used + size > METADATA_DOC_BUDGET:
            opaque.append(key)
            continue
        doc[key] = value
        used += size
    return doc, opaque


def pushable(value: Any) -> bool:
    """Filter values compared on the server: scalars only (nested ones in Python)."""
    if value is None or isinstance(value, bool):
        return True
    if isinstance(value, str):
        return _utf8(value)
    if isinstance(value, int):
        return INT64_MIN <= value <= INT64_MAX
    if isinstance(value, float):
        return math.isfinite(value)
    return False


def metadata_filter(filter: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Server-side clauses for a validated ``list(filter=...)``: a superset of the matches.

    User keys become field *paths* only when they are safe names (no '.', no
    '$'), and values are always wrapped in ``$eq`` so they can never act as
    operators. Everything else is left to the saver's Python re-check.
    """
    clauses: list[dict[str, Any]] = []
    for key, value in filter.items():
        if not safe_key(key, top=True) or not pushable(value):
            continue
        clauses.append(
            {
                "$or": [
                    {f"metadata_doc.{key}": {"$eq": value}},
                    {"metadata_opaque": {"$eq": key}},
                ]
            }
        )
    return clauses


# -- filters ---------------------------------------------------------------------------


def live(now: datetime) -> dict[str, Any]:
    """Documents not past their expiry (TTL monitors delete lazily, or not at all)."""
    return {"expires_at": {"$not": {"$lte": now}}}


def conjunction(clauses: list[dict[str, Any]]) -> dict[str, Any]:
    """AND of filters: merged into one document where no key repeats, else ``$and``."""
    merged: dict[str, Any] = {}
    rest: list[dict[str, Any]] = []
    for clause in clauses:
        if not clause:
            continue
        if any(key in merged for key in clause):
            rest.append(clause)
        else:
            merged.update(clause)
    return {"$and": [merged, *rest]} if rest else merged


def disjunction(clauses: list[dict[str, Any]]) -> dict[str, Any] | None:
    if not clauses:
        return None
    if len(clauses) == 1:
        return clauses[0]
    return {"$or": clauses}


def keyset_after(keys: list[str], last: tuple[str, ...]) -> dict[str, Any]:
    """Rows strictly after ``last`` in DESC order on ``keys`` (keyset pagination)."""
    clauses: list[dict[str, Any]] = []
    for i, key in enumerate(keys):
        clause: dict[str, Any] = {keys[j]: {"$eq": last[j]} for j in range(i)}
        clause[key] = {"$lt": last[i]}
        clauses.append(clause)
    return disjunction(clauses) or {}


def in_batches(values: list[str], size: int = 10_000) -> list[list[str]]:
    return [values[i : i + size] for i in range(0, len(values), size)] if values else []
