"""An effect's record as ``list`` shows it (:class:`EffectInfo`): names, state and times,
never the recorded outcome."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from graphkeep.effects.port import STARTED, EffectRecord

__all__ = ["EffectInfo", "at_ms", "info_of"]


@dataclass(frozen=True, slots=True)
class EffectInfo:
    """One record as ``list`` shows it: names, state and times, never the result."""

    thread_id: str
    key: str
    name: str
    state: str
    created_at: datetime
    updated_at: datetime
    expires_at: datetime
    #: a STARTED record's lease end (after it, the holder is presumed dead)
    lease_until: datetime | None
    #: bytes of the stored result or error (as stored: encrypted, compressed)
    size: int

    def as_dict(self) -> dict[str, Any]:
        def stamp(at: datetime | None) -> str | None:
            return None if at is None else at.isoformat()

        return {
            "thread_id": self.thread_id,
            "key": self.key,
            "name": self.name,
            "state": self.state,
            "created_at": stamp(self.created_at),
            "updated_at": stamp(self.updated_at),
            "expires_at": stamp(self.expires_at),
            "lease_until": stamp(self.lease_until),
            "size": self.size,
        }


def at_ms(ms: int) -> datetime:
    """Epoch milliseconds as an aware UTC datetime."""
    return datetime.fromtimestamp(ms / 1000, timezone.utc)


def info_of(record: EffectRecord) -> EffectInfo:
    return EffectInfo(
        thread_id=record.thread_id,
        key=record.key,
        name=record.name,
        state=record.state,
        created_at=at_ms(record.created_ms),
        updated_at=at_ms(record.updated_ms),
        expires_at=at_ms(record.expires_ms),
        lease_until=at_ms(record.lease_until_ms) if record.state == STARTED else None,
        size=len(record.data or b""),
    )
