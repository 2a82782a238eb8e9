"""``fallback=SOURCE``: the saver a live switch reads through to, from a URL or an instance.

SOURCE is a ``BaseCheckpointSaver`` (any LangGraph saver the app has open: read through its
public API), or a URL: graphkeep's own (``redis://``, ``mongodb://``, ``dynamodb://``… opened
without ``setup``: a fallback is never written), LangGraph's SQLite (``sqlite:///file.db``) or
Postgres (``postgresql://…``) saver, or a rival's (``langgraph-redis://HOST:PORT/DB``,
``langgraph-plainredis://…``, ``langgraph-mongodb://…``,
``langgraph-dynamodb://TABLE?region=…&endpoint_url=…``). LangGraph's and the rivals' savers are
opened by the openers ``graphkeep copy`` uses (:mod:`.openers`, :mod:`.rivals`), so a thread is
read exactly as ``copy`` reads it: the rival's own storage where its API is wrong, each write's
``idx`` / ``task_path`` from storage, nothing written or refreshed on the source; versions are
translated on the way in (:mod:`.versions`). A rival whose package is not installed, or a
source that cannot be opened, is one line (:class:`~graphkeep.errors.ConfigurationError`,
:class:`~graphkeep.errors.StorageUnavailable`, the URL masked). A SOURCE naming the store the
saver itself is on is refused (``ConfigurationError``): every thread would be "moved" onto
itself.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver

from graphkeep.checkpoint.fallback import register_opener
from graphkeep.checkpoint.saver import SaverBase
from graphkeep.errors import ConfigurationError
from graphkeep.moving.fallback import FallbackSource, Mover
from graphkeep.moving.openers import (
    POSTGRES_SCHEMES,
    SQLITE_SCHEMES,
    Reader,
    UrlOpeners,
    open_postgres_saver,
    open_sqlite_saver,
    shown,
)
from graphkeep.moving.rivals import RIVAL_SCHEMES, open_rival

#: SOURCE URLs: LangGraph's savers, the rivals', and graphkeep's (``graphkeep.connect``
#: registers its opener: this layer sits below it)
OPENERS = UrlOpeners[Reader](
    {
        **dict.fromkeys(SQLITE_SCHEMES, open_sqlite_saver),
        **dict.fromkeys(POSTGRES_SCHEMES, open_postgres_saver),
        **dict.fromkeys(RIVAL_SCHEMES, open_rival),
    },
    lambda saver: Reader(saver, "graphkeep"),
)


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
def read_through(saver: Any, source: Any) -> Iterator[None]:
    """``saver`` moving each thread from ``source`` on first use, for the block."""
    if not isinstance(saver, SaverBase):
        raise ConfigurationError(f"fallback= needs a graphkeep saver, got {type(saver).__name__}")
    if saver.fallback is not None:
        raise ConfigurationError("this saver reads through to a fallback already")
    with ExitStack() as stack:
        if isinstance(source, str):
            reader, label = OPENERS.opened(source, stack), shown(source)
        elif isinstance(source, BaseCheckpointSaver):
            reader, label = Reader(source, "instance"), type(source).__name__
        else:
            raise ConfigurationError(
                f"fallback= takes a URL or a BaseCheckpointSaver, got {type(source).__name__}"
            )
        if same_store(reader.saver, saver):
            raise same_store_refused(label)
        saver.fallback = Mover(
            FallbackSource(
                reader.saver,
                label,
                tuples=reader.tuples,
                write_rows=reader.write_rows,
                threads=reader.threads,
            )
        )
        try:
            yield
        finally:
            saver.fallback = None


#: make ``fallback=`` open graphkeep URLs with ``open_url`` (``graphkeep.connect``)
register = OPENERS.register


register_opener(read_through)
