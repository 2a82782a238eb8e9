"""``graphkeep check`` on LangGraph's own savers: ``SqliteSaver`` and ``PostgresSaver``.

The check itself is graphkeep's (:func:`graphkeep.checkpoint.check.findings_of`, a pure function
of an :class:`~graphkeep.checkpoint.records.Inventory`, and with ``--deep``
:func:`~graphkeep.checkpoint.check.add_payload_findings`); this module reads each thread's
inventory from the saver's tables with a fixed number of SQL queries, in one read-only
snapshot per thread, and maps the saver's rows onto it (docs/check.md, "LangGraph's SQLite and
Postgres savers"):

- **PostgresSaver** (``checkpoints``, ``checkpoint_blobs``, ``checkpoint_writes``): three queries
  per thread (:data:`POSTGRES_THREAD_QUERIES`). A checkpoint's ``channel_versions``,
  ``updated_channels``, the keys and JSON types of its inline ``channel_values`` and the keys of
  its metadata's ``counters_since_delta_snapshot`` are read in the server (no value leaves
  it); blobs by their keys, writes by their keys and channels. A blob is *expected*
  (``missing_value`` when it is not stored) where the saver's own data says one was written: a
  channel the checkpoint updated (``updated_channels``) that is not inline, is not a
  DeltaChannel replayed from writes, and that LangGraph keeps (it has pending write rows or
  stored values in the namespace, or it is the input channel: an ``UntrackedValue`` has
  neither); or a DeltaChannel snapshot's inline ``true`` marker. An inline value is a stored
  value. Every blob row no checkpoint's ``channel_versions`` names is an orphan.
- **SqliteSaver** (``checkpoints``, ``writes``): two queries per thread
  (:data:`SQLITE_THREAD_QUERIES`). The checkpoint (its values inline) is one serialized
  payload, not read without ``--deep``: chains, orphan writes and DeltaChannel seeds (from the
  metadata's JSON ``counters_since_delta_snapshot``) are checked; values are not (there are no
  value rows to lose or orphan).

``--deep`` reads the payload columns in the same queries and decodes them with the serializer
(one implementation: :func:`~graphkeep.checkpoint.deep.payload_problems`). Nothing is ever
written: SQLite is opened ``mode=ro``, Postgres reads in ``READ ONLY`` transactions.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from langgraph.constants import START

from graphkeep.checkpoint.check import (
    CheckReport,
    Finding,
    ThreadCheck,
    add_payload_findings,
    findings_of,
)
from graphkeep.checkpoint.records import (
    BlobRecord,
    CheckpointRecord,
    Inventory,
    Summary,
    ThreadDump,
    Typed,
    WriteRecord,
)
from graphkeep.cli.console import CliError, NotFound, UsageError, safe_url
from graphkeep.cli.foreign import has_table, open_postgres_saver, postgres_snapshot
from graphkeep.errors import StorageUnavailable
from graphkeep.moving.openers import SQLITE_SCHEMES, sqlite_path
from graphkeep.port.codec import EMPTY_TAG

__all__ = [
    "POSTGRES_THREAD_QUERIES",
    "SQLITE_THREAD_QUERIES",
    "SaverRows",
    "SaverSource",
    "open_saver_source",
    "postgres_inventory",
    "sqlite_inventory",
]

#: a JSON object in a payload graphkeep does not decode (PostgresSaver's JSONB checkpoint and
#: metadata, SqliteSaver's JSON metadata): the database or ``json.loads`` reads it, not the serde
_NOT_SERIALIZED = Typed(EMPTY_TAG, b"")


# -- rows -> inventory (pure) ----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SaverRows:
    """One checkpoint row as the queries below read it (no value)."""

    ns: str
    checkpoint_id: str
    parent_id: str | None
    #: ``channel_versions`` (Postgres; empty on SQLite, where it is inside the payload)
    versions: dict[str, str] = field(default_factory=dict)
    #: ``updated_channels`` (Postgres; None when the checkpoint does not say)
    updated: list[str] | None = None
    #: inline ``channel_values`` (Postgres): channel -> ``marker`` (``true``), ``null``, ``value``
    inline: dict[str, str] = field(default_factory=dict)
    #: the channels the metadata's ``counters_since_delta_snapshot`` counts
    counters: list[str] = field(default_factory=list)


def postgres_inventory(
    rows: list[SaverRows],
    write_keys: set[tuple[str, str]],
    blob_keys: set[tuple[str, str, str]],
    written: set[tuple[str, str]] | None = None,
) -> Inventory:
    """The inventory of one PostgresSaver thread. A channel is ``present`` at a checkpoint
    where its version has a blob row, should have one by the saver's own data (module
    docstring), or has an inline value (not JSON ``null``, not a snapshot's ``true`` marker):
    LangGraph's DeltaChannel walk stops at either. The inventory's value keys are the blob rows
    and those inline values (stored in the checkpoint row: never missing, never orphans).
    ``written``: the (namespace, channel) of the thread's pending write rows."""
    delta = {(r.ns, ch) for r in rows for ch in r.counters}
    # channels LangGraph keeps: ones with a stored value, or pending writes (it persists no
    # write of an ``UntrackedValue``, whose values it never stores either), or the input
    tracked = {(ns, ch) for ns, ch, _ in blob_keys} | (written or set())
    expected: set[tuple[str, str, str]] = set()
    inline: set[tuple[str, str, str]] = set()
    for r in rows:
        for ch in r.updated or ():
            version = r.versions.get(ch)
            if (
                version is not None
                and ch not in r.inline
                and ch not in r.counters
                and ((r.ns, ch) in tracked or ch == START)
            ):
                expected.add((r.ns, ch, version))
        for ch, kind in r.inline.items():
            version = r.versions.get(ch)
            if version is None or kind == "null":
                continue
            if kind == "marker" and (r.ns, ch) in delta:
                expected.add((r.ns, ch, version))  # a snapshot: the value is a blob
            else:
                inline.add((r.ns, ch, version))
    stored = blob_keys | (inline - expected)
    summaries = []
    for r in rows:
        present = [
            ch
            for ch, version in sorted(r.versions.items())
            if (r.ns, ch, version) in stored or (r.ns, ch, version) in expected
        ]
        needs = [ch for ch in r.counters if ch in r.versions and ch not in r.inline]
        summaries.append(
            Summary(r.ns, r.checkpoint_id, r.parent_id, dict(r.versions), present, needs)
        )
    return Inventory(summaries, write_keys, stored)


def sqlite_inventory(rows: list[SaverRows], write_keys: set[tuple[str, str]]) -> Inventory:
    """The inventory of one SqliteSaver thread, from columns and the metadata's JSON: no
    versions and no value keys (values live inside the checkpoint payload). A DeltaChannel
    the namespace's metadata counts needs history where a checkpoint's counters list it, and
    is stored (a snapshot) where they do not: LangGraph drops a channel's counters when it
    snapshots it."""
    delta: dict[str, set[str]] = {}
    for r in rows:
        delta.setdefault(r.ns, set()).update(r.counters)
    summaries = [
        Summary(
            r.ns,
            r.checkpoint_id,
            r.parent_id,
            {},
            sorted(delta.get(r.ns, set()) - set(r.counters)),
            sorted(r.counters),
        )
        for r in rows
    ]
    return Inventory(summaries, write_keys, set())


def _dump(
    thread_id: str,
    inventory: Inventory,
    payloads: dict[tuple[str, str], Typed],
    writes: list[tuple[str, str, WriteRecord]],
    blobs: list[tuple[str, BlobRecord]],
) -> ThreadDump:
    """The thread as ``payload_problems`` reads it; ``payloads``: each checkpoint's serialized
    payload (SQLite), else it is not a serialized payload (Postgres' JSONB)."""
    records = [
        CheckpointRecord(
            thread_id,
            s.ns,
            s.checkpoint_id,
            s.parent_id,
            s.versions,
            s.present,
            s.needs_history,
            None,
            payloads.get((s.ns, s.checkpoint_id), _NOT_SERIALIZED),
            _NOT_SERIALIZED,
        )
        for s in inventory.checkpoints
    ]
    return ThreadDump(records, writes, blobs)


# -- the queries -----------------------------------------------------------------------

#: threads above a cursor, from every table (a thread with orphans only is listed too), in
#: id order: each table's first ``limit`` distinct ids (an index range), then the union's
_THREAD_PAGE = (
    "SELECT thread_id FROM ("
    "SELECT thread_id FROM (SELECT DISTINCT thread_id FROM {checkpoints}{where}"
    " ORDER BY thread_id LIMIT {limit}) AS c"
    " UNION SELECT thread_id FROM (SELECT DISTINCT thread_id FROM {writes}{where}"
    " ORDER BY thread_id LIMIT {limit}) AS w"
    "{blobs}) AS t ORDER BY thread_id LIMIT {limit}"
)
_BLOBS_PAGE = (
    " UNION SELECT thread_id FROM (SELECT DISTINCT thread_id FROM checkpoint_blobs{where}"
    " ORDER BY thread_id LIMIT {limit}) AS b"
)


def _page_sql(param: str, writes: str, blobs: bool, after: bool) -> str:
    where = f" WHERE thread_id > {param}" if after else ""
    return _THREAD_PAGE.format(
        checkpoints="checkpoints",
        writes=writes,
        where=where,
        limit=param,
        blobs=_BLOBS_PAGE.format(where=where, limit=param) if blobs else "",
    )


#: PostgresSaver, per thread, in one ``REPEATABLE READ, READ ONLY`` transaction: the
#: checkpoints (ids, parents, and of the ``checkpoint`` and ``metadata`` JSONB only
#: ``channel_versions``, ``updated_channels``, each inline value's JSON kind and the keys of
#: ``counters_since_delta_snapshot``), the write keys and channels, the blob keys. ``--deep``
#: adds the ``type`` and ``blob`` columns to the last two.
POSTGRES_THREAD_QUERIES = {
    "checkpoints": "SELECT checkpoint_ns, checkpoint_id, parent_checkpoint_id,"
    " CASE WHEN jsonb_typeof(checkpoint -> 'channel_versions') = 'object'"
    " THEN checkpoint -> 'channel_versions' END AS versions,"
    " CASE WHEN jsonb_typeof(checkpoint -> 'updated_channels') = 'array'"
    " THEN checkpoint -> 'updated_channels' END AS updated,"
    " CASE WHEN jsonb_typeof(checkpoint -> 'channel_values') = 'object' THEN"
    " (SELECT jsonb_object_agg(v.key, CASE WHEN v.value = 'true'::jsonb THEN 'marker'"
    " WHEN jsonb_typeof(v.value) = 'null' THEN 'null' ELSE 'value' END)"
    " FROM jsonb_each(checkpoint -> 'channel_values') AS v) END AS inline,"
    " CASE WHEN jsonb_typeof(metadata -> 'counters_since_delta_snapshot') = 'object' THEN"
    " ARRAY(SELECT jsonb_object_keys(metadata -> 'counters_since_delta_snapshot')) END"
    " AS counters"
    " FROM checkpoints WHERE thread_id = %(thread)s",
    "writes": "SELECT DISTINCT checkpoint_ns, checkpoint_id, channel FROM checkpoint_writes"
    " WHERE thread_id = %(thread)s",
    "blobs": "SELECT checkpoint_ns, channel, version FROM checkpoint_blobs"
    " WHERE thread_id = %(thread)s",
}
_POSTGRES_DEEP = {
    "writes": "SELECT checkpoint_ns, checkpoint_id, task_id, idx, channel, task_path, type, blob"
    " FROM checkpoint_writes WHERE thread_id = %(thread)s",
    "blobs": "SELECT checkpoint_ns, channel, version, type, blob FROM checkpoint_blobs"
    " WHERE thread_id = %(thread)s",
}

#: SqliteSaver, per thread, in one read transaction of a ``mode=ro`` connection: the
#: checkpoints (ids, parents, and from the JSON metadata only the keys of
#: ``counters_since_delta_snapshot``, and whether it is JSON or NULL, as SqliteSaver reads
#: it), the write keys. ``--deep`` adds
#: the ``type`` and ``checkpoint`` columns, and every write with its value.
SQLITE_THREAD_QUERIES = {
    "checkpoints": "SELECT checkpoint_ns, checkpoint_id, parent_checkpoint_id,"
    " metadata IS NULL OR json_valid(CAST(metadata AS TEXT)) AS valid,"
    " CASE WHEN json_valid(CAST(metadata AS TEXT)) AND json_type(CAST(metadata AS TEXT),"
    " '$.counters_since_delta_snapshot') = 'object' THEN (SELECT json_group_array(key) FROM"
    " json_each(CAST(metadata AS TEXT), '$.counters_since_delta_snapshot')) END AS counters"
    "{deep} FROM checkpoints WHERE thread_id = ?",
    "writes": "SELECT DISTINCT checkpoint_ns, checkpoint_id FROM writes WHERE thread_id = ?",
}
_SQLITE_DEEP_WRITES = (
    "SELECT checkpoint_ns, checkpoint_id, task_id, idx, channel, {task_path}, type, value"
    " FROM writes WHERE thread_id = ?"
)


# -- the sources -----------------------------------------------------------------------


@dataclass
class SaverSource:
    """One of LangGraph's savers, read for ``graphkeep check``: its thread pages and the
    check of threads (each thread read in one snapshot)."""

    label: str
    #: ``(after, limit) -> thread ids``: one query
    list_page: Callable[[str | None, int], list[str]]
    #: ``(thread_id, deep) -> (inventory, dump or None, extra findings, queries)``
    read_thread: Callable[[str, bool], tuple[Inventory, ThreadDump | None, list[Finding], int]]

    def page(self, cursor: Any, after: str | None, page_size: int) -> tuple[list[str], Any, int]:
        """One page of ``--all``: the threads above ``cursor`` (or ``after``), the next
        cursor (None after the last page) and the queries sent."""
        start = cursor if cursor is not None else after
        threads = self.list_page(start, page_size)
        return threads, (threads[-1] if len(threads) == page_size else None), 1

    def check_threads(self, thread_ids: list[str], ns: str | None, serde: Any) -> CheckReport:
        started = time.perf_counter()
        report = CheckReport()
        for thread_id in thread_ids:
            inventory, dump, extra, queries = self.read_thread(thread_id, serde is not None)
            checked: ThreadCheck = findings_of(thread_id, inventory, ns)
            if serde is not None and dump is not None:
                add_payload_findings(checked, dump, serde, ns)
                checked.findings += [f for f in extra if ns is None or f.ns == ns]
            checked.requests = queries
            report.add(checked)
        report.seconds = time.perf_counter() - started
        return report


@contextmanager
def open_saver_source(url: str, key_prefix: str | None) -> Iterator[SaverSource]:
    """LangGraph's saver at ``url`` (``sqlite:///`` or ``postgresql://``), read-only."""
    scheme = url.split("://", 1)[0].lower()
    if key_prefix is not None:
        raise UsageError(f"--key-prefix applies to graphkeep URLs, not to {scheme}://")
    opener = _sqlite_source if scheme in SQLITE_SCHEMES else _postgres_source
    with opener(url) as source:
        yield source


# -- SQLite ----------------------------------------------------------------------------


@contextmanager
def _sqlite_source(url: str) -> Iterator[SaverSource]:
    path = sqlite_path(url)
    if not os.path.exists(path):
        raise NotFound(f"no SQLite database at {path}")
    try:
        # autocommit mode: each thread's queries run in the explicit read transaction below
        conn = sqlite3.connect(f"file:{quote(path)}?mode=ro", uri=True, isolation_level=None)
    except sqlite3.Error as exc:
        raise StorageUnavailable(f"SQLite database {path}: {exc}") from exc
    try:
        try:
            tables = has_table(conn, "checkpoints") and has_table(conn, "writes")
            columns = {row[1] for row in conn.execute("PRAGMA table_info(writes)")}
        except sqlite3.DatabaseError as exc:
            raise CliError(f"SQLite database {path}: {exc}") from exc
        if not tables:
            raise NotFound(
                f"no LangGraph checkpoint tables (checkpoints, writes) in {path}"
                " (SqliteSaver.setup() creates them)"
            )
        page_sql = {after: _page_sql("?", "writes", False, after) for after in (False, True)}
        task_path = "task_path" if "task_path" in columns else "''"

        def list_page(after: str | None, limit: int) -> list[str]:
            params: tuple[Any, ...] = (
                (limit, limit, limit) if after is None else (after, limit, after, limit, limit)
            )
            return [str(r[0]) for r in _sqlite(conn, path, page_sql[after is not None], params)]

        def read_thread(
            thread_id: str, deep: bool
        ) -> tuple[Inventory, ThreadDump | None, list[Finding], int]:
            checkpoints_sql = SQLITE_THREAD_QUERIES["checkpoints"].format(
                deep=", type, checkpoint" if deep else ""
            )
            writes_sql = (
                _SQLITE_DEEP_WRITES.format(task_path=task_path)
                if deep
                else SQLITE_THREAD_QUERIES["writes"]
            )
            try:
                conn.execute("BEGIN")
                try:
                    checkpoints = conn.execute(checkpoints_sql, (thread_id,)).fetchall()
                    writes = conn.execute(writes_sql, (thread_id,)).fetchall()
                finally:
                    conn.execute("COMMIT")
            except sqlite3.Error as exc:
                raise _sqlite_error(path, exc) from exc
            rows = [
                SaverRows(str(ns), str(cid), _text(parent), counters=_keys(counters))
                for ns, cid, parent, _, counters, *_ in checkpoints
            ]
            write_keys = {(str(w[0]), str(w[1])) for w in writes}
            inventory = sqlite_inventory(rows, write_keys)
            if not deep:
                return inventory, None, [], len(SQLITE_THREAD_QUERIES)
            extra = [
                Finding(
                    thread_id,
                    str(ns),
                    str(cid),
                    None,
                    "undecodable",
                    "the metadata is not JSON (SqliteSaver reads it with json.loads)",
                )
                for ns, cid, _, valid, *_ in checkpoints
                if not valid
            ]
            payloads = {
                (str(ns), str(cid)): Typed(str(tag or ""), _bytes(data))
                for ns, cid, _, _, _, tag, data in checkpoints
            }
            dump = _dump(
                thread_id,
                inventory,
                payloads,
                [
                    (
                        str(ns),
                        str(cid),
                        WriteRecord(
                            str(t), int(i), str(c), str(p or ""), Typed(str(tag or ""), _bytes(v))
                        ),
                    )
                    for ns, cid, t, i, c, p, tag, v in writes
                ],
                [],
            )
            return inventory, dump, extra, len(SQLITE_THREAD_QUERIES)

        yield SaverSource(safe_url(url), list_page, read_thread)
    finally:
        conn.close()


def _sqlite(conn: sqlite3.Connection, path: str, query: str, params: tuple[Any, ...]) -> Any:
    try:
        return conn.execute(query, params).fetchall()
    except sqlite3.Error as exc:
        raise _sqlite_error(path, exc) from exc


def _sqlite_error(path: str, exc: sqlite3.Error) -> Exception:
    """A locked or busy database does not answer (exit 2, ``--all`` says where to resume);
    anything else is one error line."""
    text = f"SQLite database {path}: {type(exc).__name__}: {exc}"
    if isinstance(exc, sqlite3.OperationalError) and ("locked" in str(exc) or "busy" in str(exc)):
        return StorageUnavailable(text)
    return CliError(text)


# -- Postgres --------------------------------------------------------------------------


@contextmanager
def _postgres_source(url: str) -> Iterator[SaverSource]:
    with open_postgres_saver(url, setup=False, serde=None, must_exist=True) as opened:
        saver: Any = opened.saver  # a PostgresSaver: its connection (dict rows) and its lock
        label = opened.label

        with postgres_snapshot(saver, label) as cur:
            cur.execute(
                "SELECT to_regclass('checkpoints') IS NOT NULL"
                " AND to_regclass('checkpoint_blobs') IS NOT NULL"
                " AND to_regclass('checkpoint_writes') IS NOT NULL AS present"
            )
            row = cur.fetchone()
        if row is None or not row["present"]:
            raise NotFound(
                f"no LangGraph checkpoint tables (checkpoints, checkpoint_blobs,"
                f" checkpoint_writes) at {label} (PostgresSaver.setup() creates them)"
            )
        page_sql = {
            after: _page_sql("%s", "checkpoint_writes", True, after) for after in (False, True)
        }

        def list_page(after: str | None, limit: int) -> list[str]:
            params: tuple[Any, ...] = (
                (limit,) * 4 if after is None else (after, limit) * 3 + (limit,)
            )
            with postgres_snapshot(saver, label) as cur:
                cur.execute(page_sql[after is not None], params)
                return [str(r["thread_id"]) for r in cur.fetchall()]

        def read_thread(
            thread_id: str, deep: bool
        ) -> tuple[Inventory, ThreadDump | None, list[Finding], int]:
            queries = {**POSTGRES_THREAD_QUERIES, **(_POSTGRES_DEEP if deep else {})}
            params = {"thread": thread_id}
            with postgres_snapshot(saver, label) as cur:
                found: dict[str, list[Any]] = {}
                for name, query in queries.items():
                    cur.execute(query, params)
                    found[name] = cur.fetchall()
            rows = [
                SaverRows(
                    str(r["checkpoint_ns"]),
                    str(r["checkpoint_id"]),
                    _text(r["parent_checkpoint_id"]),
                    {str(k): str(v) for k, v in (r["versions"] or {}).items()},
                    None if r["updated"] is None else [str(c) for c in r["updated"]],
                    {str(k): str(v) for k, v in (r["inline"] or {}).items()},
                    [str(c) for c in r["counters"] or []],
                )
                for r in found["checkpoints"]
            ]
            write_keys = {
                (str(w["checkpoint_ns"]), str(w["checkpoint_id"])) for w in found["writes"]
            }
            written = {(str(w["checkpoint_ns"]), str(w["channel"])) for w in found["writes"]}
            blob_keys = {
                (str(b["checkpoint_ns"]), str(b["channel"]), str(b["version"]))
                for b in found["blobs"]
            }
            inventory = postgres_inventory(rows, write_keys, blob_keys, written)
            if not deep:
                return inventory, None, [], len(queries)
            dump = _dump(
                thread_id,
                inventory,
                {},
                [
                    (
                        str(w["checkpoint_ns"]),
                        str(w["checkpoint_id"]),
                        WriteRecord(
                            str(w["task_id"]),
                            int(w["idx"]),
                            str(w["channel"]),
                            str(w["task_path"] or ""),
                            Typed(str(w["type"] or ""), _bytes(w["blob"])),
                        ),
                    )
                    for w in found["writes"]
                ],
                [
                    (
                        str(b["checkpoint_ns"]),
                        BlobRecord(
                            str(b["channel"]),
                            str(b["version"]),
                            Typed(str(b["type"] or ""), _bytes(b["blob"])),
                        ),
                    )
                    for b in found["blobs"]
                ],
            )
            return inventory, dump, [], len(queries)

        yield SaverSource(label, list_page, read_thread)


# -- helpers ---------------------------------------------------------------------------


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


def _bytes(value: Any) -> bytes:
    if value is None:
        return b""
    if isinstance(value, str):
        return value.encode()
    return bytes(value)


def _keys(value: Any) -> list[str]:
    """``json_group_array`` of keys (SQLite) as a list."""
    if value is None:
        return []
    try:
        found = json.loads(value)
    except (TypeError, ValueError):
        return []
    return [str(k) for k in found] if isinstance(found, list) else []
