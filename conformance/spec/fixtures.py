"""Builders and assertions shared by the spec cases (configs, checkpoints, chains, writes)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from typing import Any
from uuid import uuid4

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import Checkpoint, CheckpointMetadata, CheckpointTuple
from langgraph.checkpoint.base.id import uuid6
from langgraph.checkpoint.serde.types import _DeltaSnapshot

from conformance.factory import Api


def new_thread(label: str = "t") -> str:
    return f"{label}-{uuid4().hex[:12]}"


def new_checkpoint_id() -> str:
    return str(uuid6(clock_seq=-1))


def config(thread_id: Any, ns: str = "", checkpoint_id: str | None = None) -> RunnableConfig:
    configurable: dict[str, Any] = {"thread_id": thread_id, "checkpoint_ns": ns}
    if checkpoint_id is not None:
        configurable["checkpoint_id"] = checkpoint_id
    return {"configurable": configurable}


def checkpoint(
    values: dict[str, Any] | None = None,
    versions: dict[str, Any] | None = None,
    *,
    checkpoint_id: str | None = None,
    ts: str | None = None,
    versions_seen: dict[str, dict[str, Any]] | None = None,
) -> Checkpoint:
    return Checkpoint(
        v=1,
        id=checkpoint_id or new_checkpoint_id(),
        ts=datetime.now(timezone.utc).isoformat() if ts is None else ts,
        channel_values=dict(values or {}),
        channel_versions=dict(versions or {}),
        versions_seen=versions_seen or {},
        updated_channels=None,
    )


def metadata(step: int = 0, source: str = "loop", **extra: Any) -> CheckpointMetadata:
    return {"source": source, "step": step, "parents": {}, **extra}  # type: ignore[typeddict-item]


def put_one(
    api: Api,
    thread_id: Any,
    *,
    ns: str = "",
    parent: RunnableConfig | None = None,
    values: dict[str, Any] | None = None,
    meta: CheckpointMetadata | None = None,
    version: Any = 1,
) -> RunnableConfig:
    """Put one checkpoint whose channels all get (new) `version`.

    Callers putting different values for a channel in one thread and namespace must pass a
    new version each time: a (channel, version) blob is immutable once stored.
    """
    versions: dict[str, Any] = {channel: version for channel in values or {}}
    parent_id = parent["configurable"]["checkpoint_id"] if parent else None
    return api.put(
        config(thread_id, ns, parent_id), checkpoint(values, versions), meta or metadata(), versions
    )


def put_chain(
    api: Api,
    thread_id: Any,
    count: int,
    *,
    ns: str = "",
    meta_for: Callable[[int], CheckpointMetadata] | None = None,
) -> list[RunnableConfig]:
    """`count` chained checkpoints, each with channel "n" = its position, oldest first."""
    stored: list[RunnableConfig] = []
    for step in range(count):
        parent = stored[-1] if stored else None
        meta = meta_for(step) if meta_for else metadata(step)
        stored.append(
            put_one(
                api,
                thread_id,
                ns=ns,
                parent=parent,
                values={"n": step},
                meta=meta,
                version=step + 1,
            )
        )
    return stored


def delta_chain(
    api: Api,
    thread_id: str,
    *,
    channel: str = "ch",
    snapshots: Sequence[int] = (0,),
    steps: int = 6,
    ns: str = "",
) -> list[RunnableConfig]:
    """A parent chain as DeltaChannel leaves it (contract s11 fixtures: int versions, ts="").

    Step s stores `_DeltaSnapshot(s)` at version s+1 when s is in `snapshots`; every other step
    stores a write of value s under its own checkpoint.
    """
    stored: list[RunnableConfig] = []
    for step in range(steps):
        values: dict[str, Any] = {}
        versions: dict[str, Any] = {}
        if step in snapshots:
            values[channel] = _DeltaSnapshot(step)
            versions[channel] = step + 1
        parent_id = stored[-1]["configurable"]["checkpoint_id"] if stored else None
        cp = checkpoint(values, versions, ts="")
        saved = api.put(config(thread_id, ns, parent_id), cp, metadata(step), dict(versions))
        stored.append(saved)
        if step not in snapshots:
            api.put_writes(saved, [(channel, step)], str(uuid4()))
    return stored


def checkpoint_id_of(item: RunnableConfig | CheckpointTuple) -> str:
    conf = item.config if isinstance(item, CheckpointTuple) else item
    return str(conf["configurable"]["checkpoint_id"])


def ids(items: Sequence[RunnableConfig | CheckpointTuple]) -> list[str]:
    return [checkpoint_id_of(item) for item in items]


def must_get(api: Api, conf: RunnableConfig) -> CheckpointTuple:
    found = api.get_tuple(conf)
    assert found is not None, f"get_tuple found nothing for {conf['configurable']}"
    return found


def write_values(found: CheckpointTuple) -> list[tuple[str, Any]]:
    """The (channel, value) pairs of a tuple's pending writes, in the order returned."""
    return [(channel, value) for _, channel, value in found.pending_writes or []]


def history_values(history: dict[str, Any] | Any, channel: str) -> list[Any]:
    return [value for _, _, value in history[channel]["writes"]]


def expect_raises(error: type[Exception], action: Callable[[], object], label: str) -> None:
    """Assert `action()` raises `error` (a subclass counts); name the action otherwise."""
    try:
        action()
    except error:
        return
    except Exception as exc:
        raise AssertionError(f"{label}: expected {error.__name__}, got {exc!r}") from exc
    raise AssertionError(f"{label}: expected {error.__name__}, nothing was raised")
