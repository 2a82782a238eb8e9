"""``graphkeep check``: fsck for threads, from the store's keys and checkpoint summaries only.

One check, written once over the checkpoint port: per thread one :meth:`CheckpointPort.inventory
<graphkeep.checkpoint.port.CheckpointPort.inventory>` (every checkpoint's
:class:`~graphkeep.checkpoint.records.Summary`, every write key, every blob key; never a
payload), and :func:`findings_of`, a pure function of it. The same function is ``prune``'s
pre-flight (:func:`plan_problems`): a plan is refused when the thread it leaves has a finding the
thread did not have before. The findings (:data:`KINDS`, docs/check.md):

- chains, per namespace: the namespace's oldest *start* (a checkpoint without a parent, or
  whose parent is not stored) is its beginning (its root, or where ``prune`` cut the history);
  any later start is a second root (``extra_root``, error) or a hole in the history
  (``missing_parent``, warning); parent ids that loop are a ``cycle`` (error); a parent with
  two or more children that runs wrote (source ``input``/``loop``), not ``update_state`` or a
  replay, is a ``concurrent_fork`` (error: runs of the thread raced; the rule and what
  LangGraph writes are in :mod:`graphkeep.checkpoint.forks`);
- values: a channel a checkpoint lists as stored (``present``) whose blob at the checkpoint's
  version is not stored (``missing_value``, error); a DeltaChannel whose value lives in
  ancestor writes (:func:`~graphkeep.checkpoint.walk.history_channels`, the channels prune
  keeps a chain for) and whose parent walk stops at a checkpoint that is not
  stored, or loops, before it reaches a stored value (``delta_no_seed``, error; a walk that
  reaches the root without one is a channel replayed from empty, as LangGraph does);
- store hygiene: pending writes under a checkpoint that is not stored (``orphan_writes``) and
  channel values no checkpoint names (``orphan_values``), both warnings: nothing ever reads
  them. List element records (:data:`~graphkeep.checkpoint.lists.ELEMENT_CHANNEL`) are named
  by manifests, which are payloads: this check does not look at them. Chunks whose stored
  record names other bytes (``orphan_chunks``, warning: an overwrite before 0.2 left them,
  unbounded growth; :attr:`~graphkeep.checkpoint.records.Inventory.stray_chunks`);
- expiry drift (:func:`expiry_drift`, from the expiries the same ``inventory`` reads): a
  stored unit whose expiry departs from its thread's (``expiry_drift``, warning).

:func:`repair_thread` deletes the orphans of one thread (its ``delete_records``; orphan chunks
by its ``drop_chunks``, which reads their owners again), never a checkpoint that is stored,
and re-arms drifting expiries to the thread's (its ``rearm``).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from graphkeep.checkpoint.deep import Problem, payload_problems
from graphkeep.checkpoint.forks import concurrent_forks
from graphkeep.checkpoint.ids import id_time
from graphkeep.checkpoint.lists import ELEMENT_CHANNEL
from graphkeep.checkpoint.port import CheckpointPort
from graphkeep.checkpoint.records import (
    HOLDS_CHECKPOINT,
    HOLDS_VALUE,
    HOLDS_WRITES,
    Expiring,
    Inventory,
    Link,
    Summary,
    ThreadDump,
)
from graphkeep.checkpoint.rekey import counted_export
from graphkeep.checkpoint.sealed import SealedPort
from graphkeep.checkpoint.walk import delta_channels, history_channels, rearmed_by
from graphkeep.errors import CorruptData, GraphkeepError
from graphkeep.port.ops import Op, counted

__all__ = [
    "ERROR",
    "EXPIRY_TOLERANCE",
    "KINDS",
    "THREAD_PAGE",
    "WARNING",
    "CheckReport",
    "Drift",
    "Finding",
    "Repair",
    "ThreadCheck",
    "add_payload_findings",
    "check_thread",
    "check_threads",
    "expiry_drift",
    "findings_of",
    "plan_problems",
    "repair_thread",
    "thread_page",
]

ERROR = "error"
WARNING = "warning"

#: every finding's kind -> (severity, what it means); docs/check.md's table is this one
KINDS: dict[str, tuple[str, str]] = {
    "cycle": (ERROR, "parent ids loop: the checkpoint is its own ancestor"),
    "extra_root": (ERROR, "a second checkpoint without a parent in the namespace"),
    "concurrent_fork": (
        ERROR,
        "two or more children of one checkpoint written by runs (not update_state or a"
        " replay): runs of the thread raced, and the older branch is gone from its state",
    ),
    "missing_value": (ERROR, "a channel value the checkpoint names is not stored"),
    "delta_no_seed": (
        ERROR,
        "a DeltaChannel's parent walk stops at a checkpoint that is not stored"
        " before it reaches a stored value",
    ),
    "missing_parent": (
        WARNING,
        "a hole in the history: the parent is not stored (not the namespace's oldest)",
    ),
    "orphan_writes": (WARNING, "pending writes under a checkpoint that is not stored"),
    "orphan_values": (WARNING, "channel values no checkpoint names"),
    "orphan_chunks": (WARNING, "chunks of bytes their stored record no longer names"),
    "expiry_drift": (
        WARNING,
        "stored records whose expiry departs from their thread's: they outlive it, or die"
        " before the newest checkpoint that needs them",
    ),
    # --deep (graphkeep.checkpoint.deep): payloads decoded
    "undecodable": (ERROR, "a stored payload the serializer cannot decode"),
    "unknown_type": (
        ERROR,
        "a value names a class this process cannot import: it reads back as raw fields",
    ),
    "plaintext": (ERROR, "a payload stored unencrypted in an encrypted deployment"),
    "missing_element": (ERROR, "a list element a checkpoint's list names is not stored"),
    "malformed_write": (ERROR, "a pending write with an empty task id or an index out of place"),
    "orphan_elements": (WARNING, "list element records no stored list names"),
}
#: the kinds ``--repair`` removes (and ``prune``'s pre-flight does not weigh)
ORPHAN_KINDS = ("orphan_writes", "orphan_values", "orphan_elements", "orphan_chunks")
#: threads per ``list_threads`` page of ``--all``
THREAD_PAGE = 500
#: orphan value versions a finding's detail names at most
_NAMED = 5
#: seconds two expiries may differ and still be one. A write stamps what it re-arms alike to
#: the millisecond (Redis, MongoDB) or the second (DynamoDB's TTL attribute is whole seconds),
#: but a read with ``refresh_ttl_on_read`` re-arms page by page, each at its own time (a
#: ``list`` of a long history on a slow server spreads them over seconds: 12 s for 21
#: checkpoints on FerretDB), and writers' clocks set expiries on MongoDB and DynamoDB. A
#: record dying a minute before its thread after a whole ``ttl`` idle is not worth a warning.
EXPIRY_TOLERANCE = 60.0


@dataclass(frozen=True, slots=True)
class Finding:
    thread_id: str
    ns: str
    #: None for a finding about a channel's values (``orphan_values``)
    checkpoint_id: str | None
    channel: str | None
    kind: str
    detail: str
    #: ``concurrent_fork``: the children, in id order (the finding's checkpoint is their parent)
    children: tuple[Link, ...] = ()

    @property
    def severity(self) -> str:
        return KINDS[self.kind][0]

    def key(self) -> tuple[str, str, str | None, str | None]:
        return (self.kind, self.ns, self.checkpoint_id, self.channel)

    def as_json(self) -> dict[str, Any]:
        found: dict[str, Any] = {
            "thread_id": self.thread_id,
            "ns": self.ns,
            "checkpoint_id": self.checkpoint_id,
            "channel": self.channel,
            "kind": self.kind,
            "severity": self.severity,
            "detail": self.detail,
        }
        if self.children:
            found["children"] = [
                {"checkpoint_id": c.checkpoint_id, "source": c.source, "run_id": c.run_id}
                for c in self.children
            ]
        return found


@dataclass(frozen=True, slots=True)
class Drift:
    """Units of one thread (``ns``: of one namespace; None: thread-wide keys) whose expiry
    drifted from the thread's expiry ``at`` (None: the thread never expires)."""

    ns: str | None
    refs: tuple[Any, ...]
    at: float | None


@dataclass(slots=True)
class ThreadCheck:
    """One thread's findings, and the orphans a repair would delete."""

    thread_id: str
    checkpoints: int
    findings: list[Finding]
    #: (ns, checkpoint_id) of writes under checkpoints that are not stored
    orphan_writes: list[tuple[str, str]] = field(default_factory=list)
    #: (ns, channel, version) of values no checkpoint names
    orphan_values: list[tuple[str, str, str]] = field(default_factory=list)
    #: the port's refs of chunks their stored record no longer names
    orphan_chunks: list[str] = field(default_factory=list)
    #: units to re-arm to the thread's expiry
    drift: list[Drift] = field(default_factory=list)
    #: requests the check of this thread sent
    requests: int = 0
    #: ``--deep``: its records per kind and key id as stored (:mod:`.rekey`)
    keys: dict[str, dict[str, int]] = field(default_factory=dict)


@dataclass(slots=True)
class CheckReport:
    """What a check of many threads found (``graphkeep check``'s report)."""

    threads: int = 0
    checkpoints: int = 0
    findings: list[Finding] = field(default_factory=list)
    #: the threads that have findings (their orphans: a repair's plan)
    flagged: list[ThreadCheck] = field(default_factory=list)
    #: the last thread checked (``--after`` resumes after it)
    last_thread: str | None = None
    requests: int = 0
    #: the most requests the check of one thread sent
    thread_requests: int = 0
    seconds: float = 0.0
    #: ``--deep``: records per key id (or ``plaintext``, ``langgraph-aes``) as stored
    key_ids: Counter[str] = field(default_factory=Counter)

    def add(self, checked: ThreadCheck) -> None:
        for by_key in checked.keys.values():
            self.key_ids.update(by_key)
        self.threads += 1
        self.checkpoints += checked.checkpoints
        self.requests += checked.requests
        self.thread_requests = max(self.thread_requests, checked.requests)
        self.last_thread = checked.thread_id
        if checked.findings:
            self.findings.extend(checked.findings)
            self.flagged.append(checked)

    def count(self, severity: str) -> int:
        return sum(1 for f in self.findings if f.severity == severity)

    @property
    def errors(self) -> int:
        return self.count(ERROR)

    @property
    def warnings(self) -> int:
        return self.count(WARNING)

    def totals(self) -> dict[str, Any]:
        kinds: dict[str, int] = {}
        for f in self.findings:
            kinds[f.kind] = kinds.get(f.kind, 0) + 1
        return {
            "threads": self.threads,
            "checkpoints": self.checkpoints,
            "errors": self.errors,
            "warnings": self.warnings,
            "kinds": dict(sorted(kinds.items())),
            **({"key_ids": dict(sorted(self.key_ids.items()))} if self.key_ids else {}),
        }


# -- the findings of one inventory -----------------------------------------------------


def _start_of(by_id: dict[str, Summary], checkpoint_id: str, memo: dict[str, str | None]) -> None:
    """Fill ``memo`` for ``checkpoint_id`` and its ancestors: the id of the start its parent
    walk ends at (a checkpoint without a stored parent), or None inside a loop."""
    path: list[str] = []
    on_path: set[str] = set()
    current: str | None = checkpoint_id
    result: str | None
    while True:
        assert current is not None
        if current in memo:
            result = memo[current]
            break
        if current in on_path:
            result = None  # a loop: everything on the path from here is in or under it
            break
        path.append(current)
        on_path.add(current)
        parent = by_id[current].parent_id
        if parent is None or parent not in by_id:
            result = current
            break
        current = parent
    for node in path:
        memo[node] = result


def _chain_findings(thread_id: str, ns: str, by_id: dict[str, Summary]) -> list[Finding]:
    memo: dict[str, str | None] = {}
    for checkpoint_id in sorted(by_id):
        _start_of(by_id, checkpoint_id, memo)
    found: list[Finding] = []
    starts = sorted({s for s in memo.values() if s is not None})
    for start in starts[1:]:
        parent = by_id[start].parent_id
        kind, detail = (
            ("extra_root", f"a second root (the namespace's first is {starts[0]})")
            if parent is None
            else (
                "missing_parent",
                f"parent {parent} is not stored (the namespace's history starts at {starts[0]})",
            )
        )
        found.append(Finding(thread_id, ns, start, None, kind, detail))
    looped = sorted(cid for cid, start in memo.items() if start is None)
    reported: set[str] = set()
    for checkpoint_id in looped:
        if checkpoint_id in reported:
            continue
        # walk to the loop itself, report it once (at its smallest id)
        seen: list[str] = []
        current = checkpoint_id
        while current not in seen:
            seen.append(current)
            current = by_id[current].parent_id or ""
        loop = seen[seen.index(current) :]
        reported.update(loop)
        if min(loop) not in [f.checkpoint_id for f in found]:
            found.append(
                Finding(
                    thread_id,
                    ns,
                    min(loop),
                    None,
                    "cycle",
                    f"parent ids loop through {len(loop)} checkpoint(s)",
                )  # fmt: skip
            )
    return found


def _seed_of(
    by_id: dict[str, Summary], channel: str, start: str | None, memo: dict[str, str]
) -> str:
    """Where the DeltaChannel ``channel``'s walk from ``start`` (a parent id) ends: ``seed``
    (an ancestor lists it as stored), ``root``, ``missing:<id>`` or ``loop:<id>``."""
    path: list[str] = []
    on_path: set[str] = set()
    current = start
    while True:
        if current is None:
            result = "root"
            break
        if current in memo:
            result = memo[current]
            break
        if current in on_path:
            result = f"loop:{current}"
            break
        summary = by_id.get(current)
        if summary is None:
            result = f"missing:{current}"
            break
        if channel in summary.present:
            result = "seed"
            break
        path.append(current)
        on_path.add(current)
        current = summary.parent_id
    for node in path:
        memo[node] = result
    return result


def _delta_findings(thread_id: str, ns: str, by_id: dict[str, Summary]) -> list[Finding]:
    found: list[Finding] = []
    # the channels prune's walk keeps for (walk.history_channels), so both agree on a chain
    known = delta_channels(by_id.values())
    wants = {cid: history_channels(s, known) for cid, s in by_id.items()}
    for channel in sorted(known):
        memo: dict[str, str] = {}
        broken: dict[str, list[str]] = {}
        for checkpoint_id in sorted(by_id):
            summary = by_id[checkpoint_id]
            if channel not in wants[checkpoint_id]:
                continue
            end = _seed_of(by_id, channel, summary.parent_id, memo)
            if end.startswith(("missing:", "loop:")):
                broken.setdefault(end, []).append(checkpoint_id)
        for end, needing in sorted(broken.items()):
            why, _, at = end.partition(":")
            stop = "is not stored" if why == "missing" else "loops"
            found.append(
                Finding(
                    thread_id,
                    ns,
                    max(needing),
                    channel,
                    "delta_no_seed",
                    f"its walk stops at {at}, which {stop}, before a stored value"
                    f" ({len(needing)} checkpoint(s) need it)",
                )  # fmt: skip
            )
    return found


def findings_of(thread_id: str, inventory: Inventory, ns: str | None = None) -> ThreadCheck:
    """The findings of one thread's inventory (only namespace ``ns`` when given)."""
    checkpoints = [s for s in inventory.checkpoints if ns is None or s.ns == ns]
    by_ns: dict[str, dict[str, Summary]] = {}
    for summary in checkpoints:
        by_ns.setdefault(summary.ns, {})[summary.checkpoint_id] = summary
    blob_keys = {k for k in inventory.blob_keys if ns is None or k[0] == ns}
    found: list[Finding] = []
    named: set[tuple[str, str, str]] = set()
    for space, by_id in sorted(by_ns.items()):
        found += _chain_findings(thread_id, space, by_id)
        for checkpoint_id, summary in sorted(by_id.items()):
            for channel in summary.present:
                version = summary.versions.get(channel)
                if version is None:
                    continue
                key = (space, channel, version)
                named.add(key)
                if key not in blob_keys:
                    found.append(
                        Finding(
                            thread_id,
                            space,
                            checkpoint_id,
                            channel,
                            "missing_value",
                            f"version {version} is not stored",
                        )  # fmt: skip
                    )
        found += _delta_findings(thread_id, space, by_id)
        found += [
            Finding(
                thread_id,
                space,
                fork.parent_id,
                None,
                "concurrent_fork",
                fork.detail(),
                fork.children,
            )  # fmt: skip
            for fork in concurrent_forks(s.link() for s in by_id.values())
        ]
    orphan_writes = sorted(
        key
        for key in inventory.write_keys
        if (ns is None or key[0] == ns) and key[1] not in by_ns.get(key[0], {})
    )
    for space, checkpoint_id in orphan_writes:
        found.append(
            Finding(
                thread_id,
                space,
                checkpoint_id,
                None,
                "orphan_writes",
                "pending writes under a checkpoint that is not stored: never read",
            )  # fmt: skip
        )
    orphan_values = sorted(k for k in blob_keys - named if k[1] != ELEMENT_CHANNEL)
    grouped: dict[tuple[str, str], list[str]] = {}
    for space, channel, version in orphan_values:
        grouped.setdefault((space, channel), []).append(version)
    for (space, channel), versions in sorted(grouped.items()):
        listed = ", ".join(versions[:_NAMED]) + (", ..." if len(versions) > _NAMED else "")
        found.append(
            Finding(
                thread_id,
                space,
                None,
                channel,
                "orphan_values",
                f"{len(versions)} stored value(s) no checkpoint names: version(s) {listed}",
            )  # fmt: skip
        )
    chunks = sorted(inventory.stray_chunks) if ns is None else []
    if chunks:
        detail = f"{len(chunks)} chunk(s) of bytes their stored record no longer names"
        found.append(Finding(thread_id, "", None, None, "orphan_chunks", detail))
    return ThreadCheck(thread_id, len(checkpoints), found, orphan_writes, orphan_values, chunks)


# -- expiry drift ----------------------------------------------------------------------


def _when(at: float | None) -> str:
    if at is None:
        return "never"
    return datetime.fromtimestamp(round(at), timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _drifting(
    head: list[Expiring], units: list[Expiring], needed: Callable[[Expiring], bool] | None
) -> tuple[float | None, list[Expiring]]:
    """The thread's expiry and the units that drift from it.

    The thread's expiry is its newest checkpoint's (``head``: its units), what the last write
    of it (or a read, with ``refresh_ttl_on_read``) set: the latest among them, None when none
    expires (the thread was saved without TTL). ``needed`` tells the units that must not expire
    before it; None: every unit must expire with it (keys that every write re-arms together)."""
    if all(u.at is None for u in head):
        return None, [u for u in units if u.at is not None]
    at = max(u.at for u in head if u.at is not None)
    drifting = []
    for u in units:
        if u.at is None:  # outlives its thread
            drifting.append(u)
        elif needed is None:
            if abs(u.at - at) > EXPIRY_TOLERANCE:
                drifting.append(u)
        elif u.at < at - EXPIRY_TOLERANCE and needed(u):  # dies before what needs it
            drifting.append(u)
    return at, drifting


def _drift_detail(space: str | None, at: float | None, drifting: list[Expiring]) -> str:
    never = sum(1 for u in drifting if u.at is None)
    times = sorted(u.at for u in drifting if u.at is not None)
    parts = [f"{never} never expire"] if never else []
    if times:
        span = (
            f"at {_when(times[0])}"
            if times[-1] - times[0] <= EXPIRY_TOLERANCE
            else f"between {_when(times[0])} and {_when(times[-1])}"
        )
        parts.append(f"{len(times)} expire {span}")
    noun, whose = ("key(s)", "the thread") if space is None else ("record(s)", "the namespace")
    held = ", ".join(sorted({u.holds for u in drifting}))
    return (
        f"{len(drifting)} {noun} ({held}) expire apart from {whose}: {', '.join(parts)};"
        f" {whose} expires {'at ' + _when(at) if at is not None else 'never'}"
    )


def expiry_drift(
    thread_id: str, inventory: Inventory, ns: str | None = None
) -> tuple[list[Finding], list[Drift]]:
    """Expiry drift of one thread (docs/check.md): units whose expiry departs from the thread's.

    Where every write re-arms all of a thread's keys (Redis: units with ``ns`` None) they
    must all expire together. Where a write re-arms what its checkpoint needs (MongoDB,
    DynamoDB: one unit per record) older history expires on its own schedule, and an older
    checkpoint a read re-armed may outlive the newest, by design; per namespace, what its
    newest checkpoint needs (:func:`~graphkeep.checkpoint.walk.rearmed_by`) must not expire
    before the newest checkpoint.
    Everywhere, a thread that expires holds nothing that never does, and a thread whose newest
    checkpoint never expires holds nothing that does. List elements expire later by design
    (MongoDB) and are named by payloads: only that last rule covers them. One finding per
    thread (Redis) or namespace, with a count and the range."""
    if not inventory.expiries or not inventory.checkpoints:
        return [], []
    by_ns: dict[str, dict[str, Summary]] = {}
    for summary in inventory.checkpoints:
        by_ns.setdefault(summary.ns, {})[summary.checkpoint_id] = summary
    groups: list[tuple[str | None, float | None, list[Expiring]]] = []
    keys = [u for u in inventory.expiries if u.ns is None]
    if keys:
        held = [u for u in keys if u.holds == HOLDS_CHECKPOINT]
        if held:
            groups.append((None, *_drifting(held, keys, None)))
    for space, by_id in sorted(by_ns.items()):
        if ns is not None and space != ns:
            continue
        units = [u for u in inventory.expiries if u.ns == space]
        newest = by_id[max(by_id)]
        head = [
            u
            for u in units
            if u.holds == HOLDS_CHECKPOINT and u.checkpoint_id == newest.checkpoint_id
        ]
        if not head:
            continue
        ids, values = rearmed_by(newest, by_id)

        def needed(u: Expiring, ids: set[str] = ids, values: set[Any] = values) -> bool:
            if u.holds in (HOLDS_CHECKPOINT, HOLDS_WRITES):
                return u.checkpoint_id in ids
            return u.holds == HOLDS_VALUE and (u.channel, u.version) in values

        groups.append((space, *_drifting(head, units, needed)))
    findings: list[Finding] = []
    drifts: list[Drift] = []
    for where, at, drifting in groups:
        if drifting:
            detail = _drift_detail(where, at, drifting)
            findings.append(Finding(thread_id, where or "", None, None, "expiry_drift", detail))
            drifts.append(Drift(where, tuple(u.ref for u in drifting), at))
    return findings, drifts


def plan_problems(
    thread_id: str,
    inventory: Inventory,
    checkpoints: Iterable[tuple[str, str]],
    blobs: Iterable[tuple[str, str, str]],
) -> list[Finding]:
    """The findings a deletion plan (``delete_records``' ``checkpoints`` with their writes,
    and ``blobs``) would add to the thread: what a kept checkpoint would lose (a DeltaChannel
    seed or a parent its walk needs, a value, a hole in its history). Orphans do not count."""
    doomed = set(checkpoints)
    after = Inventory(
        [s for s in inventory.checkpoints if (s.ns, s.checkpoint_id) not in doomed],
        inventory.write_keys - doomed,
        inventory.blob_keys - set(blobs),
    )
    before = {f.key() for f in findings_of(thread_id, inventory).findings}
    return [
        f
        for f in findings_of(thread_id, after).findings
        if f.kind not in ORPHAN_KINDS and f.key() not in before
    ]


# -- ops over the port -----------------------------------------------------------------


def check_thread(
    port: CheckpointPort, thread_id: str, ns: str | None = None, serde: Any = None
) -> Op[ThreadCheck]:
    """The op checking one thread: one ``inventory``, no payload; with ``serde`` (``--deep``)
    also one ``export_thread``, every payload decoded with it (:mod:`.deep`)."""
    tally = [0]
    _, checked = yield from counted(_read(port, thread_id, ns, serde), tally)
    checked.requests = tally[0]
    return checked


def _read(
    port: CheckpointPort, thread_id: str, ns: str | None, serde: Any
) -> Op[tuple[Inventory, ThreadCheck]]:
    inventory = yield from port.inventory(thread_id)
    checked = findings_of(thread_id, inventory, ns)
    drift_findings, checked.drift = expiry_drift(thread_id, inventory, ns)
    checked.findings += drift_findings
    if serde is not None:
        dump: ThreadDump | Exception
        try:
            checked.keys, dump = yield from counted_export(port, thread_id)
        except GraphkeepError as exc:
            if not isinstance(exc, CorruptData):
                raise
            dump = exc
        except Exception as exc:  # noqa: BLE001 - records the backend cannot parse
            dump = exc
        sealed = isinstance(port, SealedPort)
        add_payload_findings(checked, dump, serde, ns, inventory, sealed=sealed)
    return inventory, checked


def add_payload_findings(
    checked: ThreadCheck,
    dump: ThreadDump | Exception,
    serde: Any,
    ns: str | None = None,
    stored: Inventory | None = None,
    *,
    sealed: bool = False,
) -> None:
    """``--deep``: add to ``checked`` the problems of the thread's payloads (``dump``, its
    export, decoded with ``serde``: :func:`~graphkeep.checkpoint.deep.payload_problems`), or
    one ``undecodable`` finding when reading the export failed (``dump`` is the exception)."""
    orphans: list[tuple[str, str, str]] = []
    if isinstance(dump, Exception):
        problems = [_unreadable(ns, dump)]
    else:
        problems, orphans = payload_problems(dump, serde, ns, stored, sealed=sealed)
    checked.findings += [
        Finding(checked.thread_id, p.ns, p.checkpoint_id, p.channel, p.kind, p.detail)
        for p in problems
    ]
    checked.orphan_values += orphans


def _unreadable(ns: str | None, exc: Exception) -> Problem:
    text = " ".join(str(exc).split())[:200]
    return Problem(
        "undecodable", ns or "", None, None, f"the thread's records: {type(exc).__name__}: {text}"
    )


def check_threads(
    port: CheckpointPort, thread_ids: Iterable[str], ns: str | None = None, serde: Any = None
) -> Op[CheckReport]:
    """The op checking ``thread_ids`` in order (threads without checkpoints, writes or values
    are counted and have no finding); ``serde``: ``--deep``."""
    started = time.perf_counter()
    report = CheckReport()
    for thread_id in thread_ids:
        report.add((yield from check_thread(port, thread_id, ns, serde)))
    report.seconds = time.perf_counter() - started
    return report


def thread_page(
    port: CheckpointPort, cursor: Any, after: str | None, page_size: int = THREAD_PAGE
) -> Op[tuple[list[str], Any, int]]:
    """One ``list_threads`` page for ``--all``: the threads above ``after``, in id order
    (every backend's pages are in id order, or one page), the next cursor and the requests."""
    tally = [0]
    threads, cursor = yield from counted(port.list_threads(cursor, page_size), tally)
    return sorted(t for t in threads if after is None or t > after), cursor, tally[0]


@dataclass(slots=True)
class Repair:
    """What :func:`repair_thread` did to one thread."""

    thread_id: str
    writes: list[tuple[str, str]]
    values: list[tuple[str, str, str]]
    #: the refs of the orphan chunks deleted
    chunks: list[str] = field(default_factory=list)
    #: what the grace period kept from the repair, if anything
    skipped: str | None = None
    requests: int = 0
    #: units whose expiry was re-armed to the thread's
    rearmed: int = 0


def repair_thread(
    port: CheckpointPort,
    planned: ThreadCheck,
    grace: float,
    now: float | None = None,
    serde: Any = None,
) -> Op[Repair]:
    """Delete the orphans of ``planned`` (a check of the thread) that a second read still shows
    as orphans: writes under checkpoints that are still not stored and values no checkpoint
    names, never a stored checkpoint; and re-arm the units whose expiry drifted in both reads
    to the thread's expiry as the second read has it (``rearm``; nothing is rewritten).

    ``grace`` (seconds) keeps a repair off what a run may be writing right now (LangGraph's
    checkpoint ids carry their time): writes whose checkpoint id is younger (a put in flight
    may store its writes before its checkpoint lands), and the values and expiries of a
    thread with a checkpoint or write younger (a put in flight stores values before its
    checkpoint, and re-arms expiries itself). Ids without a time count as young; ``grace=0``
    turns this off. ``serde``: the check was deep (its orphan list elements are read again
    the same way)."""
    at = time.time() if now is None else now
    tally = [0]
    inventory, again = yield from counted(_read(port, planned.thread_id, None, serde), tally)

    def young(checkpoint_id: str) -> bool:
        stamp = id_time(checkpoint_id)
        return grace > 0 and (stamp is None or stamp > at - grace)

    writes = sorted(set(planned.orphan_writes) & set(again.orphan_writes))
    values = sorted(set(planned.orphan_values) & set(again.orphan_values))
    chunks = sorted(set(planned.orphan_chunks) & set(again.orphan_chunks))
    ids = [s.checkpoint_id for s in inventory.checkpoints] + [k[1] for k in inventory.write_keys]
    busy = any(young(cid) for cid in ids)
    before = {ref for d in planned.drift for ref in d.refs}
    # a thread already past its expiry is left to expire (an expiry in the past deletes)
    drift = [
        Drift(d.ns, tuple(r for r in d.refs if r in before), d.at)
        for d in again.drift
        if d.at is None or d.at > at + EXPIRY_TOLERANCE
    ]
    drift = [d for d in drift if d.refs]
    repair = Repair(
        planned.thread_id,
        [k for k in writes if not young(k[1])],
        [] if busy else values,
        [] if busy else chunks,
    )
    held = len(writes) - len(repair.writes), len(values) - len(repair.values)
    rearm = [] if busy else drift
    held_units = sum(len(d.refs) for d in drift) - sum(len(d.refs) for d in rearm)
    held_chunks = len(chunks) - len(repair.chunks)
    if any(held) or held_units or held_chunks:
        repair.skipped = (
            f"written within the grace period: kept writes of {held[0]} checkpoint(s),"
            f" {held[1]} value(s)"
            + (f", {held_chunks} chunk(s)" if held_chunks else "")
            + (f", the expiry of {held_units} unit(s)" if held_units else "")
        )
    if repair.writes or repair.values:
        # ``delete_records`` deletes checkpoints with their writes: only ids that are not
        # stored (orphan writes, by their definition) go to it, so no checkpoint is deleted
        yield from counted(
            port.delete_records(planned.thread_id, repair.writes, repair.values), tally
        )
    if repair.chunks:  # deleted only while their owner still names other bytes
        yield from counted(port.drop_chunks(planned.thread_id, frozenset(repair.chunks)), tally)
    for d in rearm:
        yield from counted(port.rearm(planned.thread_id, list(d.refs), d.at), tally)
        repair.rearmed += len(d.refs)
    repair.requests = tally[0]
    return repair
