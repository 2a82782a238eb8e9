"""A source checkpoint as the arguments of a destination's ``put`` / ``put_writes``: its
versions translated (:mod:`.versions`), ``new_versions`` those changed since its parent, its
writes grouped per task in their original ``idx`` order (:func:`.items.task_batches`)."""

from __future__ import annotations

from typing import Any

from graphkeep.moving.items import CheckpointItem, WriteItem, task_batches
from graphkeep.moving.versions import VersionPlan


def put_args(
    target: str, item: CheckpointItem, parent: CheckpointItem | None, plan: VersionPlan
) -> tuple[Any, Any, Any, Any]:
    """``(config, checkpoint, metadata, new_versions)`` of ``item``'s ``put`` into ``target``."""
    versions = plan.versions(item)
    parent_versions = plan.versions(parent) if parent is not None else {}
    new_versions = {ch: v for ch, v in versions.items() if parent_versions.get(ch) != v}
    config = {
        "configurable": {
            "thread_id": target,
            "checkpoint_ns": item.ns,
            "checkpoint_id": item.parent_id,
        }
    }
    metadata = item.metadata if isinstance(item.metadata, dict) else {}
    return config, plan.checkpoint(item), metadata, new_versions


def writes_args(target: str, item: CheckpointItem) -> list[tuple[Any, list[Any], str, str]]:
    """``(config, writes, task_id, task_path)`` of each ``put_writes`` giving ``target`` the
    writes of ``item``."""
    if not item.writes:
        return []
    config = {
        "configurable": {
            "thread_id": target,
            "checkpoint_ns": item.ns,
            "checkpoint_id": item.checkpoint_id,
        }
    }
    groups: dict[tuple[str, str], list[WriteItem]] = {}
    for write in item.writes:
        groups.setdefault((write.task_id, write.task_path), []).append(write)
    return [
        (config, batch, task_id, task_path)
        for (task_id, task_path), writes in groups.items()
        for batch in task_batches(writes)
    ]
