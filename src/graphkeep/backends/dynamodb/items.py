"""Item attributes, typed values and the 400 KB guard (compression and chunk items).

Only the low-level client's typed attribute values are used (``{"S": ..}``, ``{"B": ..}``,
``{"N": ..}``): nothing goes through boto3's ``TypeDeserializer``, so no number ever becomes a
``Decimal``. Versions, steps and write indexes live in the serialized payloads or in the
sort key and come back with their original Python types.

Attributes (short names: DynamoDB bills attribute names as item bytes)::

    pk, sk   keys (see :mod:`.keys`)
    h        checkpoint head summary: msgpack [parent, versions, present, needs, run_id]
    v        payload bytes, when it fits in the item
    nk, dg   chunk count and digest when the payload lives in chunk items (``sz``: bytes)
    z        "zlib" when the payload is compressed
    ls       1 on a list manifest blob (see :mod:`graphkeep.checkpoint.lists`): a TTL refresh
             learns which blobs name list elements without reading every payload
    iv       on a head written by ``put``: a copy of the small channel values that put wrote
             (msgpack ``[[channel, version, packed value], ...]``, at most
             :data:`INLINE_TOTAL_BYTES`; the value items are written as well): a read of
             that checkpoint takes them from the head instead of a BatchGetItem
    rk       "<prefix>#1#<run_id>": key of the ``run_id`` GSI (delete_for_runs)
    so       the checkpoint metadata's ``source`` ("input", "loop", "update", "fork"), on a
             head whose metadata has one: ``graphkeep check``'s fork rule reads it with the
             head (an attribute apart from ``h``, so releases before it read these heads)
    exp      epoch seconds: DynamoDB's TTL attribute (only with ``ttl``)
    vis      epoch seconds a checkpoint head stays visible (only with ``ttl``)
    rw       raw names (msgpack) when a key component had to be shortened
    wg       on a write item holding several regular writes of one ``put_writes`` call (a
             write group, :mod:`.writes`): the ``idx`` of the writes after its own (msgpack),
             whose records follow in its payload
    tok, until  the thread's lease (sort key ``l#``): holder token, expiry in epoch ms
    fence    the thread's fencing token (the last lease's, on the ``l#`` item; see :mod:`.locks`)
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from graphkeep.backends.dynamodb import keys
from graphkeep.errors import (
    MISSING_VALUE,
    ConfigurationError,
    CorruptData,
    GraphkeepError,
    Place,
)
from graphkeep.port import codec
from graphkeep.port.torn import Torn
from graphkeep.store.values import decode_value

PK, SK = "pk", "sk"
HEAD, VALUE, NCHUNKS, DIGEST, SIZE, CODEC = "h", "v", "nk", "dg", "sz", "z"
RUN, EXP, VIS, RAW = "rk", "exp", "vis", "rw"
SOURCE = "so"
GROUP = "wg"
LIST = "ls"
INLINE = "iv"
LOCK_TOKEN, LOCK_UNTIL, FENCE = "tok", "until", "fence"
RUN_INDEX = "run_id"

#: a new channel value of at most this many packed bytes is also copied into its head
#: (``iv``): a list manifest, a trigger, a counter ...
INLINE_VALUE_BYTES = 512
#: and at most this many bytes of them per head (a head stays within a write unit or two)
INLINE_TOTAL_BYTES = 1024

#: DynamoDB's item size limit
MAX_ITEM_BYTES = 400 * 1024
#: an item whose estimated size passes this moves its payload to chunk items
INLINE_LIMIT = 380_000
CHUNK_BYTES = 350_000
#: payloads from this size on are compressed (when compression is on and it pays)
COMPRESS_MIN_BYTES = 4096
#: the same for checkpoint items (heads, writes, values, list elements): many small items
#: (a chat message is a few hundred bytes) that zlib still halves (measured on W50: heads
#: 710 -> 330 bytes, elements -15 %); below this size it never saves 10 %
SMALL_COMPRESS_MIN_BYTES = 128
#: compress only when that saves at least this fraction (else the item is stored as is)
COMPRESS_MIN_SAVING = 0.10
DEFAULT_COMPRESS_LEVEL = 6


def compress_level(compress: bool | int | None) -> int | None:
    """The zlib level of a ``compress`` option (True: the default level; False/0: none)."""
    if compress is None or compress is False:
        return None
    if compress is True:
        return DEFAULT_COMPRESS_LEVEL
    if isinstance(compress, int) and 0 <= compress <= 9:
        return compress or None
    raise ConfigurationError(f"compress must be True, False or a zlib level 1-9, got {compress!r}")


def S(value: str) -> dict[str, Any]:
    return {"S": value}


def B(value: bytes) -> dict[str, Any]:
    return {"B": value}


def N(value: int) -> dict[str, Any]:
    return {"N": str(int(value))}


def s(item: dict[str, Any], name: str) -> str:
    return str(item[name]["S"])


def b(item: dict[str, Any], name: str) -> bytes:
    return bytes(item[name]["B"])


def n(item: dict[str, Any], name: str) -> int | None:
    value = item.get(name)
    return None if value is None else int(value["N"])


def key(pk: str, sk: str) -> dict[str, Any]:
    return {PK: S(pk), SK: S(sk)}


#: what :func:`size_of` counts for a number without reading its digits: DynamoDB keeps at
#: most 38 significant digits, 21 bytes
NUMBER_BYTES = 21


def attribute_size(value: dict[str, Any], number_bytes: int | None = None) -> int:
    """Bytes of one typed value (``{"S": ...}``, ``{"M": {...}}`` …) by DynamoDB's item-size
    rules: UTF-8 text, raw binary, a number one byte per two significant digits plus one
    (``number_bytes`` instead, when given), 1 for a boolean or null, a set its members,
    3 bytes per list or map plus 1 per element (and a map's keys)."""
    ((kind, raw),) = value.items()
    if kind == "S":
        return len(raw.encode())
    if kind == "B":
        return len(raw)
    if kind == "N":
        if number_bytes is not None:
            return number_bytes
        return (len(str(raw).lstrip("-").replace(".", "")) + 1) // 2 + 1
    if kind in ("BOOL", "NULL"):
        return 1
    if kind == "SS":
        return sum(len(text.encode()) for text in raw)
    if kind == "BS":
        return sum(len(data) for data in raw)
    if kind == "NS":
        return sum(attribute_size({"N": n}, number_bytes) for n in raw)
    if kind == "L":
        return 3 + sum(1 + attribute_size(v, number_bytes) for v in raw)
    if kind == "M":
        return 3 + sum(
            1 + len(k.encode()) + attribute_size(v, number_bytes) for k, v in raw.items()
        )
    raise ValueError(f"not a DynamoDB attribute value: {kind!r}")


def size_of(item: dict[str, Any]) -> int:
    """DynamoDB's item size: attribute names plus values, each number counted as
    :data:`NUMBER_BYTES` (an upper bound, for the size limits)."""
    return sum(len(name.encode()) + attribute_size(v, NUMBER_BYTES) for name, v in item.items())


@dataclass(slots=True)
class Encoded:
    """An owner item plus the chunk items its payload was split into (if any)."""

    item: dict[str, Any]
    chunks: list[dict[str, Any]] = field(default_factory=list)

    @property
    def chunk_sks(self) -> tuple[str, ...]:
        return tuple(s(c, SK) for c in self.chunks)


def attach_payload(
    item: dict[str, Any],
    payload: bytes,
    *,
    level: int | None,
    compressible: bool = True,
    min_bytes: int = COMPRESS_MIN_BYTES,
) -> Encoded:
    """Put ``payload`` into ``item`` (``v``), compressed and/or split into chunk items as needed.

    Chunk keys embed a digest of the stored bytes, so re-sending the same payload rewrites
    the same chunk items and a different payload never overwrites live ones. Compression
    (payloads from ``min_bytes``) is kept only when it saves at least 10 %, and recorded in
    the item (``z``), so readers never guess.
    """
    data = payload
    if level is not None and compressible and len(payload) >= min_bytes:
        packed = codec.deflate(payload, level)
        if len(packed) <= len(payload) * (1 - COMPRESS_MIN_SAVING):
            data = packed
            item[CODEC] = S("zlib")
    if size_of(item) + len(VALUE) + len(data) <= INLINE_LIMIT:
        item[VALUE] = B(data)
        return Encoded(item)
    digest = hashlib.blake2b(data, digest_size=8).hexdigest()
    pieces = codec.split(data, CHUNK_BYTES)
    item[NCHUNKS] = N(len(pieces))
    item[DIGEST] = S(digest)
    item[SIZE] = N(len(data))
    pk, owner = s(item, PK), s(item, SK)
    chunks = []
    for i, piece in enumerate(pieces):
        chunk = {PK: S(pk), SK: S(keys.chunk_sk(owner, digest, i)), VALUE: B(piece)}
        if EXP in item:
            chunk[EXP] = item[EXP]
        chunks.append(chunk)
    return Encoded(item, chunks)


def chunk_sks(item: dict[str, Any]) -> tuple[str, ...]:
    """Sort keys of the chunk items an owner item's payload lives in (empty when inline)."""
    count = n(item, NCHUNKS)
    if not count or VALUE in item:
        return ()
    owner, digest = s(item, SK), s(item, DIGEST)
    return tuple(keys.chunk_sk(owner, digest, i) for i in range(count))


def has_payload(item: dict[str, Any]) -> bool:
    """The item carries a value (inline or in chunks), not only its keys."""
    return VALUE in item or NCHUNKS in item


def owner_chunks(item: dict[str, Any]) -> tuple[str, ...]:
    """Chunk keys of an owner item read with or without its payload attribute (a
    projection without ``v``)."""
    count = n(item, NCHUNKS)
    if not count or VALUE in item or DIGEST not in item:
        return ()
    return chunk_sks(item)


def read_payload(item: dict[str, Any], chunks: dict[str, dict[str, Any]]) -> bytes:
    """The payload of an owner item; ``chunks`` maps chunk sort keys to chunk items."""
    if VALUE in item:
        data = b(item, VALUE)
    else:
        parts = []
        for sk in chunk_sks(item):
            chunk = chunks.get(sk)
            if chunk is None:
                # Torn: the reads read again (an overwrite deletes the old chunks once the
                # new item is stored), and raise it when the chunk stays missing
                raise Torn(
                    f"chunk {sk!r} of item {s(item, SK)!r} (partition {s(item, PK)!r}) is"
                    " missing: the value cannot be re-assembled. The item was damaged outside"
                    " graphkeep (or by an expired TTL); delete the thread or restore a backup",
                    kind=MISSING_VALUE,
                )
            parts.append(b(chunk, VALUE))
        data = codec.join(parts)
        expected = n(item, SIZE)
        digest = hashlib.blake2b(data, digest_size=8).hexdigest()
        if (expected is not None and len(data) != expected) or digest != item[DIGEST]["S"]:
            raise CorruptData(
                f"chunks of item {s(item, SK)!r} do not match their digest; the value is damaged"
            )
    if CODEC in item:
        codec_name = s(item, CODEC)
        if codec_name != "zlib":
            raise GraphkeepError(f"unknown payload codec {codec_name!r}: upgrade graphkeep")
        data = codec.inflate(data)
    return data


def hidden(item: dict[str, Any], now: float) -> bool:
    """Past its expiry (DynamoDB deletes expired items lazily, up to days later)."""
    exp = n(item, EXP)
    return exp is not None and exp < now


def head_hidden(item: dict[str, Any], now: float) -> bool:
    vis = n(item, VIS)
    if vis is not None:
        return vis < now
    return hidden(item, now)


def item_value(
    item: dict[str, Any], chunks: dict[str, dict[str, Any]], namespace: tuple[str, ...], key: str
) -> dict[str, Any]:
    """The value of a store item (re-assembled, decompressed, decoded); a damaged one is
    :class:`CorruptData` naming ``namespace`` and ``key``."""
    try:
        data = read_payload(item, chunks)
    except CorruptData as exc:
        raise exc.at(Place(namespace=namespace, key=key)) from None
    return decode_value(data, namespace, key)
