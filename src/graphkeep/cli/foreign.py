"""LangGraph's own SQLite and Postgres savers and stores, opened for the CLI.

``sqlite:///path`` and ``postgresql://...`` URLs open ``SqliteSaver`` / ``PostgresSaver``
(the checkpoint commands) or ``SqliteStore`` / ``PostgresStore`` (``graphkeep store``),
used through LangGraph's public API only; their packages are imported only then.
:func:`graphkeep.cli.endpoints.open_endpoint` and :func:`~graphkeep.cli.endpoints.open_store`
dispatch here.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from typing import Any, cast
from urllib.parse import quote

from langgraph.checkpoint.base import BaseCheckpointSaver, CheckpointTuple
from langgraph.store.base import BaseStore

from graphkeep.cli.console import CliError, NotFound, Opened, UsageError, safe_url
from graphkeep.errors import StorageUnavailable
from graphkeep.moving.sources import postgres_conn_string, sqlite_path

SQLITE_SCHEMES = ("sqlite",)
POSTGRES_SCHEMES = ("postgresql", "postgres")
FOREIGN_SCHEMES = (*SQLITE_SCHEMES, *POSTGRES_SCHEMES)

#: (task_id, idx, task_path, channel) rows of one checkpoint's writes, when the store says
WriteRows = Callable[[str, str, str], list[tuple[str, int, str, str]] | None]
#: every thread id of the saver, by its own listing
Threads = Callable[[], Iterator[str]]
#: every checkpoint of one thread (every namespace), newest first, read the right way
Tuples = Callable[[str], list[CheckpointTuple]]


@dataclass
class Foreign(Opened):
    """A LangGraph saver (SQLite, Postgres, or another project's: :mod:`graphkeep.cli.rivals`),
    used through its public API; ``threads`` / ``tuples``, where given, replace ``list`` for
    the saver's own listing and reading of a thread."""

    saver: BaseCheckpointSaver[Any]
    kind: str
    write_rows: WriteRows | None = None
    threads: Threads | None = None
    tuples: Tuples | None = None

    @property
    def scheme(self) -> str:
        return self.url.split("://", 1)[0].lower()


# -- URLs ------------------------------------------------------------------------------


def has_table(conn: sqlite3.Connection, name: str) -> bool:
    found = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)
    ).fetchone()
    return found is not None


def sqlite_has_store(path: str) -> bool:
    """Does the SQLite file at ``path`` hold a LangGraph store (read-only look)?"""
    conn = sqlite3.connect(f"file:{quote(path)}?mode=ro", uri=True)
    try:
        return has_table(conn, "store")
    finally:
        conn.close()


def _missing(scheme: str, what: str, install: str) -> UsageError:
    return UsageError(f"{scheme}:// URLs need LangGraph's {what}: pip install {install}")


POSTGRES_INSTALL = "langgraph-checkpoint-postgres 'psycopg[binary]'"


@contextmanager
def _postgres(url: str, connect: Callable[[], Any]) -> Iterator[Any]:
    """Enter ``connect()`` (a ``from_conn_string`` context), a failure as StorageUnavailable."""
    try:
        manager = connect()
        opened = manager.__enter__()
    except Exception as exc:
        raise StorageUnavailable(
            f"PostgreSQL at {safe_url(url)} is unavailable ({type(exc).__name__}: {exc})"
        ) from exc
    try:
        yield opened
    finally:
        manager.__exit__(None, None, None)


@contextmanager
def postgres_snapshot(saver: Any, label: str) -> Iterator[Any]:
    """A cursor on a ``PostgresSaver``'s connection (dict rows), under the saver's lock, in one
    read-only ``REPEATABLE READ`` transaction: every query sees one snapshot and none writes.
    psycopg's errors become ``StorageUnavailable`` (connection) or ``CliError``, naming
    ``label``."""
    import psycopg

    try:
        with saver.lock, saver.conn.transaction(), saver.conn.cursor() as cur:
            cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            yield cur
    except psycopg.OperationalError as exc:
        raise StorageUnavailable(
            f"PostgreSQL at {label} is unavailable ({type(exc).__name__}: {exc})"
        ) from exc
    except psycopg.Error as exc:
        raise CliError(f"PostgreSQL at {label}: {type(exc).__name__}: {exc}") from exc


# -- savers ----------------------------------------------------------------------------


@contextmanager
def open_sqlite_saver(url: str, *, setup: bool, serde: Any, must_exist: bool) -> Iterator[Foreign]:
    path = sqlite_path(url)
    try:
        from langgraph.checkpoint.sqlite import SqliteSaver
    except ImportError as exc:
        raise _missing("sqlite", "SQLite saver", "langgraph-checkpoint-sqlite") from exc
    if must_exist and not setup and not os.path.exists(path):
        raise NotFound(f"no SQLite database at {path}")
    conn = sqlite3.connect(path, check_same_thread=False)
    try:
        saver = SqliteSaver(conn, serde=serde)
        if setup:
            saver.setup()

        def rows(thread_id: str, ns: str, checkpoint_id: str) -> list[tuple[str, int, str, str]]:
            query = (
                "SELECT task_id, idx, {path}, channel FROM writes"
                " WHERE thread_id = ? AND checkpoint_ns = ? AND checkpoint_id = ?"
            )
            params = (thread_id, ns, checkpoint_id)
            with saver.lock:
                try:
                    found = conn.execute(query.format(path="task_path"), params).fetchall()
                except sqlite3.OperationalError:  # databases from before task_path
                    found = conn.execute(query.format(path="''"), params).fetchall()
            return [(str(t), int(i), str(p or ""), str(c)) for t, i, p, c in found]

        yield Foreign(url, saver, "sqlite", rows)
    finally:
        conn.close()


@contextmanager
def open_postgres_saver(
    url: str, *, setup: bool, serde: Any, must_exist: bool
) -> Iterator[Foreign]:
    try:
        from langgraph.checkpoint.postgres import PostgresSaver
    except ImportError as exc:
        raise _missing("postgresql", "Postgres saver", POSTGRES_INSTALL) from exc
    conn_string = postgres_conn_string(url)
    with _postgres(url, lambda: PostgresSaver.from_conn_string(conn_string)) as saver:
        if serde is not None:
            saver.serde = serde
        if setup:
            saver.setup()

        def rows(thread_id: str, ns: str, checkpoint_id: str) -> list[tuple[str, int, str, str]]:
            with saver._cursor() as cur:
                cur.execute(
                    "SELECT task_id, idx, task_path, channel FROM checkpoint_writes"
                    " WHERE thread_id = %s AND checkpoint_ns = %s AND checkpoint_id = %s",
                    (thread_id, ns, checkpoint_id),
                )
                found = cur.fetchall()
            return [
                (str(r["task_id"]), int(r["idx"]), str(r["task_path"] or ""), str(r["channel"]))
                for r in found
            ]

        yield Foreign(url, saver, "postgres", rows)


def describe_schema(url: str) -> dict[str, Any]:
    """``graphkeep setup --print`` of a LangGraph saver URL."""
    if url.split("://", 1)[0].lower() in POSTGRES_SCHEMES:
        try:
            from langgraph.checkpoint.postgres.base import BasePostgresSaver
        except ImportError as exc:
            raise _missing("postgresql", "Postgres saver", "langgraph-checkpoint-postgres") from exc
        return {
            "backend": "langgraph-checkpoint-postgres",
            "url": safe_url(url),
            "migrations": list(BasePostgresSaver.MIGRATIONS),
        }
    return {
        "backend": "langgraph-checkpoint-sqlite",
        "url": safe_url(url),
        "schema": None,
        "note": "SqliteSaver.setup() creates its tables (checkpoints, writes) itself",
    }


# -- stores ----------------------------------------------------------------------------


@contextmanager
def open_sqlite_store(
    url: str, *, setup: bool, index: dict[str, Any] | None
) -> Iterator[BaseStore]:
    path = sqlite_path(url)
    try:
        from langgraph.store.sqlite import SqliteStore
    except ImportError as exc:
        raise _missing("sqlite", "SQLite store", "langgraph-checkpoint-sqlite") from exc
    if not setup and not os.path.exists(path):
        raise NotFound(f"no SQLite database at {path}")
    with SqliteStore.from_conn_string(path, index=cast(Any, index)) as store:
        if setup:
            store.setup()
        elif not has_table(store.conn, "store"):
            raise NotFound(f"no LangGraph store in {path} (its 'store' table is missing)")
        yield store


@contextmanager
def open_postgres_store(
    url: str, *, setup: bool, index: dict[str, Any] | None
) -> Iterator[BaseStore]:
    try:
        from langgraph.store.postgres import PostgresStore
    except ImportError as exc:
        raise _missing("postgresql", "Postgres store", POSTGRES_INSTALL) from exc
    conn_string = postgres_conn_string(url)
    connect = partial(PostgresStore.from_conn_string, conn_string, index=cast(Any, index))
    with _postgres(url, connect) as store:
        if setup:
            store.setup()
        yield store
