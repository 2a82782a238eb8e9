"""``fallback=SOURCE``: the saver a live switch reads through to, from a URL or an instance.

SOURCE is a ``BaseCheckpointSaver`` (any LangGraph saver the app has open: read through its
public API), or a URL: graphkeep's own (``redis://``, ``mongodb://``, ``dynamodb://``… opened
without ``setup``: a fallback is never written), LangGraph's SQLite (``sqlite:///file.db``) or
Postgres (``postgresql://…``) saver. The rivals' URLs (``langgraph-redis://`` …) are read as
``graphkeep copy`` reads them (their own storage where their API is wrong; see
docs/migrate.md) and are not taken here yet: pass the saver instance, or move those threads
with ``graphkeep copy`` first. A SOURCE naming the store the saver itself is on is refused
(:class:`~graphkeep.errors.ConfigurationError`): every thread would be "moved" onto itself.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver

from graphkeep.checkpoint.fallback import register_opener
from graphkeep.checkpoint.saver import SaverBase
from graphkeep.errors import ConfigurationError, mask_url
from graphkeep.moving.fallback import FallbackSource, Mover

#: LangGraph's own savers, by URL scheme
SQLITE_SCHEMES = ("sqlite",)
POSTGRES_SCHEMES = ("postgres", "postgresql")
#: the rivals' schemes ``graphkeep copy`` reads (:mod:`graphkeep.cli.rivals`)
RIVAL_SCHEMES = (
    "langgraph-redis",
    "langgraph-plainredis",
    "langgraph-mongodb",
    "langgraph-dynamodb",
)

#: ``open_url(url)``: a context manager yielding a sync graphkeep saver (``graphkeep.connect``,
#: which registers it: this layer sits below it)
_OPEN_URL: list[Callable[[str], AbstractContextManager[Any]]] = []


def sqlite_path(url: str) -> str:
    """``sqlite:///rel.db`` -> ``rel.db``; ``sqlite:////abs/x.db`` -> ``/abs/x.db``."""
    rest = url.split("://", 1)[1]
    if not rest.startswith("/"):
        raise ConfigurationError(
            f"SQLite URLs look like sqlite:///relative/file.db or sqlite:////abs/file.db,"
            f" got {mask_url(url)}"
        )
    path = rest[1:].split("?", 1)[0]
    if not path:
        raise ConfigurationError(f"no database file in {mask_url(url)}")
    return path


def postgres_conn_string(url: str) -> str:
    """``postgres://...`` or ``postgresql://...`` as the ``postgresql://`` psycopg takes."""
    return "postgresql://" + url.split("://", 1)[1]


def same_store_refused(label: str) -> ConfigurationError:
    """The error of a ``fallback=`` that names the store the saver itself is on."""
    return ConfigurationError(
        f"fallback= names the store the saver is on ({label}): give the saver the application"
        " used before (its URL or instance), not graphkeep's own"
    )


def same_store(a: Any, b: Any) -> bool:
    """Whether two graphkeep savers keep their threads in one place (same server, database or
    table, and key prefix)."""
    if not isinstance(a, SaverBase) or not isinstance(b, SaverBase):
        return a is b
    if a is b:
        return True
    # the port under encryption's (graphkeep.checkpoint.sealed wraps it): the same store either way
    ports = [getattr(saver.port, "inner", saver.port) for saver in (a, b)]
    return (
        type(ports[0]) is type(ports[1])
        and a.telemetry.target == b.telemetry.target
        and getattr(a.port, "prefix", None) == getattr(b.port, "prefix", None)
        and getattr(a.port, "table", None) == getattr(b.port, "table", None)
    )


@contextmanager
def _sqlite(url: str) -> Iterator[Any]:
    try:
        from langgraph.checkpoint.sqlite import SqliteSaver
    except ImportError:
        raise ConfigurationError(
            "a sqlite:// fallback needs langgraph-checkpoint-sqlite (pip install it)"
        ) from None
    conn = sqlite3.connect(sqlite_path(url), check_same_thread=False)
    try:
        yield SqliteSaver(conn)
    finally:
        conn.close()


@contextmanager
def _postgres(url: str) -> Iterator[Any]:
    try:
        from langgraph.checkpoint.postgres import PostgresSaver
    except ImportError:
        raise ConfigurationError(
            "a postgresql:// fallback needs langgraph-checkpoint-postgres (pip install it)"
        ) from None
    with PostgresSaver.from_conn_string(postgres_conn_string(url)) as saver:
        yield saver


def _opened(url: str, stack: ExitStack) -> Any:
    scheme = url.split("://", 1)[0].lower() if "://" in url else ""
    if scheme in SQLITE_SCHEMES:
        return stack.enter_context(_sqlite(url))
    if scheme in POSTGRES_SCHEMES:
        return stack.enter_context(_postgres(url))
    if scheme in RIVAL_SCHEMES:
        raise ConfigurationError(
            f"fallback={scheme}:// is not taken yet: pass the saver instance"
            f" (fallback=saver), or move the threads with `graphkeep copy {mask_url(url)} URL`"
        )
    if not _OPEN_URL:
        raise ConfigurationError("fallback= URLs need graphkeep.connect (import graphkeep)")
    return stack.enter_context(_OPEN_URL[0](url))


@contextmanager
def read_through(saver: Any, source: Any) -> Iterator[None]:
    """``saver`` moving each thread from ``source`` on first use, for the block."""
    if not isinstance(saver, SaverBase):
        raise ConfigurationError(f"fallback= needs a graphkeep saver, got {type(saver).__name__}")
    if saver.fallback is not None:
        raise ConfigurationError("this saver reads through to a fallback already")
    with ExitStack() as stack:
        if isinstance(source, str):
            opened = _opened(source, stack)
            label = mask_url(source)
        elif isinstance(source, BaseCheckpointSaver):
            opened, label = source, type(source).__name__
        else:
            raise ConfigurationError(
                f"fallback= takes a URL or a BaseCheckpointSaver, got {type(source).__name__}"
            )
        if same_store(opened, saver):
            raise same_store_refused(label)
        saver.fallback = Mover(FallbackSource(opened, label))
        try:
            yield
        finally:
            saver.fallback = None


def register(open_url: Callable[[str], AbstractContextManager[Any]]) -> None:
    """Make ``fallback=`` open graphkeep URLs with ``open_url`` (``graphkeep.connect``)."""
    _OPEN_URL[:] = [open_url]


register_opener(read_through)
