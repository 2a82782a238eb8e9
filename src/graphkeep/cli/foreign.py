"""LangGraph's own SQLite and Postgres savers and stores, and the rivals' savers, for the CLI.

``sqlite:///path`` and ``postgresql://...`` URLs open ``SqliteSaver`` / ``PostgresSaver``
(the checkpoint commands) or ``SqliteStore`` / ``PostgresStore`` (``graphkeep store``),
used through LangGraph's public API only; their packages are imported only then. The savers
(and the rivals', ``langgraph-redis://`` …) are opened by :mod:`graphkeep.moving.openers` and
:mod:`graphkeep.moving.rivals` — the same openers ``fallback=`` uses — and handed to the
commands as :class:`Foreign` endpoints.
:func:`graphkeep.cli.endpoints.open_endpoint` and :func:`~graphkeep.cli.endpoints.open_store`
dispatch here.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Any, cast
from urllib.parse import quote

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.store.base import BaseStore

from graphkeep.cli.console import CliError, NotFound, Opened, safe_url
from graphkeep.errors import StorageUnavailable
from graphkeep.moving import openers, rivals
from graphkeep.moving.openers import (
    POSTGRES_SCHEMES,
    SQLITE_SCHEMES,
    Reader,
    Threads,
    Tuples,
    WriteRows,
    missing_package,
    sqlite_path,
)

FOREIGN_SCHEMES = (*SQLITE_SCHEMES, *POSTGRES_SCHEMES)


@dataclass
class Foreign(Opened):
    """A LangGraph saver (SQLite, Postgres, or another project's: :mod:`graphkeep.moving.rivals`),
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


@contextmanager
def _endpoint(url: str, opened: AbstractContextManager[Reader]) -> Iterator[Foreign]:
    with opened as reader:
        yield Foreign(
            url,
            reader.saver,
            reader.kind,
            reader.write_rows,
            threads=reader.threads,
            tuples=reader.tuples,
        )


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


def open_sqlite_saver(
    url: str, *, setup: bool, serde: Any, must_exist: bool
) -> AbstractContextManager[Foreign]:
    if must_exist and not setup and not os.path.exists(sqlite_path(url)):
        raise NotFound(f"no SQLite database at {sqlite_path(url)}")
    opened = openers.open_sqlite_saver(url, setup=setup, serde=serde, must_exist=must_exist)
    return _endpoint(url, opened)


def open_postgres_saver(
    url: str, *, setup: bool, serde: Any, must_exist: bool
) -> AbstractContextManager[Foreign]:
    opened = openers.open_postgres_saver(url, setup=setup, serde=serde, must_exist=must_exist)
    return _endpoint(url, opened)


def open_rival_saver(
    url: str, *, setup: bool, serde: Any, must_exist: bool
) -> AbstractContextManager[Foreign]:
    """Another project's saver (``langgraph-redis://`` …: :mod:`graphkeep.moving.rivals`)."""
    return _endpoint(url, rivals.open_rival(url, setup=setup, serde=serde, must_exist=must_exist))


def describe_schema(url: str) -> dict[str, Any]:
    """``graphkeep setup --print`` of a LangGraph saver URL."""
    if url.split("://", 1)[0].lower() in POSTGRES_SCHEMES:
        try:
            from langgraph.checkpoint.postgres.base import BasePostgresSaver
        except ImportError as exc:
            raise missing_package(
                "postgresql", "Postgres saver", "langgraph-checkpoint-postgres"
            ) from exc
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
        raise missing_package("sqlite", "SQLite store", "langgraph-checkpoint-sqlite") from exc
    if not setup and not os.path.exists(path):
        raise NotFound(f"no SQLite database at {path}")
    with SqliteStore.from_conn_string(path, index=cast(Any, index)) as store:
        if setup:
            store.setup()
        elif not has_table(store.conn, "store"):
            raise NotFound(f"no LangGraph store in {path} (its 'store' table is missing)")
        yield store
