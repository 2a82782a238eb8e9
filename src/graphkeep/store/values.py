"""The store's value codec: item values as JSON bytes, vectors as float32 bytes, text digests
and the dotted text form of a namespace.
"""

from __future__ import annotations

import hashlib
import json
import re
import struct
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from graphkeep.errors import UNDECODABLE, CorruptData, Place, SerializationError
from graphkeep.store.port import Namespace


def encode_value(value: Mapping[str, Any]) -> bytes:
    """The JSON bytes a backend stores for an item's value.

    Integers beyond 64 bits are written exactly (as JSON allows); NaN and infinities are
    refused, as JSON has no spelling for them (PostgresStore refuses them too).
    """
    try:
        data = orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS)
    except TypeError as exc:
        if "64-bit" not in str(exc):
            raise SerializationError(
                f"store values must be JSON-serializable dicts: {exc}"
            ) from exc
        data = b""
    if not data or b"null" in data:  # orjson writes NaN and infinities as null: look closer
        try:
            exact = json.dumps(
                value, separators=(",", ":"), ensure_ascii=False, allow_nan=False
            ).encode()
        except (TypeError, ValueError) as exc:
            raise SerializationError(
                f"store values must be JSON-serializable dicts (no NaN or infinity): {exc}"
            ) from exc
        data = data or exact  # orjson's bytes wherever it could write them
    return data


#: a run of digits long enough to be an integer beyond 64 bits (orjson reads it as a float)
_LONG_NUMBER = re.compile(rb"\d{19,}")


def decode_value(
    data: bytes | str, namespace: Namespace | None = None, key: str | None = None
) -> dict[str, Any]:
    """The item value :func:`encode_value` stored as ``data``; bytes that are not a JSON
    object are :class:`~graphkeep.errors.CorruptData` naming ``namespace`` and ``key`` (never
    the bytes): an item is not returned without its value, nor skipped."""
    raw = data.encode() if isinstance(data, str) else data
    try:
        value = json.loads(raw) if _LONG_NUMBER.search(raw) else orjson.loads(raw)
    except ValueError as exc:  # orjson's and json's decode errors, bytes that are not UTF-8
        raise CorruptData(
            reason=f"its stored value is not JSON ({type(exc).__name__})",
            kind=UNDECODABLE,
            place=Place(namespace=namespace, key=key),
        ) from None
    if not isinstance(value, dict):
        raise CorruptData(
            reason=f"its stored value is a JSON {type(value).__name__}, not an object",
            kind=UNDECODABLE,
            place=Place(namespace=namespace, key=key),
        )
    return value


def pack_vector(values: Sequence[float]) -> bytes:
    return struct.pack(f"<{len(values)}f", *values)


def unpack_vector(data: bytes) -> tuple[float, ...]:
    return struct.unpack(f"<{len(data) // 4}f", data)


def text_digest(text: str) -> str:
    return hashlib.blake2b(text.encode("utf-8"), digest_size=12).hexdigest()


def dotted_namespace(namespace: Namespace) -> str:
    """Labels joined by ``.`` (labels never contain ``.``, so this is unambiguous)."""
    return ".".join(namespace)


def namespace_from_dotted(text: str) -> Namespace:
    """The namespace :func:`dotted_namespace` wrote as ``text``."""
    return tuple(text.split("."))
