"""The parent-walk rule, once: which ancestors a read or a prune of a checkpoint needs.

A DeltaChannel's value (or a channel stored with an older version) lives in ancestors:
:func:`walk_op` follows parent ids rootward until every wanted channel has a stored value,
with each backend supplying only the read of one ancestor; :func:`keep_latest` is prune's
rule built on it. See docs/architecture.md ("Where each contract rule lives").
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from graphkeep.checkpoint.records import Summary
from graphkeep.port.ops import Op, drive


def delta_channels(summaries: Iterable[Summary]) -> set[str]:
    """The channels some checkpoint of ``summaries`` (one namespace) shows to be DeltaChannels.

    Read from the summaries' ``needs_history`` only (no payload, no metadata): ``put`` lists
    there every channel its checkpoint's evidence names (:func:`graphkeep.checkpoint.put.
    delta_evidence`: the metadata's ``counters_since_delta_snapshot``, a ``_DeltaSnapshot``
    value, LangGraph.js's ``delta_writes_versioned``). A channel one checkpoint shows to be a
    DeltaChannel is one in the whole namespace: a head LangGraph wrote without counters (a
    snapshot at an ancestor is then the only evidence) still rebuilds it from history.
    """
    return {ch for s in summaries for ch in s.needs_history}


def history_channels(summary: Summary, known: set[str]) -> set[str]:
    """The channels whose value at ``summary`` lives in ancestor writes: those it lists in
    ``needs_history`` and the ``known`` DeltaChannels of its namespace it has a version of,
    less those it stores a value for."""
    wanted = set(summary.needs_history) | (known & summary.versions.keys())
    return wanted - set(summary.present)


def keep_latest(checkpoints: list[Summary]) -> set[tuple[str, str]]:
    """Per namespace, the head plus every ancestor its DeltaChannels still need.

    A head whose DeltaChannel value lives in ancestor writes keeps its parent
    chain back to the nearest checkpoint storing a value for that channel (or
    to the root when none does), so pruning never silently empties a channel.
    Which channels those are: :func:`history_channels` of the head, with every
    DeltaChannel the namespace's checkpoints show (:func:`delta_channels`).
    """
    by_ns: dict[str, dict[str, Summary]] = {}
    for summary in checkpoints:
        by_ns.setdefault(summary.ns, {})[summary.checkpoint_id] = summary
    keep: set[tuple[str, str]] = set()
    for ns, by_id in by_ns.items():
        head = by_id[max(by_id)]
        keep.add((ns, head.checkpoint_id))
        needed = history_channels(head, delta_channels(by_id.values()))
        for ancestor in walk(by_id, head.parent_id, needed):
            keep.add((ns, ancestor.checkpoint_id))
    return keep


def walk(lookup: Mapping[str, Summary], parent_id: str | None, channels: set[str]) -> list[Summary]:
    """Ancestors from ``parent_id`` rootward until each channel has a stored value."""

    def read(checkpoint_id: str) -> Op[Summary | None]:
        return lookup.get(checkpoint_id)
        yield  # an op that needs no request

    return drive(walk_op(parent_id, channels, read), _no_requests)


def walk_op(
    start: str | None, channels: Iterable[str], read: Callable[[str], Op[Summary | None]]
) -> Op[list[Summary]]:
    """THE parent-walk rule: ancestors from ``start`` (inclusive) rootward, until every one
    of ``channels`` has a value stored in one of them.

    The walk stops at the root, at an ancestor that is not stored (``read`` answers None),
    or at an id already visited. ``read`` is the backend's part: it answers one checkpoint's
    :class:`Summary` by id, reading ahead in pages or from a cache as its store allows.
    """
    remaining = set(channels)
    visited: list[Summary] = []
    seen: set[str] = set()
    checkpoint_id = start
    while checkpoint_id and remaining and checkpoint_id not in seen:
        seen.add(checkpoint_id)
        ancestor = yield from read(checkpoint_id)
        if ancestor is None:
            break
        visited.append(ancestor)
        remaining.difference_update(ancestor.present)
        checkpoint_id = ancestor.parent_id
    return visited


def rearmed_by(head: Summary, by_id: dict[str, Summary]) -> tuple[set[str], set[tuple[str, str]]]:
    """What a put of ``head`` re-arms on every backend: the checkpoint, its values, and for a
    DeltaChannel rebuilt from history the ancestors back to the stored value and that value
    (ids whose checkpoint and writes, and (channel, version) of values)."""
    ids = {head.checkpoint_id}
    values = {(ch, head.versions[ch]) for ch in head.present if ch in head.versions}
    for channel in sorted(set(head.needs_history) - set(head.present)):
        current, seen = head.parent_id, set()
        while current is not None and current in by_id and current not in seen:
            seen.add(current)
            ids.add(current)
            summary = by_id[current]
            if channel in summary.present:
                if channel in summary.versions:
                    values.add((channel, summary.versions[channel]))
                break
            current = summary.parent_id
    return ids, values


def _no_requests(request: Any) -> Any:
    raise AssertionError(f"an in-memory walk made a request: {request!r}")
