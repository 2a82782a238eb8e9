"""The store's live switch finished by ``graphkeep store copy SOURCE URL --all``, as the tests
of every kind of fallback run it (tests/test_store_fallback.py: a graphkeep store;
tests/test_store_fallback_rivals.py: the rivals' stores): with four items ``a``–``d`` under
:data:`NS` in the fallback, the application reads ``a`` through, puts ``b`` and deletes ``c``;
searches see graphkeep's items only until the copy has finished, then every item as the
application left it."""

from __future__ import annotations

import asyncio
from typing import Any

import graphkeep

from .cli_runs import gk

NS = ("users", "u1")
#: what the fallback holds, put there by the test
OLD = {key: {"v": f"old-{key}"} for key in "abcd"}


def switch_finished_by_copy_all(
    url: str, options: dict[str, Any], copy_all: list[str], mode: str
) -> None:
    """Open ``url`` with ``options`` (``fallback=`` among them), act as the application does,
    run ``copy_all`` (``store copy … --all``'s arguments) meanwhile and check both sides of it."""

    def sync_body() -> tuple[Any, ...]:
        with graphkeep.connect_store(url, **options) as store:
            store.get(NS, "a")  # read through
            store.put(NS, "b", {"v": "mine"})  # newer than the fallback's
            store.delete(NS, "c")  # deleted here
            before = (sorted(i.key for i in store.search(NS)), store.fallback_done())
            result = gk(*copy_all)
            return before, result, store.search(NS), store.fallback_done()

    async def async_body() -> tuple[Any, ...]:
        async with graphkeep.aconnect_store(url, **options) as store:
            await store.aget(NS, "a")
            await store.aput(NS, "b", {"v": "mine"})
            await store.adelete(NS, "c")
            searched = await store.asearch(NS)
            before = (sorted(i.key for i in searched), await store.afallback_done())
            result = await asyncio.to_thread(gk, *copy_all)
            return before, result, await store.asearch(NS), await store.afallback_done()

    outcome = sync_body() if mode == "sync" else asyncio.run(async_body())
    before, result, after, done = outcome
    assert before == (["a", "b"], False)  # graphkeep's items only, the copy not finished
    assert result.code == 0, result.out + result.err
    assert "fallback_done() is True" in result.out
    assert done is True
    assert {i.key: i.value for i in after} == {"a": OLD["a"], "b": {"v": "mine"}, "d": OLD["d"]}
