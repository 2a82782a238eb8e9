"""The hot layer's options on a saver (``hot=``, ``hot_ttl``): their checks, and :func:`layered` /
:func:`alayered`, which put a saver behind the layer ``graphkeep.hot`` registers here."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from typing import Any

from graphkeep.errors import ConfigurationError, mask_url
from graphkeep.port.urls import REDIS_SCHEMES, VALKEY_SCHEMES

#: seconds a thread stays in Redis after its last read, unless ``hot_ttl`` says otherwise
DEFAULT_HOT_TTL = 3600.0


def check_hot_ttl(hot_ttl: Any) -> float:
    """``hot_ttl`` in seconds (> 0), or :class:`~graphkeep.errors.ConfigurationError`."""
    if isinstance(hot_ttl, bool) or not isinstance(hot_ttl, int | float) or not hot_ttl > 0:
        raise ConfigurationError(f"hot_ttl must be a number of seconds above 0, got {hot_ttl!r}")
    if hot_ttl == float("inf"):
        raise ConfigurationError("hot_ttl must be finite: the hot layer only holds hot threads")
    return float(hot_ttl)


#: URL schemes the hot layer accepts (Redis and Redis Cluster; Valkey's forms of them too)
HOT_SCHEMES = (*REDIS_SCHEMES, *VALKEY_SCHEMES)


def check_hot_url(url: Any) -> str:
    """``url`` if it is a Redis URL (:data:`HOT_SCHEMES`), or ConfigurationError."""
    if not isinstance(url, str) or "://" not in url:
        raise ConfigurationError(f"hot= must be a Redis URL (redis://…), got {url!r}")
    scheme = url.split("://", 1)[0].lower()
    if scheme not in HOT_SCHEMES:
        raise ConfigurationError(
            f"hot= must be a Redis URL ({', '.join(s + '://' for s in HOT_SCHEMES)}),"
            f" got {mask_url(url)}"
        )
    return url


#: the saver options that make the layer (savers whose durable store is not Redis take them)
HOT_OPTIONS = frozenset({"hot", "hot_ttl"})


def hot_options(options: dict[str, Any]) -> tuple[str | None, dict[str, Any]]:
    """``hot`` (a Redis URL, or None) and the layer's options (``hot_ttl``, and the saver's
    ``telemetry``) taken out of a saver's ``options``, checked before any connection."""
    hot = options.pop("hot", None)
    if "hot_ttl" in options and hot is None:
        raise ConfigurationError("hot_ttl is an option of the hot layer: give hot='redis://…'")
    layer: dict[str, Any] = {}
    if hot is not None:
        check_hot_url(hot)
        layer["hot_ttl"] = check_hot_ttl(options.pop("hot_ttl", DEFAULT_HOT_TTL))
        if "telemetry" in options:
            layer["telemetry"] = options["telemetry"]
    return hot, layer


#: what makes a layer of a saver and a Redis URL (``graphkeep.hot.hot_layer``, which builds
#: the Redis side, registers itself when imported): the saver classes' ``hot=`` reaches it here
_OPENER: list[Callable[..., Any]] = []


def register_opener(opener: Callable[..., Any]) -> None:
    """Make ``opener(saver, url, **layer)`` the maker of :func:`layered`'s hot layers."""
    _OPENER[:] = [opener]


def _opener() -> Callable[..., Any]:
    if not _OPENER:
        raise ConfigurationError("hot= needs graphkeep.hot (import graphkeep first)")
    return _OPENER[0]


@contextmanager
def layered(saver: Any, hot: str | None, layer: Mapping[str, Any]) -> Iterator[Any]:
    """``saver`` itself when ``hot`` is None, else ``saver`` behind Redis at ``hot`` for the
    block (the layer's Redis client closed after it; the saver stays the caller's)."""
    if hot is None:
        yield saver
        return
    with _opener()(saver, hot, **layer) as hot_saver:
        yield hot_saver


@asynccontextmanager
async def alayered(saver: Any, hot: str | None, layer: Mapping[str, Any]) -> AsyncIterator[Any]:
    """:func:`layered` for an async saver."""
    if hot is None:
        yield saver
        return
    async with _opener()(saver, hot, **layer) as hot_saver:
        yield hot_saver
