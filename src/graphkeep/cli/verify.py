"""A copied thread verified through LangGraph's read path (``graphkeep copy`` of any pair but
graphkeep -> graphkeep, whose check compares stored bytes).

For every checkpoint of the source, ``get_tuple`` with its id on both sides must give equal
``channel_values`` (decoded), metadata, parent, pending writes (task id, channel, value: each
task's in order; tasks in task id order, as savers return them in different orders) and the
source's versions as translated for the destination (:mod:`graphkeep.moving.versions`); each
namespace's head (``get_tuple`` without an id) and ``list()`` order must agree. With
``--graph``, the app's graph reads the thread through each saver: ``get_state`` and
``get_state_history`` (values, next, tasks with their interrupts, metadata) must agree too.
Each difference is one line naming the checkpoint and the field.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from graphkeep.cli.arguments import import_graph
from graphkeep.cli.console import UsageError
from graphkeep.cli.endpoints import Endpoint
from graphkeep.moving.compare import (
    PENDING_WRITES,
    compare_tuples,
    config_of,
    differing,
    error_text,
    fewer,
    place_of,
    same,
)
from graphkeep.moving.items import CheckpointItem
from graphkeep.moving.versions import VersionPlan

#: a thread's problems beyond this many are counted, not listed
MAX_PROBLEMS = 20


def verify_thread(
    src: Endpoint,
    dst: Endpoint,
    thread_id: str,
    target: str,
    items: Sequence[CheckpointItem],
    plan: VersionPlan,
    *,
    present: frozenset[tuple[str, str]] = frozenset(),
    whole: bool = True,
    short: list[CheckpointItem] | None = None,
) -> list[str]:
    """What differs between the source's ``items`` and the destination. ``present``: the
    checkpoints the destination held before the copy (named as such); ``whole`` False: check
    only the checkpoints (not heads, lists); ``short`` given: a checkpoint that differs only
    in lacking some of the source's pending writes is added there, not reported."""
    problems = []
    for item in items:
        at = place_of(item.ns, item.checkpoint_id)
        try:
            dest = dst.saver.get_tuple(config_of(target, item.ns, item.checkpoint_id))
        except Exception as exc:  # a value this machine cannot load, a saver's own error
            problems.append(f"{at}: unreadable on the destination: {error_text(exc)}")
            continue
        if dest is None:
            problems.append(f"{at}: missing on the destination")
            continue
        try:
            source = src.saver.get_tuple(config_of(thread_id, item.ns, item.checkpoint_id))
        except Exception as exc:
            problems.append(f"{at}: unreadable on the source: {error_text(exc)}")
            continue
        if source is None:
            problems.append(f"{at}: no longer on the source")
            continue
        fields = compare_tuples(source, dest, plan.versions(item), plan.seen(item))
        if short is not None and len(fields) == 1 and fields[0].startswith(PENDING_WRITES):
            if fewer(dest.pending_writes, source.pending_writes):
                short.append(item)  # the source's checkpoint gained writes since: add them
                continue
        if fields:
            note = (
                " (already there before this copy: not overwritten)"
                if ((item.ns, item.checkpoint_id) in present)
                else ""
            )
            problems.append(f"{at}: differs{note}: {'; '.join(fields)}")
    if whole:
        for ns in sorted({i.ns for i in items}):
            problems += _heads_and_lists(src, dst, thread_id, target, ns)
    return problems


def _heads_and_lists(
    src: Endpoint, dst: Endpoint, thread_id: str, target: str, ns: str
) -> list[str]:
    label = f" (ns {ns!r})" if ns else ""
    problems = []
    s_head = src.saver.get_tuple(config_of(thread_id, ns))
    d_head = dst.saver.get_tuple(config_of(target, ns))
    s_id = s_head.config["configurable"]["checkpoint_id"] if s_head else None
    d_id = d_head.config["configurable"]["checkpoint_id"] if d_head else None
    if s_id != d_id:
        problems.append(f"head{label}: {d_id} on the destination, {s_id} on the source")
    s_ids = [
        t.config["configurable"]["checkpoint_id"] for t in src.saver.list(config_of(thread_id, ns))
    ]
    d_ids = [
        t.config["configurable"]["checkpoint_id"] for t in dst.saver.list(config_of(target, ns))
    ]
    if s_ids != d_ids:
        at = next(
            (i for i, (a, b) in enumerate(zip(s_ids, d_ids, strict=False)) if a != b),
            min(len(s_ids), len(d_ids)),
        )
        problems.append(
            f"list(){label}: {len(d_ids)} checkpoint(s) on the destination, {len(s_ids)} on the"
            f" source, first difference at position {at}"
        )
    return problems


# -- through the app's graph (--graph) ---------------------------------------------------


def _tasks(snapshot: Any) -> list[Any]:
    return [
        (
            t.id,
            t.name,
            tuple(t.path),
            [(i.value, i.id) for i in t.interrupts],
            t.result,
        )
        for t in snapshot.tasks
    ]


def _snapshot_fields(source: Any, dest: Any) -> list[str]:
    fields = []
    if not same(source.values, dest.values):
        keys = (
            differing(source.values, dest.values)
            if isinstance(source.values, dict) and isinstance(dest.values, dict)
            else []
        )
        fields.append("values" + (f" ({', '.join(keys)})" if keys else ""))
    if tuple(source.next) != tuple(dest.next):
        fields.append(f"next ({list(source.next)} != {list(dest.next)})")
    if not same(_tasks(source), _tasks(dest)):
        fields.append("tasks")
    if not same(dict(source.metadata or {}), dict(dest.metadata or {})):
        fields.append("metadata")
    return fields


def _checkpoint_id(snapshot: Any) -> str | None:
    found = (snapshot.config or {}).get("configurable", {}).get("checkpoint_id")
    return str(found) if found else None


def load_app_graph(spec: str) -> Any:
    """What ``--graph MODULE:ATTR`` names: a compiled graph or a ``StateGraph`` builder (a
    function without arguments is called first)."""
    found = import_graph(spec)
    if not hasattr(found, "get_state") and not hasattr(found, "compile"):
        raise UsageError(f"--graph {spec} is a {type(found).__name__}, not a LangGraph graph")
    return found


def with_saver(graph: Any, saver: Any) -> Any:
    """``graph`` (compiled or a builder) reading and writing through ``saver``."""
    if hasattr(graph, "get_state"):
        return graph.copy(update={"checkpointer": saver})
    return graph.compile(checkpointer=saver)


def verify_graph(
    graph: Any, src_saver: Any, dst_saver: Any, thread_id: str, target: str
) -> list[str]:
    """``graph.get_state`` and ``get_state_history`` of the thread, read through ``graph``
    with each saver: what differs."""
    on_src, on_dst = with_saver(graph, src_saver), with_saver(graph, dst_saver)
    src_config, dst_config = config_of(thread_id, ""), config_of(target, "")
    problems = []
    s_state, d_state = on_src.get_state(src_config), on_dst.get_state(dst_config)
    fields = _snapshot_fields(s_state, d_state)
    if _checkpoint_id(s_state) != _checkpoint_id(d_state):
        fields.insert(0, f"checkpoint ({_checkpoint_id(d_state)} != {_checkpoint_id(s_state)})")
    if fields:
        problems.append(f"graph get_state: differs: {'; '.join(fields)}")
    s_history = list(on_src.get_state_history(src_config))
    d_history = list(on_dst.get_state_history(dst_config))
    if len(s_history) != len(d_history):
        problems.append(
            f"graph get_state_history: {len(d_history)} state(s) on the destination,"
            f" {len(s_history)} on the source"
        )
    for s_snap, d_snap in zip(s_history, d_history, strict=False):
        fields = _snapshot_fields(s_snap, d_snap)
        if _checkpoint_id(s_snap) != _checkpoint_id(d_snap):
            fields.insert(0, f"checkpoint ({_checkpoint_id(d_snap)} on the destination)")
        if fields:
            problems.append(
                f"graph get_state_history at {_checkpoint_id(s_snap)}: differs: {'; '.join(fields)}"
            )
    return problems


def capped(problems: list[str]) -> list[str]:
    """At most :data:`MAX_PROBLEMS` lines, the rest counted."""
    if len(problems) <= MAX_PROBLEMS:
        return problems
    rest = len(problems) - MAX_PROBLEMS
    return [*problems[:MAX_PROBLEMS], f"... and {rest} more difference(s)"]
