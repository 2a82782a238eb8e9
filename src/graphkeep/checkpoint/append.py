"""A checkpoint a tool appends after a thread's head, as LangGraph's ``update_state`` does.

``graphkeep materialize`` and ``graphkeep migrate`` each write one checkpoint after a head:
``source: "update"``, ``step`` one past the head's, the head's ``parents``, a new id and
time. The head's other metadata is carried over — what the app put there through
``config["metadata"]`` (a user id, Agent Server's ``graph_id`` / ``assistant_id``) and its
``schema_version`` — so list filters and fleet views find the thread's newest checkpoint as
they found the head. What belongs to one step or one run is not carried: its ``writes``, its
``run_id`` (the appended checkpoint is no run's), and the markers of an earlier tool run.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime, timezone
from typing import Any

from langgraph.checkpoint.base import CheckpointTuple
from langgraph.checkpoint.base.id import uuid6

#: what ``graphkeep materialize`` did: ``{"from_checkpoint_id": id, "channels": [...]}``
MATERIALIZED_KEY = "graphkeep_materialize"
#: what ``graphkeep migrate`` did: ``{"from_checkpoint_id", "from_version", "to_version"}``
MIGRATED_KEY = "graphkeep_migrate"
#: metadata of the head an appended checkpoint does not carry over (the tools' markers
#: describe the checkpoint they are on, not its children)
NOT_CARRIED = frozenset(
    {"source", "step", "parents", "writes", "run_id", MATERIALIZED_KEY, MIGRATED_KEY}
)


def appended_metadata(head: CheckpointTuple, drop: Iterable[str] = ()) -> dict[str, Any]:
    """The metadata of a checkpoint appended after ``head``: the head's, less
    :data:`NOT_CARRIED` and ``drop``, with ``source: "update"``, the next step and the head's
    ``parents``."""
    meta: Mapping[str, Any] = head.metadata if isinstance(head.metadata, Mapping) else {}
    step = meta.get("step", -1)
    step = step if isinstance(step, int) else -1
    left_out = NOT_CARRIED | frozenset(drop)
    carried = {k: v for k, v in meta.items() if k not in left_out}
    return {
        **carried,
        "source": "update",
        "step": step + 1,
        "parents": dict(meta.get("parents") or {}),
    }


def appended_identity(metadata: Mapping[str, Any]) -> dict[str, str]:
    """``id`` and ``ts`` of the appended checkpoint whose metadata is ``metadata``."""
    return {
        "id": str(uuid6(clock_seq=int(metadata["step"]))),
        "ts": datetime.now(timezone.utc).isoformat(),
    }
