"""Schema migrations: checkpoints written by older code, read upgraded by newer code.

A saver opened with ``schema_version=N`` records ``"schema_version": N`` in the metadata of
every checkpoint it writes. With ``migrations={k: upgrade_k_to_k_plus_1, ...}`` it upgrades,
on every read (``get_tuple``, ``list``, ``get_state_history``, subgraph reads, ``watch``),
the state of a checkpoint stored at an older version through the chain ``k → k+1 → … → N``,
lazily: what is stored is never rewritten (``graphkeep migrate`` does that on purpose, by
appending one upgraded checkpoint per thread).

A migration is ``def upgrade(state: StateUpgrade) -> None``: it changes ``state`` in place
(channel values, channel versions, versions seen and pending writes). The helpers
:meth:`StateUpgrade.rename` and :meth:`StateUpgrade.move` keep the bookkeeping LangGraph
needs consistent (a renamed channel keeps its version, so no node runs again because of it).

A pending write stored at an old checkpoint may already be in the new shape: resuming a
version-1 checkpoint under version 2 stores version-2 writes at that version-1 checkpoint.
A migration must leave such writes alone; ``rename`` and ``move`` do (a write already on the
new channel is not touched).

A checkpoint without ``schema_version`` in its metadata (written before versioning) is taken
as the first version of the chain (its lowest key), or as ``N`` when there are no migrations.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from langgraph.checkpoint.base import CheckpointTuple

from graphkeep.checkpoint.append import MIGRATED_KEY, appended_identity, appended_metadata
from graphkeep.errors import ConfigurationError, MigrationFailed, SchemaVersionTooNew

#: the metadata key every put of a versioned saver records
SCHEMA_VERSION_KEY = "schema_version"

Migration = Callable[["StateUpgrade"], None]


@dataclass(slots=True)
class StateUpgrade:
    """The state of one checkpoint on its way from ``from_version`` to ``from_version + 1``.

    ``values``: channel name → value (the checkpoint's ``channel_values``);
    ``channel_versions``: channel → version; ``versions_seen``: node → channel → version;
    ``pending_writes``: ``(task_id, channel, value)`` of the checkpoint's pending writes.
    ``thread_id``, ``checkpoint_ns`` and ``checkpoint_id`` say which checkpoint it is
    (read-only: changing them changes nothing).
    """

    values: dict[str, Any]
    channel_versions: dict[str, Any]
    versions_seen: dict[str, dict[str, Any]]
    pending_writes: list[tuple[str, str, Any]]
    thread_id: str
    checkpoint_ns: str
    checkpoint_id: str
    from_version: int
    updated_channels: list[str] | None = field(default=None)
    #: every ``move`` / ``rename`` made, in order: ``(old, new, value, write)``
    moves: list[tuple[str, str, Any, Any]] = field(default_factory=list)

    def rename(self, old: str, new: str) -> None:
        """Channel ``old`` is now ``new``: its value, its version, every node's version seen
        of it and the pending writes to it move over unchanged. A no-op for what is already
        on ``new``."""
        self.move(old, new)

    def move(
        self,
        old: str,
        new: str,
        value: Callable[[Any], Any] | None = None,
        write: Callable[[Any], Any] | None = None,
    ) -> None:
        """Channel ``old``'s value moves to channel ``new`` as ``value(old_value)`` (the value
        as it is without ``value``), and each pending write to ``old`` becomes a write to
        ``new`` of ``write(update)`` (as it is without ``write``). The version moves with it,
        so the new channel does not look updated to the nodes that had seen the old one.

        The way to change a channel's reducer: a new channel with the new reducer, seeded
        from the old one's value (never a changed reducer on the same channel)."""
        if old == new:
            return
        self.moves.append((old, new, value, write))
        if old in self.values:
            moved = self.values.pop(old)
            self.values[new] = moved if value is None else value(moved)
        if old in self.channel_versions:
            self.channel_versions[new] = self.channel_versions.pop(old)
        for seen in self.versions_seen.values():
            if old in seen:
                seen[new] = seen.pop(old)
        if self.updated_channels is not None:
            self.updated_channels = [new if ch == old else ch for ch in self.updated_channels]
        self.pending_writes = [
            (task, new, val if write is None else write(val)) if ch == old else (task, ch, val)
            for task, ch, val in self.pending_writes
        ]

    def drop(self, channel: str) -> None:
        """Forget ``channel``: its value, version, versions seen and pending writes."""
        self.values.pop(channel, None)
        self.channel_versions.pop(channel, None)
        for seen in self.versions_seen.values():
            seen.pop(channel, None)
        if self.updated_channels is not None:
            self.updated_channels = [ch for ch in self.updated_channels if ch != channel]
        self.pending_writes = [w for w in self.pending_writes if w[1] != channel]


@dataclass(frozen=True, slots=True)
class Alias:
    """An older name of a channel, for DeltaChannel history: a seed stored under ``name`` is
    ``value`` of it, a write to ``name`` is ``write`` of it (composed over the steps)."""

    name: str
    value: Callable[[Any], Any]
    write: Callable[[Any], Any]
    #: the version whose step renamed ``name`` first
    step: int


def _compose(first: Callable[[Any], Any], then: Any) -> Callable[[Any], Any]:
    return first if then is None else (lambda v: then(first(v)))


def _identity(value: Any) -> Any:
    return value


@dataclass(frozen=True, slots=True)
class Schema:
    """A saver's checked ``schema_version`` and ``migrations``."""

    version: int
    migrations: Mapping[int, Migration]
    #: channel -> its older names (:meth:`aliases`), found once
    found_aliases: dict[str, list[Alias]] = field(default_factory=dict, compare=False)
    probed: list[bool] = field(default_factory=list, compare=False)

    def aliases(self) -> dict[str, list[Alias]]:
        """Each channel's older names, from the ``rename`` / ``move`` calls the chain makes
        on an empty state (what DeltaChannel history reads under those names).

        A migration that reads a value (or raises) on the empty state contributes no
        alias: renames of DeltaChannels must be unconditional ``rename`` / ``move`` calls.
        """
        if self.probed:
            return self.found_aliases
        names: dict[str, list[Alias]] = {}
        for step in range(self.unversioned, self.version):
            probe = StateUpgrade({}, {}, {}, [], "", "", "", step)
            try:
                self.migrations[step](probe)
            except Exception:
                continue
            for old, new, value, write in probe.moves:
                older = names.pop(old, [])
                here = Alias(old, value or _identity, write or _identity, step)
                names[new] = (
                    [
                        Alias(a.name, _compose(a.value, value), _compose(a.write, write), a.step)
                        for a in older
                    ]
                    + [here]
                    + names.get(new, [])
                )
        self.found_aliases.update(names)
        self.probed.append(True)
        return self.found_aliases

    @property
    def unversioned(self) -> int:
        """The version of a checkpoint whose metadata names none."""
        return min(self.migrations, default=self.version)

    def stored_version(self, metadata: Any) -> int:
        """The version a checkpoint's metadata records (see :attr:`unversioned`)."""
        found = metadata.get(SCHEMA_VERSION_KEY) if isinstance(metadata, Mapping) else None
        if isinstance(found, bool) or not isinstance(found, int):
            return self.unversioned
        return found

    def upgrade(
        self,
        checkpoint: dict[str, Any],
        pending_writes: list[tuple[str, str, Any]],
        stored: int,
        place: tuple[str, str, str],
    ) -> list[tuple[str, str, Any]]:
        """Bring ``checkpoint`` (in place) and ``pending_writes`` (returned) from ``stored`` to
        :attr:`version`; ``place`` is ``(thread_id, checkpoint_ns, checkpoint_id)``."""
        thread_id, ns, checkpoint_id = place
        if stored > self.version:
            raise SchemaVersionTooNew(
                f"thread {thread_id!r}, namespace {ns!r}, checkpoint {checkpoint_id!r} was"
                f" written with schema_version {stored}, newer than this code's"
                f" {self.version}: it is not read downgraded; run the newer code (or a"
                " saver opened with its schema_version and migrations)",
                thread_id=thread_id,
                checkpoint_ns=ns,
                checkpoint_id=checkpoint_id,
                stored_version=stored,
                running_version=self.version,
            )
        if stored == self.version:
            return pending_writes
        seen = checkpoint.get("versions_seen")
        updated = checkpoint.get("updated_channels")
        state = StateUpgrade(
            values=checkpoint.setdefault("channel_values", {}),
            channel_versions=checkpoint.setdefault("channel_versions", {}),
            versions_seen=seen if isinstance(seen, dict) else {},
            pending_writes=list(pending_writes),
            thread_id=thread_id,
            checkpoint_ns=ns,
            checkpoint_id=checkpoint_id,
            from_version=stored,
            updated_channels=list(updated) if isinstance(updated, list) else None,
        )
        for step in range(stored, self.version):
            state.from_version = step
            migration = self.migrations.get(step)
            where = (
                f"thread {thread_id!r}, namespace {ns!r}, checkpoint {checkpoint_id!r}"
                f" (schema_version {stored}), step {step} → {step + 1}"
            )
            if migration is None:
                raise MigrationFailed(
                    f"{where}: no migration from version {step} (the chain starts at"
                    f" {self.unversioned})",
                    thread_id=thread_id,
                    checkpoint_ns=ns,
                    checkpoint_id=checkpoint_id,
                    step=step,
                )
            try:
                migration(state)
            except Exception as exc:
                raise MigrationFailed(
                    f"{where}: the migration raised {type(exc).__name__}: {exc}",
                    thread_id=thread_id,
                    checkpoint_ns=ns,
                    checkpoint_id=checkpoint_id,
                    step=step,
                ) from exc
        checkpoint["channel_values"] = state.values
        checkpoint["channel_versions"] = state.channel_versions
        if isinstance(seen, dict):
            checkpoint["versions_seen"] = state.versions_seen
        if state.updated_channels is not None:
            checkpoint["updated_channels"] = state.updated_channels
        return state.pending_writes


@dataclass(frozen=True, slots=True)
class HeadUpgrade:
    """The checkpoint ``graphkeep migrate`` appends after a head stored at an older version:
    the head's state upgraded, as a child of the head (``put(parent_config, checkpoint,
    metadata, new_versions)``)."""

    parent_config: Any
    checkpoint: dict[str, Any]
    metadata: dict[str, Any]
    new_versions: dict[str, Any]
    from_version: int
    #: pending writes of the head that the child does not carry (see :func:`upgrade_head`)
    pending_writes_left: int
    #: the head had a pending interrupt
    interrupted: bool


def upgrade_head(
    head: CheckpointTuple, schema: Schema, next_version: Callable[[Any], Any]
) -> HeadUpgrade | None:
    """The child checkpoint holding ``head``'s state at ``schema.version`` (None when the head
    is already there), ``head`` as stored (read by a saver without ``schema_version``).

    Channels whose value changed, appeared or was renamed get one new version (after the
    highest one, as LangGraph's own steps do) and are the ``new_versions``; every node that
    had seen such a channel's previous version is marked as having seen the new one, so no
    node runs again because of the migration. ``updated_channels`` stays the head's, so the
    same tasks are next. Like LangGraph's ``__copy__`` fork, the child does not carry the
    head's pending writes: task ids derive from the checkpoint id, so a task that was
    interrupted (or had finished beside an interrupted one) runs again on resume, and an
    interrupt is raised again there (``Command(resume=value)`` answers it).
    Raises :class:`~graphkeep.errors.MigrationFailed` / ``SchemaVersionTooNew`` as reads do.
    """
    conf = head.config["configurable"]
    stored = schema.stored_version(head.metadata)
    if stored == schema.version:
        return None
    raw = head.checkpoint
    upgraded: dict[str, Any] = copy.deepcopy(dict(raw))
    writes = schema.upgrade(
        upgraded,
        copy.deepcopy(list(head.pending_writes or [])),
        stored,
        (conf["thread_id"], conf.get("checkpoint_ns", ""), conf["checkpoint_id"]),
    )
    values: dict[str, Any] = upgraded["channel_values"]
    versions: dict[str, Any] = dict(upgraded["channel_versions"])
    raw_values = raw.get("channel_values") or {}
    raw_versions = raw.get("channel_versions") or {}
    changed = [
        ch
        for ch, value in values.items()
        if ch not in raw_values
        or raw_versions.get(ch) != versions.get(ch)
        or not _same(raw_values[ch], value)
    ]
    new_versions: dict[str, Any] = {}
    if changed:
        bumped = next_version(max(versions.values(), default=None))
        for ch in changed:
            previous = versions.get(ch)
            versions[ch] = new_versions[ch] = bumped
            for seen in (upgraded.get("versions_seen") or {}).values():
                if ch in seen and seen[ch] == previous:
                    seen[ch] = bumped
    # counters_since_delta_snapshot is carried: the child replays its DeltaChannels through
    # the head, as the head did
    metadata = appended_metadata(head)
    metadata[SCHEMA_VERSION_KEY] = schema.version
    metadata[MIGRATED_KEY] = {
        "from_checkpoint_id": conf["checkpoint_id"],
        "from_version": stored,
        "to_version": schema.version,
    }
    upgraded.update(appended_identity(metadata))
    upgraded["channel_versions"] = versions
    return HeadUpgrade(
        parent_config={"configurable": {**conf}},
        checkpoint=upgraded,
        metadata=metadata,
        new_versions=new_versions,
        from_version=stored,
        pending_writes_left=len(writes),
        interrupted=any(w[1] == "__interrupt__" for w in writes),
    )


def _same(a: Any, b: Any) -> bool:
    try:
        return bool(a == b) and type(a) is type(b)
    except Exception:  # a value whose == raises is taken as changed
        return False


def check_schema(schema_version: Any, migrations: Any) -> Schema | None:
    """The :class:`Schema` of a saver's options (None: unversioned), or
    :class:`~graphkeep.errors.ConfigurationError` for a version that is not a positive int,
    migrations without a version, or a chain with a missing step."""
    if schema_version is None:
        if migrations:
            raise ConfigurationError("migrations need schema_version (the version they reach)")
        return None
    if isinstance(schema_version, bool) or not isinstance(schema_version, int):
        raise ConfigurationError(f"schema_version must be a positive int, got {schema_version!r}")
    if schema_version < 1:
        raise ConfigurationError(f"schema_version must be a positive int, got {schema_version!r}")
    if migrations is None:
        migrations = {}
    if not isinstance(migrations, Mapping):
        raise ConfigurationError(
            "migrations must map a version k to the function upgrading k to k+1,"
            f" got {type(migrations).__name__}"
        )
    for key, fn in migrations.items():
        if isinstance(key, bool) or not isinstance(key, int) or key < 1:
            raise ConfigurationError(f"migrations keys must be positive ints, got {key!r}")
        if key >= schema_version:
            raise ConfigurationError(
                f"migrations[{key}] upgrades {key} to {key + 1}, beyond"
                f" schema_version {schema_version}"
            )
        if not callable(fn):
            raise ConfigurationError(f"migrations[{key}] must be callable, got {fn!r}")
    if migrations:
        missing = [k for k in range(min(migrations), schema_version) if k not in migrations]
        if missing:
            raise ConfigurationError(
                f"migrations chain to schema_version {schema_version} has no step"
                f" {', '.join(f'{k} → {k + 1}' for k in missing)}"
            )
    return Schema(schema_version, dict(migrations))


def history_upgrade(
    alias: Alias, transform: Callable[[Any], Any], value: Any, place: tuple[str, str, str]
) -> Any:
    """``transform(value)`` for a DeltaChannel seed or write found under ``alias.name``;
    :class:`~graphkeep.errors.MigrationFailed` naming where when it raises."""
    try:
        return transform(value)
    except Exception as exc:
        thread_id, ns, checkpoint_id = place
        raise MigrationFailed(
            f"thread {thread_id!r}, namespace {ns!r}, checkpoint {checkpoint_id!r}: DeltaChannel"
            f" history under the older name {alias.name!r}, step {alias.step} →"
            f" {alias.step + 1}: the migration raised {type(exc).__name__}: {exc}",
            thread_id=thread_id,
            checkpoint_ns=ns,
            checkpoint_id=checkpoint_id,
            step=alias.step,
        ) from exc


__all__ = [
    "Alias",
    "MIGRATED_KEY",
    "SCHEMA_VERSION_KEY",
    "HeadUpgrade",
    "Migration",
    "Schema",
    "StateUpgrade",
    "check_schema",
    "history_upgrade",
    "upgrade_head",
]
