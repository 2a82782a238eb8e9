"""How the DynamoDB event log packs a run's events into items (see
:mod:`graphkeep.backends.dynamodb.events`): item keys, packing into items and transactions,
an item's ``v`` and the events read back from it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from graphkeep.backends.dynamodb.items import (
    CODEC,
    COMPRESS_MIN_BYTES,
    COMPRESS_MIN_SAVING,
    DEFAULT_COMPRESS_LEVEL,
    PK,
    SK,
    VALUE,
    B,
    N,
    S,
    b,
    s,
)
from graphkeep.backends.dynamodb.requests import TRANSACT_MAX_BYTES, TRANSACT_MAX_ITEMS
from graphkeep.errors import GraphkeepError
from graphkeep.events.port import StoredEvent
from graphkeep.port import codec

EVENT = "e#"
SEQ_WIDTH = 19
MAX_SEQ = 10**SEQ_WIDTH - 1
COUNT, CLOSING = "n", "cl"
#: raw event bytes (plus msgpack framing) packed into one item; far below the 400 KB limit
ITEM_BUDGET = 350_000
#: the most bytes an item's ``v`` may take when key rotation rewrites it (of DynamoDB's 400 KB
#: per item, the rest for its keys and other attributes)
ITEM_LIMIT = 390_000
#: msgpack framing of one ``bin`` in the packed list, counted generously
FRAMING = 5
#: event items per transaction: the meta Update is the 100th action
ITEMS_PER_TRANSACTION = TRANSACT_MAX_ITEMS - 1


def event_sk(seq: int) -> str:
    return f"{EVENT}{seq:0{SEQ_WIDTH}d}"


def seq_of(sk: str) -> int:
    return int(sk[len(EVENT) :])


@dataclass(frozen=True, slots=True)
class Pack:
    """Consecutive events stored in one item."""

    payloads: list[bytes]
    closing: bool
    #: bytes the payloads take stored, with their framing
    size: int = 0


def pack_events(
    payloads: list[bytes], closing: bool, peritem: int, size_of: Callable[[bytes], int]
) -> list[Pack]:
    """Consecutive payloads grouped into items of at most :data:`ITEM_BUDGET` bytes stored
    (``size_of``: sealed with encryption on) and ``peritem`` events (trimming drops whole
    items: this bounds what it has to keep)."""
    packs: list[Pack] = []
    current: list[bytes] = []
    size = 0
    for payload in payloads:
        cost = size_of(payload) + FRAMING
        if current and (size + cost > ITEM_BUDGET or len(current) >= peritem):
            packs.append(Pack(current, False, size))
            current, size = [], 0
        current.append(payload)
        size += cost
    packs.append(Pack(current, closing, size))
    return packs


def transactions(packs: list[Pack]) -> Iterator[list[Pack]]:
    """Packs grouped into transactions (99 items and 4 MB at most, with the meta Update)."""
    group: list[Pack] = []
    size = 0
    for pack in packs:
        cost = pack.size + 200
        if group and (len(group) >= ITEMS_PER_TRANSACTION or size + cost > TRANSACT_MAX_BYTES):
            yield group
            group, size = [], 0
        group.append(pack)
        size += cost
    if group:
        yield group


def packed(payloads: list[bytes]) -> tuple[bytes, bool]:
    """An item's ``v``: the payloads as a msgpack list, zlib-compressed when that pays
    (True)."""
    data = codec.packb(payloads)
    if len(data) >= COMPRESS_MIN_BYTES:
        packed = codec.deflate(data, DEFAULT_COMPRESS_LEVEL)
        if len(packed) <= len(data) * (1 - COMPRESS_MIN_SAVING):
            return packed, True
    return data, False


def event_item(
    pk: str, last: int, pack: Pack, stored: Callable[[str, bytes], bytes]
) -> dict[str, Any]:
    item: dict[str, Any] = {PK: S(pk), SK: S(event_sk(last)), COUNT: N(len(pack.payloads))}
    first = last - len(pack.payloads) + 1
    data, deflated = packed([stored(str(first + i), p) for i, p in enumerate(pack.payloads)])
    if deflated:
        item[CODEC] = S("zlib")
    item[VALUE] = B(data)
    if pack.closing:
        item[CLOSING] = N(1)
    return item


def events_of(item: dict[str, Any], floor: int) -> list[StoredEvent]:
    """The events of one item with a seq above ``floor``."""
    last = seq_of(s(item, SK))
    data = b(item, VALUE)
    if CODEC in item:
        if s(item, CODEC) != "zlib":
            raise GraphkeepError(f"unknown event codec {s(item, CODEC)!r}: upgrade graphkeep")
        data = codec.inflate(data)
    payloads = codec.unpackb(data)
    first = last - len(payloads) + 1
    closing = CLOSING in item
    return [
        StoredEvent(str(seq), bytes(payload), closing and seq == last)
        for seq, payload in zip(range(first, last + 1), payloads, strict=True)
        if seq > floor
    ]
