"""How every public product class is built, written once: a backend's mixin checks the client
and names the :class:`Site` the records live at; :class:`Product` builds the port, the executor
and the shell on it (a saver also its effect ledger), and gives every class ``from_url``.

A backend states three things in its ``client.py`` (see docs/architecture.md, "The construction
path"): its mixin's ``__init__`` (the client, and the database or table), its :class:`Site`
(how a port's requests reach the server, sync or async) and ``opening(url, options)`` (the client
a URL opens, the options it takes out, the arguments the class gets beside the client). A
product class is then a declaration: ``class RedisCache(OnRedis, SyncCache)`` with its port's
class in ``port_type``. The port's ``configured(site, options)`` takes its own options out; what
is left goes to the shell.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AsyncExitStack, ExitStack
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, Protocol, TypeVar, cast

from graphkeep.cache.shells import AsyncCache, SyncCache
from graphkeep.checkpoint.fallback import awith_fallback, fallback_option, with_fallback
from graphkeep.checkpoint.hot import alayered, hot_options, layered
from graphkeep.checkpoint.saver import AsyncSaver, SaverBase, SyncSaver
from graphkeep.effects.ledger import AsyncLedger, SyncLedger
from graphkeep.errors import ConfigurationError
from graphkeep.events.log import AsyncEventLog, SyncEventLog
from graphkeep.store import fallback as store_fallback
from graphkeep.store.shells import AsyncStore, StoreBase, SyncStore

__all__ = ["Opened", "Opening", "PrefixedPort", "Product", "Site"]

#: the shells a product class is built on: the contract, on a blocking or an asyncio client
SYNC_SHELLS: tuple[type, ...] = (SyncSaver, SyncStore, SyncCache, SyncEventLog, SyncLedger)
ASYNC_SHELLS: tuple[type, ...] = (AsyncSaver, AsyncStore, AsyncCache, AsyncEventLog, AsyncLedger)

P = TypeVar("P", bound="Product")


class Site(Protocol):
    """Where one product's records live on a backend (its client, database or table), and how
    a port's requests are sent there."""

    def executor(self, port: Any, is_async: bool) -> Any:
        """The executor that sends ``port``'s requests, retried by the backend's policy."""
        ...


@dataclass(frozen=True)
class Opening:
    """What a URL opens: the client, made when the block starts and closed when it ends
    (``client(is_async)`` gives its context manager), and the arguments the class takes beside
    it (the database or table, the server's name for errors)."""

    client: Callable[[bool], Any]
    args: dict[str, Any] = field(default_factory=dict)


class PrefixedPort:
    """A port whose one option is ``key_prefix`` (what most products' ports take): its
    ``configured`` builds it from that option alone."""

    @classmethod
    def configured(cls, site: Any, options: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        return cast(Any, cls)(key_prefix=options.pop("key_prefix", "graphkeep")), options


class Product:
    """The mixin of every public product class (``RedisSaver``, ``AsyncMongoDBStore``, …), first
    among its bases through the backend's own mixin (``OnRedis``, ``OnMongoDB``, ``OnDynamoDB``).

    The class names its port's class in ``port_type``; a saver also its backend's effects port
    in ``effects_port_type`` (the records of ``saver.effects``, deleted with their thread).
    """

    __slots__ = ()

    port_type: ClassVar[Any]
    effects_port_type: ClassVar[Any] = None
    #: the backend's: the options ``from_url`` takes for the client it opens
    client_options: ClassVar[frozenset[str]] = frozenset()

    @classmethod
    def opening(cls, url: str, options: dict[str, Any]) -> Opening:
        """The backend's: what ``url`` opens, its client options taken out of ``options``."""
        raise NotImplementedError

    @classmethod
    def is_async(cls) -> bool:
        """Whether the class runs on an asyncio client (``async with``, awaited calls)."""
        return issubclass(cls, ASYNC_SHELLS)

    def build(self, site: Site, options: dict[str, Any]) -> None:
        """Build this product on ``site``: the port takes its options, the rest go to the
        shell with the site's executor; a saver's effect ledger shares that executor."""
        is_async = self.is_async()
        prefix = options.get("key_prefix", "graphkeep")
        port, rest = self.port_type.configured(site, options)
        execute = site.executor(port, is_async)
        shell: Any = next(c for c in type(self).__mro__ if c in SYNC_SHELLS + ASYNC_SHELLS)
        shell.__init__(self, port, execute, **rest)
        if isinstance(self, SaverBase) and self.effects_port_type is not None:
            effects, _ = self.effects_port_type.configured(site, {"key_prefix": prefix})
            ledger = (AsyncLedger if is_async else SyncLedger)(
                effects, execute, serde=self.serde, encryption=self.encryption
            )
            self.with_effects(effects, ledger)

    @classmethod
    def from_url(cls: type[P], url: str, *, setup: bool = True, **options: Any) -> Opened[P]:
        """``with Class.from_url(url) as product`` (``async with`` for an async class): a new
        client for ``url``, closed when the block ends; the schema created first unless
        ``setup=False``. A saver's ``hot="redis://…"`` (and ``hot_ttl``) puts Redis in front
        of it as its hot layer (:func:`graphkeep.hot_layer`)."""
        return cls.opened(cls.opening(url, options), setup, options)

    @classmethod
    def opened(cls: type[P], opening: Opening, setup: bool, options: dict[str, Any]) -> Opened[P]:
        """``from_url`` on an :class:`Opening` already made (DynamoDB's ``from_table``)."""
        return Opened(cls, opening, setup, options)


class Opened(Generic[P]):
    """What ``from_url`` returns: entered, the client is opened, the product built on it and
    set up (and for a saver, wrapped in its hot layer when one is asked for); on exit a store's
    TTL sweeper stops and the client closes. ``with`` for a sync class, ``async with`` for an
    async one; the other way round is refused with the class to use instead."""

    def __init__(self, cls: type[P], opening: Opening, setup: bool, options: dict[str, Any]):
        self.cls, self.opening, self.setup, self.options = cls, opening, setup, options
        self.hot = hot_options(options) if issubclass(cls, SaverBase) else None
        self.fallback: Any = None
        if issubclass(cls, SaverBase):
            self.fallback = fallback_option(options)
        elif issubclass(cls, StoreBase):  # the store's live switch (graphkeep.store.fallback)
            self.fallback = store_fallback.fallback_option(options)
        self.stack: Any = None

    def _made(self, client: Any) -> P:
        return cast(P, cast(Any, self.cls)(client, **self.opening.args, **self.options))

    def _wrong(self, is_async: bool) -> ConfigurationError:
        name = self.cls.__name__
        if is_async:
            return ConfigurationError(
                f"{name} is synchronous: use `with {name}.from_url(...)`,"
                f" or Async{name} with `async with`"
            )
        return ConfigurationError(
            f"{name} runs on asyncio: use `async with {name}.from_url(...)`,"
            f" or {name.removeprefix('Async')} with `with`"
        )

    def __enter__(self) -> P:
        if self.cls.is_async():
            raise self._wrong(False)
        with ExitStack() as stack:
            built = self._made(stack.enter_context(self.opening.client(False)))
            if isinstance(built, SyncStore):
                stack.callback(built.close)
            if self.setup:
                cast(Any, built).setup()
            if isinstance(built, StoreBase):
                built = stack.enter_context(store_fallback.with_fallback(built, self.fallback))
            else:
                built = stack.enter_context(with_fallback(built, self.fallback))
            if self.hot is not None:
                built = stack.enter_context(layered(built, *self.hot))
            self.stack = stack.pop_all()
        return built

    def __exit__(self, *exc: Any) -> bool | None:
        stack, self.stack = self.stack, None
        return cast(ExitStack, stack).__exit__(*exc)

    async def __aenter__(self) -> P:
        if not self.cls.is_async():
            raise self._wrong(True)
        async with AsyncExitStack() as stack:
            built = self._made(await stack.enter_async_context(self.opening.client(True)))
            if isinstance(built, AsyncStore):
                stack.push_async_callback(built.aclose)
            if self.setup:
                prepare = built.asetup if isinstance(built, AsyncSaver) else cast(Any, built).setup
                await prepare()
            if isinstance(built, StoreBase):
                built = await stack.enter_async_context(
                    store_fallback.awith_fallback(built, self.fallback)
                )
            else:
                built = await stack.enter_async_context(awith_fallback(built, self.fallback))
            if self.hot is not None:
                built = await stack.enter_async_context(alayered(built, *self.hot))
            self.stack = stack.pop_all()
        return built

    async def __aexit__(self, *exc: Any) -> bool | None:
        stack, self.stack = self.stack, None
        return await cast(AsyncExitStack, stack).__aexit__(*exc)
