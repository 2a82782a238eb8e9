"""LangGraph's own Postgres saver (``langgraph-checkpoint-postgres``) as a durable store under
graphkeep's Redis hot layer: :class:`PostgresProber`, the key-only read the layer validates
its copies with (:mod:`graphkeep.checkpoint.hot`). graphkeep stores nothing in Postgres."""

from __future__ import annotations

from graphkeep.backends.postgres.probe import PostgresProber, is_postgres_saver

__all__ = ["PostgresProber", "is_postgres_saver"]
