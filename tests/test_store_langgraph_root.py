"""The reserved root label ``langgraph``: refused by ``put`` / ``aput``, written by ``batch`` /
``abatch``, as LangGraph's own stores do (LangGraph's components, Agent Server among them,
store their items under it through ``batch``)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from langgraph.store.base import GetOp, InvalidNamespaceError, PutOp
from langgraph.store.memory import InMemoryStore

import graphkeep

NAMESPACE = ("langgraph", "foo")


def _check_sync(store: Any) -> None:
    assert store.batch([PutOp(NAMESPACE, "k", {"v": 1})]) == [None]
    [item] = store.batch([GetOp(NAMESPACE, "k")])
    assert item is not None and item.value == {"v": 1} and item.namespace == NAMESPACE
    assert store.get(NAMESPACE, "k").value == {"v": 1}
    with pytest.raises(InvalidNamespaceError, match="langgraph"):
        store.put(NAMESPACE, "other", {"v": 2})
    assert store.get(NAMESPACE, "other") is None
    store.batch([PutOp(NAMESPACE, "k", None)])  # a delete through batch, as LangGraph allows
    assert store.get(NAMESPACE, "k") is None


async def _check_async(store: Any) -> None:
    assert await store.abatch([PutOp(NAMESPACE, "k", {"v": 1})]) == [None]
    [item] = await store.abatch([GetOp(NAMESPACE, "k")])
    assert item is not None and item.value == {"v": 1} and item.namespace == NAMESPACE
    with pytest.raises(InvalidNamespaceError, match="langgraph"):
        await store.aput(NAMESPACE, "other", {"v": 2})
    assert await store.aget(NAMESPACE, "other") is None


def test_langgraph_root_in_batch_not_in_put_like_inmemorystore(graphkeep_url: str) -> None:
    _check_sync(InMemoryStore())  # the reference: what LangGraph itself does
    with graphkeep.connect_store(graphkeep_url) as store:
        _check_sync(store)


async def test_langgraph_root_in_abatch_not_in_aput_like_inmemorystore(graphkeep_url: str) -> None:
    await _check_async(InMemoryStore())
    async with graphkeep.aconnect_store(graphkeep_url) as store:
        await _check_async(store)
        # the async store's sync batch, from another thread (LangGraph's sync nodes)
        [item] = await asyncio.to_thread(store.batch, [GetOp(NAMESPACE, "k")])
        assert item is not None and item.value == {"v": 1}
