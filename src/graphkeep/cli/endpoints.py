"""Opening a URL for the CLI: a saver, a store or an event log, graphkeep's or LangGraph's own.

Every command opens its URL here. ``graphkeep`` URLs (every scheme in
:data:`graphkeep.connect.BACKENDS`) open through :func:`graphkeep.connect` (checkpoint
commands: the CLI then talks to the saver's checkpoint port, ``saver.port`` ops run by
``saver.drive``, which hands back raw stored bytes on every backend),
:func:`graphkeep.connect_store` (``graphkeep store``) or :func:`graphkeep.connect_events`
(``graphkeep events``); ``sqlite:///path`` and ``postgresql://...`` open LangGraph's own
savers and stores (:mod:`graphkeep.cli.foreign`). The CLI is the top layer of
docs/architecture.md.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Any, cast

from langgraph.store.base import BaseStore

import graphkeep
from graphkeep.checkpoint.saver import SaverBase
from graphkeep.cli import foreign
from graphkeep.cli.console import MASK, Opened, UsageError, safe_url
from graphkeep.cli.foreign import FOREIGN_SCHEMES, Foreign
from graphkeep.connect import BACKENDS
from graphkeep.encryption import KEYS_ENV, KeyRing
from graphkeep.errors import ConfigurationError
from graphkeep.moving import openers, rival_stores, rivals
from graphkeep.moving.openers import SQLITE_SCHEMES, entered
from graphkeep.port import Op

GRAPHKEEP_OR_SQLITE = "redis://host:6379/0 or sqlite:///file.db"

#: opens one of LangGraph's own savers or stores (:mod:`graphkeep.cli.foreign`)
Opener = Callable[..., AbstractContextManager[Any]]


@dataclass
class Native(Opened):
    """A graphkeep saver; the CLI uses its store through the port."""

    saver: SaverBase

    @property
    def scheme(self) -> str:
        return scheme_of(self.url)

    def call(self, op: Op[Any]) -> Any:
        return self.saver.drive(op)


Endpoint = Native | Foreign


def scheme_of(url: str) -> str:
    return url.split("://", 1)[0].lower() if "://" in url else ""


def is_foreign(url: str) -> bool:
    """Is ``url`` a LangGraph saver / store that is not graphkeep's (SQLite, Postgres, or
    another project's: :mod:`graphkeep.moving.rivals`)?"""
    return scheme_of(url) in (*FOREIGN_SCHEMES, *rivals.RIVAL_SCHEMES)


def copy_key_prefixes(args: argparse.Namespace) -> tuple[str | None, str | None]:
    """The key prefixes a copy opens ``args.src_url`` and ``args.dst_url`` with: each side's
    own ``--src-key-prefix`` / ``--dst-key-prefix``, else ``--key-prefix`` for a graphkeep URL
    (LangGraph's own savers and stores have none)."""

    def side(own: str | None, url: str) -> str | None:
        if own is not None:
            return own
        return None if is_foreign(url) else args.key_prefix

    return side(args.src_key_prefix, args.src_url), side(args.dst_key_prefix, args.dst_url)


def known_schemes() -> list[str]:
    return sorted({*BACKENDS, *FOREIGN_SCHEMES, *rivals.RIVAL_SCHEMES})


def require_graphkeep(url: str, command: str) -> None:
    """Refuse a SQLite / Postgres URL for a command only graphkeep stores have."""
    scheme = scheme_of(url)
    if scheme in (*FOREIGN_SCHEMES, *rivals.RIVAL_SCHEMES):
        raise UsageError(
            f"graphkeep {command} needs a graphkeep URL (redis://, redis+cluster://,"
            f" valkey://, mongodb://, dynamodb://), not {scheme}://"
        )


def refuse_rival(url: str, command: str) -> None:
    """Refuse another project's saver URL (:mod:`graphkeep.moving.rivals`) for a command that
    reads only graphkeep's and LangGraph's own SQLite / Postgres savers."""
    scheme = scheme_of(url)
    if scheme in rivals.RIVAL_SCHEMES:
        raise UsageError(
            f"graphkeep {command} does not read {scheme}:// (graphkeep copy, threads and"
            " history do: docs/migrate.md)"
        )


def _scheme(url: str, example: str) -> str:
    """``url``'s scheme; its secrets are remembered for masking first."""
    MASK.remember(url)
    scheme = scheme_of(url)
    if not scheme:
        raise UsageError(f"expected a URL such as {example}, got {safe_url(url)!r}")
    return scheme


def _foreign_opener(
    url: str, key_prefix: str | None, sqlite: Opener, postgres: Opener
) -> Opener | None:
    """The opener of LangGraph's own saver or store for a SQLite / Postgres ``url`` (None: a
    graphkeep URL), which takes no ``--key-prefix``."""
    scheme = _scheme(url, GRAPHKEEP_OR_SQLITE)
    if scheme not in FOREIGN_SCHEMES:
        return None
    if key_prefix is not None:
        raise UsageError(f"--key-prefix applies to graphkeep URLs, not to {scheme}://")
    return sqlite if scheme in SQLITE_SCHEMES else postgres


def _connected(
    connect: Callable[..., AbstractContextManager[Any]],
    url: str,
    options: Mapping[str, Any],
    hint: str = "",
) -> AbstractContextManager[Any]:
    """``connect(url, **options)`` entered; a bad URL or option is a usage error."""

    def usage(exc: Exception) -> UsageError | None:
        if not isinstance(exc, ConfigurationError):
            return None
        message = str(exc)
        if hint and "unsupported URL scheme" in message:
            message += hint
        return UsageError(message)

    try:
        manager = connect(url, **{k: v for k, v in options.items() if v is not None})
    except ConfigurationError as exc:
        raise cast(UsageError, usage(exc)) from exc
    return entered(url, manager, usage, keep=())


def key_ring() -> KeyRing | None:
    """The key ring of ``$GRAPHKEEP_KEYS`` when it is set (as ``graphkeep.server`` reads it):
    the commands then read and write an encrypted store's records as the application does."""
    return KeyRing.from_env() if os.environ.get(KEYS_ENV, "").strip() else None


def _own(kind: str) -> str:
    return f", sqlite:///path or postgresql://... (LangGraph's own {kind})"


@contextmanager
def open_endpoint(
    url: str,
    *,
    key_prefix: str | None = None,
    setup: bool = False,
    serde: Any = None,
    must_exist: bool = True,
) -> Iterator[Endpoint]:
    """The saver at ``url``; ``setup`` creates the schema (destinations), reads never do."""
    if scheme_of(url) in rivals.RIVAL_SCHEMES:
        MASK.remember(url)
        if key_prefix is not None:
            raise UsageError(
                f"--key-prefix applies to graphkeep URLs, not to {scheme_of(url)}://"
                " (its own prefix options are query parameters)"
            )
        opened = foreign.open_rival_saver(url, setup=setup, serde=serde, must_exist=must_exist)
        with opened as found:
            yield found
        return
    opener = _foreign_opener(
        url, key_prefix, foreign.open_sqlite_saver, foreign.open_postgres_saver
    )
    if opener is not None:
        with opener(url, setup=setup, serde=serde, must_exist=must_exist) as found:
            yield found
        return
    options = {"setup": setup, "key_prefix": key_prefix, "serde": serde, "encryption": key_ring()}
    with _connected(graphkeep.connect, url, options, _own("savers")) as saver:
        yield Native(url, saver)


@contextmanager
def open_store(
    url: str,
    *,
    key_prefix: str | None = None,
    setup: bool = False,
    index: dict[str, Any] | None = None,
) -> Iterator[BaseStore]:
    """A sync ``BaseStore`` for ``url``; ``setup`` creates the schema (destinations only).
    ``langgraph-redis://``, ``langgraph-mongodb://`` and ``langgraph-dynamodb://`` open the
    official stores of other packages (:mod:`graphkeep.moving.rival_stores`)."""
    if rival_stores.is_rival_store(url):
        MASK.remember(url)
        if key_prefix is not None:
            raise UsageError(f"--key-prefix applies to graphkeep URLs, not to {scheme_of(url)}://")
        with rival_stores.open_rival_store(url, setup=setup, index=index) as rival:
            yield rival
        return
    opener = _foreign_opener(
        url, key_prefix, foreign.open_sqlite_store, openers.open_postgres_store
    )
    if opener is not None:
        with opener(url, setup=setup, index=index) as store:
            yield store
        return
    options = {"setup": setup, "key_prefix": key_prefix, "index": index, "encryption": key_ring()}
    with _connected(graphkeep.connect_store, url, options, _own("stores")) as store:
        yield store


def _graphkeep_only(
    connect: Callable[..., AbstractContextManager[Any]], command: str
) -> Callable[[str, str | None], AbstractContextManager[Any]]:
    """An opener of ``connect``'s product at a graphkeep URL (never creates anything:
    ``setup=False``; with ``$GRAPHKEEP_KEYS`` its ring), for ``graphkeep <command>``."""

    @contextmanager
    def open_product(url: str, key_prefix: str | None) -> Iterator[Any]:
        _scheme(url, "redis://host:6379/0")
        require_graphkeep(url, command)
        options = {"setup": False, "key_prefix": key_prefix, "encryption": key_ring()}
        with _connected(connect, url, options) as product:
            yield product

    return open_product


#: the effect ledger at a URL (``graphkeep effects``)
open_effects = _graphkeep_only(graphkeep.connect_effects, "effects")
#: the run event log at a URL (``graphkeep events``)
open_events = _graphkeep_only(graphkeep.connect_events, "events")
