"""The hot layer's key-only read on LangGraph's Postgres saver tables.

ONE statement on the saver's own connection (or pool): the ids of the checkpoint (and, for a
"latest" read, the newer ones) from ``checkpoints`` and the ``idx`` of their pending writes
from ``checkpoint_writes``, both by primary-key prefix ``(thread_id, checkpoint_ns,
checkpoint_id)`` — no blob, no checkpoint JSON is read or sent.
"""

from __future__ import annotations

from typing import Any

from graphkeep.checkpoint.records import CheckpointKeys

__all__ = ["KEYS_SQL", "PostgresProber", "is_postgres_saver"]

#: ``{op}`` is "=" (one checkpoint) or ">=" (it and the newer ones)
KEYS_SQL = """
SELECT checkpoint_id, NULL::integer AS idx FROM checkpoints
 WHERE thread_id = %(thread_id)s AND checkpoint_ns = %(ns)s AND checkpoint_id {op} %(id)s
UNION ALL
SELECT checkpoint_id, idx FROM checkpoint_writes
 WHERE thread_id = %(thread_id)s AND checkpoint_ns = %(ns)s AND checkpoint_id {op} %(id)s
"""


def is_postgres_saver(saver: Any) -> bool:
    """Whether ``saver`` is LangGraph's ``PostgresSaver`` or ``AsyncPostgresSaver``."""
    try:
        from langgraph.checkpoint.postgres import PostgresSaver
        from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
    except ImportError:
        return False
    return isinstance(saver, PostgresSaver | AsyncPostgresSaver)


def _keys(rows: list[Any]) -> list[CheckpointKeys]:
    heads: set[str] = set()
    writes: dict[str, list[int]] = {}
    for row in rows:
        cid, idx = (row["checkpoint_id"], row["idx"]) if isinstance(row, dict) else row
        if idx is None:
            heads.add(cid)
        else:
            writes.setdefault(cid, []).append(int(idx))
    return [CheckpointKeys(cid, tuple(writes.get(cid, ()))) for cid in sorted(heads)]


def _statement(
    ns: str, thread_id: str, checkpoint_id: str, newer: bool
) -> tuple[str, dict[str, Any]]:
    sql = KEYS_SQL.format(op=">=" if newer else "=")
    return sql, {"thread_id": thread_id, "ns": ns, "id": checkpoint_id}


class PostgresProber:
    """:class:`~graphkeep.checkpoint.hot.Prober` on a ``PostgresSaver`` (``keys``) or an
    ``AsyncPostgresSaver`` (``akeys``), sharing its connection as it does (its lock when it
    holds one connection, a connection of its pool otherwise)."""

    def __init__(self, saver: Any) -> None:
        self.saver = saver

    def keys(
        self, thread_id: str, ns: str, checkpoint_id: str, newer: bool
    ) -> list[CheckpointKeys]:
        from psycopg_pool import ConnectionPool

        sql, params = _statement(ns, thread_id, checkpoint_id, newer)
        conn = self.saver.conn
        if isinstance(conn, ConnectionPool):
            with conn.connection() as held:
                return _keys(held.execute(sql, params).fetchall())
        with self.saver.lock:
            return _keys(conn.execute(sql, params).fetchall())

    async def akeys(
        self, thread_id: str, ns: str, checkpoint_id: str, newer: bool
    ) -> list[CheckpointKeys]:
        from psycopg_pool import AsyncConnectionPool

        sql, params = _statement(ns, thread_id, checkpoint_id, newer)
        conn = self.saver.conn
        if isinstance(conn, AsyncConnectionPool):
            async with conn.connection() as held:
                cursor = await held.execute(sql, params)
                return _keys(await cursor.fetchall())
        async with self.saver.lock:
            cursor = await conn.execute(sql, params)
            return _keys(await cursor.fetchall())
