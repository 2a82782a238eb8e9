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

from graphkeep.errors import SerializationError


@dataclass(frozen=True, slots=True)
class Typed:
    """A value as ``serde.dumps_typed`` returned it: a type tag and raw bytes."""

    tag: str
    data: bytes


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


def squeeze(value: Typed, min_bytes: int = COMPRESS_MIN_BYTES) -> Typed:
    """``value`` zlib-compressed (level 1) when that saves >= 10 %, else unchanged.

    zlib was chosen by measurement (README, "Storage format"): on chat messages
    serialized one by one, zstd (level 1-3) saved no more and needs a dependency.
    """
    if len(value.data) < min_bytes or value.tag.startswith(COMPRESSED_PREFIX):
        return value
    if "+" in value.tag:  # encrypted ("<inner>+<cipher>"): ciphertext does not compress
        return value
    packed = deflate(value.data, 1)
    if len(packed) > len(value.data) * (1 - COMPRESS_MIN_SAVING):
        return value
    return Typed(COMPRESSED_PREFIX + value.tag, packed)


def unsqueeze(value: Typed) -> Typed:
    if not value.tag.startswith(COMPRESSED_PREFIX):
        return value
    return Typed(value.tag[len(COMPRESSED_PREFIX) :], zlib.decompress(value.data))


def load(serde: Any, value: Typed) -> Any:
    if value.tag.startswith(COMPRESSED_PREFIX):
        value = unsqueeze(value)
    return serde.loads_typed((value.tag, value.data))


def pack_typed(value: Typed) -> bytes:
    return ormsgpack.packb((value.tag, value.data))


def unpack_typed(data: bytes) -> Typed:
    tag, raw = ormsgpack.unpackb(data)
    return Typed(tag, raw)


def packb(value: Any) -> bytes:
    return ormsgpack.packb(value)


def unpackb(data: bytes) -> Any:
    return ormsgpack.unpackb(data)


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
