"""Any LangGraph saver as a copy's source or destination: ``--source-saver`` / ``--dest-saver``.

``MODULE:CALLABLE`` names a callable the app provides; ``graphkeep copy`` calls it with the
side's URL (``SRC_URL`` or ``DST_URL``, as given on the command line) as its one argument, or
with none when it takes none (as ``graphkeep store copy``'s ``--source-store`` callables: the
URL then only labels the side), and it returns a context manager that yields a
``BaseCheckpointSaver`` (what
``MongoDBSaver.from_conn_string`` returns, say). The saver is then used through LangGraph's
public API only, as a :class:`~graphkeep.cli.foreign.Foreign` endpoint of kind ``"custom"``;
it creates its own schema (the copy asks nothing of it but ``put`` / ``put_writes``), and its
serializer is the copy's (values travel byte for byte, as with LangGraph's SQLite and
Postgres savers).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver

from graphkeep.cli.arguments import import_object
from graphkeep.cli.console import UsageError
from graphkeep.cli.endpoints import Endpoint, open_endpoint
from graphkeep.cli.foreign import Foreign

CUSTOM = "custom"
EXAMPLE = "app.savers:open_saver"


@dataclass(frozen=True)
class SaverFactory:
    """An app's callable, ``(URL) -> context manager yielding a BaseCheckpointSaver``."""

    spec: str
    option: str
    open: Callable[..., Any]


def load_factory(spec: str | None, option: str) -> SaverFactory | None:
    """What ``option`` (``--source-saver`` / ``--dest-saver``) names, imported before any
    store is opened (None: the option is not given)."""
    if spec is None:
        return None
    found = import_object(spec, option, EXAMPLE)
    if not callable(found):
        raise UsageError(f"{option} {spec} is a {type(found).__name__}, not a callable")
    return SaverFactory(spec, option, found)


def takes_url(factory: Callable[..., Any]) -> bool:
    """Does ``factory`` take one positional argument (the URL)? Else it is called with none,
    as ``graphkeep store copy``'s ``--source-store`` / ``--dest-store`` callables are."""
    try:
        inspect.signature(factory).bind("url")
    except TypeError:
        return False
    except ValueError:  # no signature to read (a builtin): give it the URL
        return True
    return True


@contextmanager
def open_custom(factory: SaverFactory, url: str, *, serde: Any = None) -> Iterator[Foreign]:
    """The saver ``factory`` opens for ``url``."""
    option, spec = factory.option, factory.spec
    try:
        manager = factory.open(url) if takes_url(factory.open) else factory.open()
        if not isinstance(manager, AbstractContextManager):
            raise TypeError(f"it returned a {type(manager).__name__}, not a context manager")
    except Exception as exc:  # the app's factory may fail in any way
        raise UsageError(f"{option} {spec}: {type(exc).__name__}: {exc}") from exc
    with manager as saver:
        if not isinstance(saver, BaseCheckpointSaver):
            raise UsageError(
                f"{option} {spec} yielded a {type(saver).__name__}, not a LangGraph"
                " BaseCheckpointSaver"
            )
        if serde is not None:
            saver.serde = serde
        yield Foreign(url, saver, CUSTOM)


@contextmanager
def open_side(
    url: str,
    factory: SaverFactory | None,
    *,
    key_prefix: str | None = None,
    serde: Any = None,
    setup: bool = False,
    must_exist: bool = True,
) -> Iterator[Endpoint]:
    """One side of a copy: the app's saver when ``factory`` is given, else ``url``'s."""
    if factory is not None:
        with open_custom(factory, url, serde=serde) as custom:
            yield custom
        return
    with open_endpoint(
        url, key_prefix=key_prefix, serde=serde, setup=setup, must_exist=must_exist
    ) as found:
        yield found
