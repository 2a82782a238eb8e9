"""Channel versions translated for ``graphkeep copy``, into what the destination steps from.

LangGraph compares a channel's versions only with each other (``versions_seen[node][ch] <
channel_versions[ch]`` runs a node) and steps from the highest (``get_next_version``), so a
saver may use integers (LangGraph's default: MongoDBSaver, DynamoDBSaver, plainredis) or
strings (graphkeep's and LangGraph's SQLite / Postgres savers: ``"%032d.%016d"``). Copied as
they are across kinds, the next step fails (``'>' not supported between 'str' and 'int'``,
or ``get_next_version`` raising ``NotImplementedError`` on a string). A copy therefore maps
each version one-to-one, order-preserving, into the destination's kind, found by
``dst.saver.get_next_version(None, None)``; same-kind pairs pass versions unchanged.

- integer -> string: the number is kept, ``f"{n:032}.{fraction}"``. An ``update_state`` fork
  of an integer saver reuses integers, so one ``(ns, channel, n)`` may hold different values
  on different branches; a string destination stores values per ``(channel, version)``, so
  each distinct value gets its own fraction, derived from the value's serialized bytes (the
  same on every run: a resumed copy maps as the first did). ``versions_seen`` entries take
  the fraction of the value their own branch had at that version (the nearest ancestor that
  carries it).
- string -> integer: per ``(ns, channel)``, the leading integer of LangGraph's / graphkeep's
  ``"%032d.%016d"`` form when distinct versions never share one, else the version's rank
  among the channel's versions (1, 2, ...), which keeps the source's order.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from graphkeep.moving.items import CheckpointItem

INT = "int"
STR = "str"

#: the fingerprint of a channel that has a version but no value at a checkpoint
ABSENT = b"\x00graphkeep:absent"
#: LangGraph's and graphkeep's string versions: "%032d.%016d" (graphkeep's fraction is a
#: random float's text, so the part after the first dot is free)
_NUMBERED = re.compile(r"^(\d+)(\..*)?$")

Key = tuple[str, str]


def version_kind(saver: Any) -> str | None:
    """``"int"`` or ``"str"``: what ``saver`` steps its channel versions from (None: another
    kind, whose versions a copy passes unchanged)."""
    try:
        first = saver.get_next_version(None, None)
    except Exception:  # a saver that refuses to say: leave versions as they are
        return None
    if isinstance(first, bool):
        return None
    if isinstance(first, int):
        return INT
    if isinstance(first, str):
        return STR
    return None


def fraction(fingerprint: bytes) -> str:
    """16 digits derived from ``fingerprint`` (stable across runs and machines)."""
    number = int.from_bytes(hashlib.sha256(fingerprint).digest()[:8], "big") % 10**16
    return f"{number:016}"


def int_to_str(number: int, fingerprint: bytes) -> str:
    return f"{number:032}.{fraction(fingerprint)}"


@dataclass
class VersionPlan:
    """The translated ``channel_versions`` and ``versions_seen`` of every checkpoint of one
    thread, by ``(ns, checkpoint_id)``; ``kind`` None: versions pass unchanged."""

    kind: str | None
    channel_versions: dict[Key, dict[str, Any]] = field(default_factory=dict)
    versions_seen: dict[Key, dict[str, dict[str, Any]]] = field(default_factory=dict)

    def versions(self, item: CheckpointItem) -> dict[str, Any]:
        """``item``'s channel versions as the destination stores them."""
        return self.channel_versions.get((item.ns, item.checkpoint_id), item.versions)

    def seen(self, item: CheckpointItem) -> dict[str, dict[str, Any]]:
        found = self.versions_seen.get((item.ns, item.checkpoint_id))
        if found is not None:
            return found
        body = item.checkpoint if isinstance(item.checkpoint, dict) else {}
        return {node: dict(m) for node, m in (body.get("versions_seen") or {}).items()}

    def checkpoint(self, item: CheckpointItem) -> dict[str, Any]:
        """``item``'s checkpoint with its versions translated (the source's is not changed)."""
        body = dict(item.checkpoint)
        if self.kind is not None:
            body["channel_versions"] = self.versions(item)
            body["versions_seen"] = self.seen(item)
        return body


def plan_versions(
    items: Sequence[CheckpointItem], kind: str | None, fingerprint: Callable[[Any], bytes]
) -> VersionPlan:
    """The translation of ``items`` (one thread, parents before children) into versions of
    ``kind``; ``fingerprint`` gives a value's bytes (the same value, the same bytes)."""
    plan = VersionPlan(kind)
    if kind == STR:
        _ints_to_strings(items, plan, fingerprint)
    elif kind == INT:
        _strings_to_ints(items, plan)
    return plan


def _body(item: CheckpointItem) -> dict[str, Any]:
    return item.checkpoint if isinstance(item.checkpoint, dict) else {}


def _ints_to_strings(
    items: Sequence[CheckpointItem], plan: VersionPlan, fingerprint: Callable[[Any], bytes]
) -> None:
    by_key = {(i.ns, i.checkpoint_id): i for i in items}
    #: (ns, channel, n) -> the distinct translations seen for it
    candidates: dict[tuple[str, str, int], set[str]] = {}
    for item in items:
        values = _body(item).get("channel_values") or {}
        translated: dict[str, Any] = {}
        for channel, version in item.versions.items():
            if _is_int(version):
                printed = fingerprint(values[channel]) if channel in values else ABSENT
                translated[channel] = int_to_str(version, printed)
                candidates.setdefault((item.ns, channel, version), set()).add(translated[channel])
            else:
                translated[channel] = version
        plan.channel_versions[(item.ns, item.checkpoint_id)] = translated

    def seen_version(item: CheckpointItem, channel: str, version: int) -> str:
        known = candidates.get((item.ns, channel, version), set())
        if len(known) == 1:
            return next(iter(known))
        # a reused integer (fork): the value this branch had, at its nearest ancestor
        at: CheckpointItem | None = item
        hops = 0
        while at is not None and hops <= len(by_key):
            if at.versions.get(channel) == version:
                return str(plan.channel_versions[(at.ns, at.checkpoint_id)][channel])
            at = by_key.get((at.ns, at.parent_id)) if at.parent_id else None
            hops += 1
        # not on this branch: the highest, so that it never looks newer than what is seen
        return max(known) if known else int_to_str(version, ABSENT)

    for item in items:
        seen = _body(item).get("versions_seen") or {}
        plan.versions_seen[(item.ns, item.checkpoint_id)] = {
            node: {
                channel: seen_version(item, channel, v) if _is_int(v) else v
                for channel, v in (mapping or {}).items()
            }
            for node, mapping in seen.items()
        }


def _strings_to_ints(items: Sequence[CheckpointItem], plan: VersionPlan) -> None:
    every: dict[tuple[str, str], set[str]] = {}
    for item in items:
        for channel, version in item.versions.items():
            if isinstance(version, str):
                every.setdefault((item.ns, channel), set()).add(version)
        for mapping in (_body(item).get("versions_seen") or {}).values():
            for channel, version in (mapping or {}).items():
                if isinstance(version, str):
                    every.setdefault((item.ns, channel), set()).add(version)
    numbers = {key: string_ranks(versions) for key, versions in every.items()}

    def convert(ns: str, channel: str, version: Any) -> Any:
        if not isinstance(version, str):
            return version
        return numbers[(ns, channel)][version]

    for item in items:
        key = (item.ns, item.checkpoint_id)
        plan.channel_versions[key] = {
            channel: convert(item.ns, channel, v) for channel, v in item.versions.items()
        }
        plan.versions_seen[key] = {
            node: {channel: convert(item.ns, channel, v) for channel, v in (mapping or {}).items()}
            for node, mapping in (_body(item).get("versions_seen") or {}).items()
        }


def string_ranks(versions: set[str]) -> dict[str, int]:
    """One channel's string versions as integers, in the same order: their leading integers
    when each is distinct, else their ranks (1 for the lowest)."""
    ordered = sorted(versions)
    leading = [_leading(v) for v in ordered]
    numbers = [n for n in leading if n is not None]
    if (
        len(numbers) == len(ordered)
        and len(set(numbers)) == len(numbers)
        and numbers == sorted(numbers)
        and all(n >= 1 for n in numbers)
    ):
        return {v: n for v, n in zip(ordered, numbers, strict=True)}
    return {v: rank for rank, v in enumerate(ordered, start=1)}


def _leading(version: str) -> int | None:
    match = _NUMBERED.match(version)
    return int(match.group(1)) if match else None


def _is_int(version: Any) -> bool:
    return isinstance(version, int) and not isinstance(version, bool)
