"""An option a product takes whose meaning lives in a layer above it (``fallback=``: the
saver's and the store's live switch, :mod:`graphkeep.moving`): the higher layer registers the
opener that attaches it, and the construction path takes the option out and enters it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

from graphkeep.errors import ConfigurationError


class Attachable:
    """The option ``name`` and the opener registered for it: ``opener(product, value)`` is a
    context manager attaching ``value`` to ``product`` for its block."""

    def __init__(self, name: str, provider: str) -> None:
        self.name = name
        self.provider = provider
        self._opener: list[Callable[..., Any]] = []

    def register(self, opener: Callable[..., Any]) -> None:
        self._opener[:] = [opener]

    def option(self, options: dict[str, Any]) -> Any:
        """The option taken out of ``options`` (None when not given)."""
        value = options.pop(self.name, None)
        if value is not None and not self._opener:
            raise ConfigurationError(f"{self.name}= needs {self.provider} (import graphkeep first)")
        return value

    @contextmanager
    def attached(self, product: Any, value: Any) -> Iterator[Any]:
        """``product`` with ``value`` attached for the block (``value`` None: as it is)."""
        if value is None:
            yield product
            return
        with self._opener[0](product, value):
            yield product

    @asynccontextmanager
    async def aattached(self, product: Any, value: Any) -> AsyncIterator[Any]:
        """:meth:`attached` for an async product (the opener's work is blocking)."""
        with self.attached(product, value) as done:
            yield done
