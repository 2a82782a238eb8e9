"""Serialization: typed dumps/loads with clear errors, byte packing and chunking.

Values are persisted exactly as ``serde.dumps_typed`` returns them (tag and raw
bytes, no base64, no JSON re-encoding), so any LangGraph serializer works,
``EncryptedSerializer`` included. Stores that need single byte strings use
:func:`pack_typed`; stores with a per-item size limit use :func:`split`.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import ormsgpack

from graphkeep.errors import (
    CORRUPT_FRAMING,
    UNDECODABLE,
    UNKNOWN_KEY,
    CorruptData,
    GraphkeepError,
    Place,
    SerializationError,
)


@dataclass(frozen=True, slots=True)
class Typed:
    """A value as ``serde.dumps_typed`` returned it: a type tag and raw bytes."""

    tag: str
    data: bytes


#: the tag of every sealed payload of graphkeep.encryption (:mod:`graphkeep.port.encryption`:
#: the format's version is its trailing number), and what every version's tag starts with
ENVELOPE_TAG = "graphkeep.enc/1"
SEALED_TAG_PREFIX = "graphkeep.enc/"
#: the envelope's header version byte
ENVELOPE_VERSION = 1


def envelope_header(data: bytes) -> tuple[str, bytes] | None:
    """An envelope's key id and header bytes (version, id length, id), or None when they do
    not parse: read here, below the codec's and the key ring's readers alike."""
    if len(data) < 2 or data[0] != ENVELOPE_VERSION or len(data) < 2 + data[1]:
        return None
    header = data[: 2 + data[1]]
    try:
        return header[2:].decode(), header
    except UnicodeDecodeError:
        return None


def sealed_key_id(data: bytes) -> str:
    """The key id an envelope names, for messages."""
    parsed = envelope_header(data)
    return f"key id {parsed[0]!r}" if parsed and parsed[0] else "no readable key id"


#: tag of a channel that is versioned but has no value (written by other savers)
EMPTY_TAG = "empty"


def dump(serde: Any, value: Any, what: str) -> Typed:
    """Serialize ``value``; failures name what was being stored."""
    try:
        tag, data = serde.dumps_typed(value)
    except Exception as exc:
        raise SerializationError(
            f"cannot serialize {what} ({type(value).__name__}): {exc}. Use JSON-like data,"
            " pydantic models or dataclasses, or configure a serializer that supports this type"
        ) from exc
    return Typed(tag, bytes(data))


#: a compressed payload's tag is this prefix + the serializer's tag (recorded per record)
COMPRESSED_PREFIX = "z:"
#: payloads smaller than this are stored as they are (list elements: see lists.py)
COMPRESS_MIN_BYTES = 256
#: compress only when it saves at least this fraction of the bytes
COMPRESS_MIN_SAVING = 0.10


#: :func:`deflate` sizes zlib's window and hash table to payloads up to this many bytes
DEFLATE_SIZED_BYTES = 1 << 15


def deflate(data: bytes, level: int = 1) -> bytes:
    """``data`` zlib-compressed at ``level``: the stream ``zlib.compress`` makes (the same
    format, ``zlib.decompress`` reads it), with the window and hash table sized to the data.

    ``zlib.compress`` sets up a 32 KiB window and a 64 K-entry hash table for every call,
    about 256 KiB of state zeroed, which costs more than compressing a chat message itself:
    83 µs against 12 µs for 276 bytes here, the same bytes out. A window as large as the
    data finds every match the full one would; a small hash table (payloads to 2 KiB)
    costs nothing measurable in size.
    """
    size = len(data)
    if size > DEFLATE_SIZED_BYTES:
        return zlib.compress(data, level)
    wbits = max(9, (size - 1).bit_length())
    packer = zlib.compressobj(level, zlib.DEFLATED, wbits, 4 if size <= 2048 else 8)
    return packer.compress(data) + packer.flush()


def squeeze(value: Typed, min_bytes: int = COMPRESS_MIN_BYTES, level: int = 1) -> Typed:
    """``value`` zlib-compressed (``level``, default 1) when that saves >= 10 %, else
    unchanged.

    zlib was chosen by measurement (README, "Storage format"): on chat messages
    serialized one by one, zstd (level 1-3) saved no more and needs a dependency.
    """
    if len(value.data) < min_bytes or value.tag.startswith(COMPRESSED_PREFIX):
        return value
    if "+" in value.tag:  # encrypted ("<inner>+<cipher>"): ciphertext does not compress
        return value
    packed = deflate(value.data, level)
    if len(packed) > len(value.data) * (1 - COMPRESS_MIN_SAVING):
        return value
    return Typed(COMPRESSED_PREFIX + value.tag, packed)


def inflate(data: bytes) -> bytes:
    """``data`` zlib-decompressed; a stream that does not inflate is
    :class:`~graphkeep.errors.CorruptData` (without a place: the caller adds it)."""
    try:
        return zlib.decompress(data)
    except zlib.error as exc:
        raise CorruptData(
            reason=f"its compressed bytes do not decompress (zlib: {exc})", kind=CORRUPT_FRAMING
        ) from None


def unsqueeze(value: Typed) -> Typed:
    if not value.tag.startswith(COMPRESSED_PREFIX):
        return value
    return Typed(value.tag[len(COMPRESSED_PREFIX) :], inflate(value.data))


#: tags whose payload stands for None whatever its bytes (LangGraph's ``dumps_typed(None)``
#: is ``("null", b"")``; ``empty`` is a versioned channel without a value)
NONE_TAGS = frozenset({"null", EMPTY_TAG})


def encodes_none(value: Typed) -> bool:
    """Whether ``value`` (decompressed) legitimately decodes to None: an empty payload, a
    ``null`` / ``empty`` tag (also encrypted, ``null+<cipher>``), msgpack's nil (``0xc0``),
    JSON's ``null`` or a pickled None.

    Anything else that decodes to None was not rebuilt: LangGraph's ``JsonPlusSerializer``
    returns None for a msgpack extension whose own bytes do not unpack or whose code it does
    not know, a numpy array it cannot rebuild, and a JSON ``lc`` object whose constructor
    fails or names an exception class (logging a warning, and the graph carries on).
    """
    data = value.data
    if not data:
        return True
    tag, _, cipher = value.tag.partition("+")  # encrypted: "<inner>+<cipher>"
    if tag in NONE_TAGS:
        return True
    if cipher:  # the plaintext is not at hand: only a None tag stands for None
        return False
    if tag == "msgpack":
        return data == b"\xc0"
    if tag == "json":
        return data.strip() == b"null"
    if tag == "pickle":
        return data.endswith(b"N.") and len(data) <= 4
    return False


def load(serde: Any, value: Typed, where: Place | None = None) -> Any:
    """``serde.loads_typed`` of a stored ``value`` (decompressed first), or
    :class:`~graphkeep.errors.CorruptData` at ``where``: the bytes do not inflate, the
    serializer raises, or it returns None for a payload that does not stand for None (see
    :func:`encodes_none`). Without ``where`` the error names no place: the caller that knows
    it re-raises ``exc.at(place)``. The message never quotes the payload.
    """
    try:
        if value.tag.startswith(COMPRESSED_PREFIX):
            value = unsqueeze(value)
        result = serde.loads_typed((value.tag, value.data))
    except CorruptData as exc:
        if where is None:
            raise
        raise exc.at(where) from None
    except GraphkeepError:  # a serializer's own deliberate error keeps its message
        raise
    except Exception as exc:
        if value.tag.startswith(SEALED_TAG_PREFIX):  # graphkeep.encryption's, read without it
            raise CorruptData(
                reason=f"its {value.tag!r} payload is encrypted ({sealed_key_id(value.data)})"
                " and this reader has no key ring",
                kind=UNKNOWN_KEY,
                place=where,
                advice="Open the store with encryption=KeyRing(...) holding the writer's key"
                " (GRAPHKEEP_KEYS for the graphkeep command and Agent Server); nothing is"
                " returned in part",
            ) from None
        if "+" in value.tag:  # EncryptedSerializer's "<tag>+<cipher>": the key, first
            keyed = getattr(serde, "cipher", None) is not None
            raise CorruptData(
                reason=(
                    f"its {value.tag!r} payload is encrypted and "
                    + (
                        f"does not decrypt with this serializer's key ({type(exc).__name__})"
                        if keyed
                        else "this saver's serializer has no cipher"
                    )
                ),
                kind=UNDECODABLE,
                place=where,
                advice="Configure the EncryptedSerializer with the key the writer used"
                " (LANGGRAPH_AES_KEY); nothing is returned in part",
            ) from None
        raise CorruptData(
            reason=(
                f"the serializer cannot decode its {value.tag!r} payload ({type(exc).__name__})"
            ),
            kind=UNDECODABLE,
            place=where,
        ) from None
    if result is None and not encodes_none(value):
        raise CorruptData(
            reason=(
                f"the serializer decoded its non-empty {value.tag!r} payload to None (a type"
                " it cannot rebuild, or bytes it does not read)"
            ),
            kind=UNDECODABLE,
            place=where,
        )
    return result


def pack_typed(value: Typed) -> bytes:
    return ormsgpack.packb((value.tag, value.data))


def unpack_typed(data: bytes) -> Typed:
    """A stored :func:`pack_typed` pair; anything else is :class:`CorruptData`."""
    try:
        tag, raw = ormsgpack.unpackb(data)
        return Typed(tag, raw)
    except (ormsgpack.MsgpackDecodeError, ValueError, TypeError) as exc:
        raise framing_error(exc) from None


def packb(value: Any) -> bytes:
    return ormsgpack.packb(value)


def unpackb(data: bytes) -> Any:
    """``ormsgpack.unpackb`` of graphkeep's own framing; bytes it does not read are
    :class:`CorruptData` (the backend's reader unpacks what it expects from the result)."""
    try:
        return ormsgpack.unpackb(data)
    except (ormsgpack.MsgpackDecodeError, ValueError, TypeError) as exc:
        raise framing_error(exc) from None


def unpack_fields(data: bytes, count: int, optional: int = 0) -> list[Any]:
    """A stored record packed as a list of ``count`` fields (:func:`packb`), and up to
    ``optional`` more that a later format appended (absent ones read as None); bytes that
    do not unpack to that are :class:`CorruptData`."""
    fields = unpackb(data)
    if not isinstance(fields, list) or not count <= len(fields) <= count + optional:
        raise CorruptData(
            reason=f"its stored record does not hold the {count} fields it should",
            kind=CORRUPT_FRAMING,
        )
    return fields + [None] * (count + optional - len(fields))


def framing_error(exc: BaseException) -> CorruptData:
    """The :class:`CorruptData` of a record graphkeep framed itself that does not read back
    (``exc`` from unpacking it: only its type is named, never its bytes)."""
    return CorruptData(
        reason=f"its stored record does not read back ({type(exc).__name__})",
        kind=CORRUPT_FRAMING,
    )


def split(data: bytes, chunk_size: int) -> list[bytes]:
    """Split ``data`` into ``ceil(len/chunk_size)`` chunks (at least one)."""
    count = max(1, math.ceil(len(data) / chunk_size))
    return [data[i * chunk_size : (i + 1) * chunk_size] for i in range(count)]


def join(chunks: Iterable[bytes]) -> bytes:
    return b"".join(chunks)


def plain(value: Any) -> Any:
    """A JSON/BSON-compatible copy of metadata (for queries; not the source of truth)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return str(value)
