"""Two savers' checkpoints compared through LangGraph's read path: what ``graphkeep copy``
verifies (:mod:`graphkeep.cli.verify`) and what the live switch's mover checks before it
settles a moved thread (:mod:`graphkeep.moving.fallback`)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from graphkeep.moving.decode import LosslessSerde

#: the field named when pending writes differ
PENDING_WRITES = "pending writes"

_MISSING = object()
_BYTES = LosslessSerde(strict=False)


def same(a: Any, b: Any) -> bool:
    """Equal as decoded values (those whose ``==`` is not a bool: equal as stored bytes)."""
    try:
        equal = a == b
        if isinstance(equal, bool):
            return equal
    except Exception:  # an ``==`` that raises (arrays, say): compare what would be stored
        pass
    try:
        return _BYTES.dumps_typed(a) == _BYTES.dumps_typed(b)
    except Exception:
        return repr(a) == repr(b)


def config_of(thread_id: str, ns: str, checkpoint_id: str | None = None) -> Any:
    conf: dict[str, Any] = {"thread_id": thread_id, "checkpoint_ns": ns}
    if checkpoint_id:
        conf["checkpoint_id"] = checkpoint_id
    return {"configurable": conf}


def place_of(ns: str, checkpoint_id: str) -> str:
    return f"checkpoint {checkpoint_id}" + (f" (ns {ns!r})" if ns else "")


def differing(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    return sorted(
        k for k in a.keys() | b.keys() if not same(a.get(k, _MISSING), b.get(k, _MISSING))
    )


def by_task(writes: Iterable[Any] | None) -> list[tuple[str, str, Any]]:
    """Pending writes, each task's in its order, tasks by id."""
    listed = [(str(t), str(c), v) for t, c, v in writes or []]
    return sorted(listed, key=lambda w: w[0])


def fewer(have: Iterable[Any] | None, want: Iterable[Any] | None) -> bool:
    """Is every write of ``have`` one of ``want`` (which holds more)?"""
    left = by_task(want)
    for write in by_task(have):
        match = next(
            (i for i, w in enumerate(left) if w[:2] == write[:2] and same(w[2], write[2])), None
        )
        if match is None:
            return False
        del left[match]
    return bool(left)


def error_text(exc: Exception) -> str:
    return f"{type(exc).__name__}: {exc}"


def parent_of(tup: Any) -> str | None:
    parent = (tup.parent_config or {}).get("configurable", {}).get("checkpoint_id")
    return str(parent) if parent else None


def compare_tuples(
    source: Any, dest: Any, versions: dict[str, Any], seen: dict[str, dict[str, Any]]
) -> list[str]:
    """The fields of ``dest`` (a destination CheckpointTuple) that differ from ``source``,
    ``versions`` / ``seen``: the source's as translated for the destination."""
    fields = []
    s_body, d_body = source.checkpoint, dest.checkpoint
    channels = differing(
        dict(s_body.get("channel_values") or {}), dict(d_body.get("channel_values") or {})
    )
    if channels:
        fields.append(f"channel_values ({', '.join(channels)})")
    keys = differing(dict(source.metadata or {}), dict(dest.metadata or {}))
    if keys:
        fields.append(f"metadata ({', '.join(keys)})")
    if parent_of(source) != parent_of(dest):
        fields.append(f"parent ({parent_of(source)} != {parent_of(dest)})")
    s_writes, d_writes = by_task(source.pending_writes), by_task(dest.pending_writes)
    if len(s_writes) != len(d_writes) or not all(
        a[:2] == b[:2] and same(a[2], b[2]) for a, b in zip(s_writes, d_writes, strict=False)
    ):
        fields.append(f"{PENDING_WRITES} ({len(s_writes)} on the source, {len(d_writes)} here)")
    channels = differing(versions, dict(d_body.get("channel_versions") or {}))
    if channels:
        fields.append(f"channel_versions ({', '.join(channels)})")
    have_seen = {n: dict(m or {}) for n, m in (d_body.get("versions_seen") or {}).items()}
    nodes = sorted(n for n in seen.keys() | have_seen.keys() if seen.get(n) != have_seen.get(n))
    if nodes:
        fields.append(f"versions_seen ({', '.join(nodes)})")
    return fields
