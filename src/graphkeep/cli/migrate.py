"""``graphkeep migrate``: bring every thread's head to a schema version, eagerly.

Savers opened with ``schema_version=N, migrations=...`` already read older checkpoints
upgraded, lazily (:mod:`graphkeep.checkpoint.migrations`); this command is for when the
stored heads themselves must be at ``N`` (before dropping an old migration, for tools that
read the store without the migrations). For each thread and each of its namespaces whose
newest checkpoint is stored at an older version, under the thread's lease
(``saver.lock(thread, blocking=False)``; a thread another process holds is skipped and
reported), it appends ONE child checkpoint holding the upgraded state
(:func:`~graphkeep.checkpoint.migrations.upgrade_head`: ``source: "update"``, metadata
``graphkeep_migrate`` naming the source checkpoint and both versions); history is kept.
Then it reads the new head back and compares it (verification).

Idempotent and resumable: a head already at ``N`` is left alone (checked under the lease),
so re-running after an interruption finishes the batch without migrating a thread twice.
``--dry-run`` reads and upgrades in memory, writes nothing (not even the lease).
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, TextIO, cast

from langgraph.checkpoint.base import Checkpoint, CheckpointMetadata

from graphkeep.checkpoint.migrations import Schema, check_schema, upgrade_head
from graphkeep.checkpoint.saver import SaverBase
from graphkeep.cli.arguments import import_object
from graphkeep.cli.batch import batch_exit, each_thread, report_not_found
from graphkeep.cli.console import UsageError, print_json
from graphkeep.cli.endpoints import Native, open_endpoint, require_graphkeep
from graphkeep.errors import ConfigurationError, GraphkeepError, LockNotAcquired
from graphkeep.moving.decode import app_serde
from graphkeep.moving.items import thread_config

#: seconds of the lease a thread's migration holds (it takes a few requests per namespace)
LEASE_SECONDS = 60.0

MIGRATED, WOULD_MIGRATE, UP_TO_DATE, LOCKED, FAILED = (
    "migrated",
    "would_migrate",
    "up_to_date",
    "locked",
    "failed",
)


@dataclass
class NamespaceMigration:
    """One namespace head's migration, as ``--json`` prints it (field by field)."""

    checkpoint_ns: str
    from_checkpoint_id: str
    from_version: int
    checkpoint_id: str | None = None
    channels_changed: list[str] = field(default_factory=list)
    pending_writes_left: int = 0
    interrupted: bool = False
    verified: bool | None = None


@dataclass
class ThreadMigration:
    """One thread's migration, as ``--json`` prints it (field by field)."""

    thread_id: str
    status: str = UP_TO_DATE
    namespaces: list[NamespaceMigration] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def load_migrations(spec: str) -> Mapping[int, Any]:
    """``module:attr`` → the migrations mapping it names (see :func:`import_object`)."""
    found = import_object(spec, "--migrations", "myapp.schema:MIGRATIONS")
    if not isinstance(found, Mapping):
        raise UsageError(
            f"--migrations: {spec} is a {type(found).__name__}, not a mapping of version"
            " to migration function"
        )
    return found


def cmd_migrate(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    require_graphkeep(args.url, "migrate")
    migrations = load_migrations(args.migrations)
    try:
        schema = check_schema(args.to, migrations)
    except ConfigurationError as exc:
        raise UsageError(str(exc)) from exc
    assert schema is not None
    # the app's own values are read and written (its migrations are imported, so are its
    # classes): LangGraph's serializer, encrypting like the app when LANGGRAPH_AES_KEY is set
    with open_endpoint(args.url, key_prefix=args.key_prefix, serde=app_serde()) as endpoint:
        assert isinstance(endpoint, Native)
        results, missing = each_thread(
            "migrate",
            args,
            endpoint,
            lambda thread_id: migrate_thread(endpoint, schema, thread_id, dry_run=args.dry_run),
            err,
        )
        label = endpoint.label
    counts = {
        s: sum(r.status == s for r in results)
        for s in (MIGRATED, WOULD_MIGRATE, UP_TO_DATE, LOCKED, FAILED)
    }
    unfinished = counts[LOCKED] + counts[FAILED]
    if args.json:
        print_json(
            {
                "url": label,
                "to_version": schema.version,
                "dry_run": args.dry_run,
                "threads": [asdict(r) for r in results],
                "not_found": missing,
                "summary": counts,
                "ok": not unfinished and not missing,
            },
            out,
        )
    else:
        for r in results:
            if r.status == UP_TO_DATE:
                continue
            out.write(f"{r.thread_id}: {r.status.replace('_', ' ')}\n")
            for n in r.namespaces:
                ns = f" namespace {n.checkpoint_ns!r}" if n.checkpoint_ns else ""
                into = f" -> {n.checkpoint_id}" if n.checkpoint_id else ""
                note = " (interrupted: resume with Command(resume=...))" if n.interrupted else ""
                out.write(
                    f"  {n.from_checkpoint_id}{ns} v{n.from_version} -> v{schema.version}{into}"
                    f"{note}\n"
                )
            for problem in r.problems:
                out.write(f"  ! {problem}\n")
        report_not_found(missing, label, err)
        done = counts[WOULD_MIGRATE] if args.dry_run else counts[MIGRATED]
        out.write(
            f"{done} thread(s) {'to migrate' if args.dry_run else 'migrated'} to"
            f" v{schema.version}, {counts[UP_TO_DATE]} already there, {counts[LOCKED]} locked"
            f" (skipped: re-run later), {counts[FAILED]} failed\n"
        )
    return batch_exit(failed=bool(unfinished), missing=bool(missing))


def migrate_thread(
    endpoint: Native, schema: Schema, thread_id: str, *, dry_run: bool
) -> ThreadMigration | None:
    """Bring every namespace head of ``thread_id`` to ``schema.version`` (None: no thread)."""
    saver = endpoint.saver
    inventory = endpoint.call(saver.port.inventory(saver.check_thread_id(thread_id)))
    namespaces = sorted({s.ns for s in inventory.checkpoints})
    if not namespaces:
        return None
    result = ThreadMigration(thread_id)
    if dry_run:
        _migrate_namespaces(saver, schema, result, namespaces, write=False)
        return result
    try:
        with saver.lock(thread_id, ttl=LEASE_SECONDS, blocking=False):
            _migrate_namespaces(saver, schema, result, namespaces, write=True)
    except LockNotAcquired:
        result.status = LOCKED
        result.problems.append("the thread's lease is held (a live run?): skipped, re-run later")
    return result


def _migrate_namespaces(
    saver: SaverBase, schema: Schema, result: ThreadMigration, namespaces: list[str], *, write: bool
) -> None:
    for ns in namespaces:
        head = saver.get_tuple(thread_config(result.thread_id, ns))
        if head is None:
            continue
        try:
            plan = upgrade_head(head, schema, saver.get_next_version)
        except GraphkeepError as exc:
            result.status = FAILED
            result.problems.append(str(exc))
            continue
        if plan is None:
            continue
        item = NamespaceMigration(
            checkpoint_ns=ns,
            from_checkpoint_id=head.config["configurable"]["checkpoint_id"],
            from_version=plan.from_version,
            channels_changed=sorted(plan.new_versions),
            pending_writes_left=plan.pending_writes_left,
            interrupted=plan.interrupted,
        )
        result.namespaces.append(item)
        if not write:
            if result.status != FAILED:
                result.status = WOULD_MIGRATE
            continue
        new_config = saver.put(
            plan.parent_config,
            cast(Checkpoint, plan.checkpoint),
            cast(CheckpointMetadata, plan.metadata),
            plan.new_versions,
        )
        item.checkpoint_id = new_config["configurable"]["checkpoint_id"]
        back = saver.get_tuple(new_config)
        item.verified = (
            back is not None
            and back.metadata.get("schema_version") == schema.version
            and back.checkpoint["channel_values"] == plan.checkpoint["channel_values"]
            and back.checkpoint["channel_versions"] == plan.checkpoint["channel_versions"]
        )
        if not item.verified:
            result.status = FAILED
            result.problems.append(
                f"namespace {ns!r}: the migrated checkpoint {item.checkpoint_id} does not read"
                " back as written"
            )
        elif result.status != FAILED:
            result.status = MIGRATED
