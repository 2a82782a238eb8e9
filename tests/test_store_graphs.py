"""The store through real LangGraph graphs, on every backend set-up, sync and async:
``builder.compile(checkpointer=..., store=...)``, nodes reading and writing long-term memory
with ``get_store()``, a second thread (and new saver and store instances) seeing it."""

from __future__ import annotations

import uuid
from typing import Annotated, Any, TypedDict

import pytest
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.config import get_config, get_store
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages

import graphkeep
from conformance.setups import Setup, all_setups
from graphkeep.embeddings import hashing_embeddings

SETUPS = [s for s in all_setups() if s.marker is not None]
INDEX = {"dims": 32, "embed": hashing_embeddings(32), "fields": ["text"]}


class Chat(TypedDict, total=False):
    messages: Annotated[list[AnyMessage], add_messages]


def _text(state: Chat) -> str:
    return str(state["messages"][-1].content)


def remember(state: Chat) -> Chat:
    """Store every user message as a memory of the signed-in user; answer with the closest
    earlier memory (semantic search) and the user's stated favourite colour, if any."""
    store = get_store()
    user = str(get_config()["configurable"]["user_id"])
    text = _text(state)
    earlier = store.search(("memories", user), query=text, limit=1)
    colour = store.get(("profile", user), "colour")
    if text.startswith("my favourite colour is "):
        store.put(("profile", user), "colour", {"colour": text.rsplit(" ", 1)[-1]})
    store.put(("memories", user), uuid.uuid4().hex, {"text": text})
    parts = [f"colour={colour.value['colour']}" if colour else "colour=?"]
    parts.append(f"recall={earlier[0].value['text']}" if earlier else "recall=-")
    return {"messages": [AIMessage("; ".join(parts))]}


async def aremember(state: Chat) -> Chat:
    store = get_store()
    user = str(get_config()["configurable"]["user_id"])
    text = _text(state)
    earlier = await store.asearch(("memories", user), query=text, limit=1)
    colour = await store.aget(("profile", user), "colour")
    if text.startswith("my favourite colour is "):
        await store.aput(("profile", user), "colour", {"colour": text.rsplit(" ", 1)[-1]})
    await store.aput(("memories", user), uuid.uuid4().hex, {"text": text})
    parts = [f"colour={colour.value['colour']}" if colour else "colour=?"]
    parts.append(f"recall={earlier[0].value['text']}" if earlier else "recall=-")
    return {"messages": [AIMessage("; ".join(parts))]}


def _graph(node: Any, saver: Any, store: Any) -> Any:
    builder = StateGraph(Chat)
    builder.add_node("remember", node)
    builder.add_edge(START, "remember")
    builder.add_edge("remember", END)
    return builder.compile(checkpointer=saver, store=store)


def _config(thread: str, user: str) -> Any:
    return {"configurable": {"thread_id": thread, "user_id": user}}


FIRST = ["my favourite colour is teal", "the garden needs watering on monday"]
LATER = "when should the garden get water"


@pytest.mark.parametrize("setup", SETUPS, ids=[s.name for s in SETUPS])
def test_memory_written_in_one_thread_is_used_in_another_sync(setup: Setup) -> None:
    prefix, user = f"gk-sg-{uuid.uuid4().hex[:8]}", "ada"
    options = {"key_prefix": prefix}
    with (
        graphkeep.connect(setup.url, **options) as saver,
        graphkeep.connect_store(setup.url, index=INDEX, **options) as store,
    ):
        app = _graph(remember, saver, store)
        for text in FIRST:
            app.invoke({"messages": [HumanMessage(text)]}, _config("t1", user))
        other = app.invoke({"messages": [HumanMessage("hello")]}, _config("t3", "bob"))
    assert other["messages"][-1].content == "colour=?; recall=-"  # users never mix
    # a new worker: new saver, new store, new thread
    with (
        graphkeep.connect(setup.url, **options) as saver,
        graphkeep.connect_store(setup.url, index=INDEX, **options) as store,
    ):
        app = _graph(remember, saver, store)
        result = app.invoke({"messages": [HumanMessage(LATER)]}, _config("t2", user))
        assert result["messages"][-1].content == (
            "colour=teal; recall=the garden needs watering on monday"
        )
        assert len(store.search(("memories", user), limit=10)) == 3
        assert store.list_namespaces(prefix=("profile",)) == [("profile", "ada")]
        for ns in store.list_namespaces():
            for item in store.search(ns, limit=100):
                store.delete(ns, item.key)
        saver.delete_thread("t1")
        saver.delete_thread("t2")
        saver.delete_thread("t3")


@pytest.mark.parametrize("setup", SETUPS, ids=[s.name for s in SETUPS])
async def test_memory_written_in_one_thread_is_used_in_another_async(setup: Setup) -> None:
    prefix, user = f"gk-sg-{uuid.uuid4().hex[:8]}", "ada"
    options = {"key_prefix": prefix}
    async with (
        graphkeep.aconnect(setup.url, **options) as saver,
        graphkeep.aconnect_store(setup.url, index=INDEX, **options) as store,
    ):
        app = _graph(aremember, saver, store)
        for text in FIRST:
            await app.ainvoke({"messages": [HumanMessage(text)]}, _config("t1", user))
    async with (
        graphkeep.aconnect(setup.url, **options) as saver,
        graphkeep.aconnect_store(setup.url, index=INDEX, **options) as store,
    ):
        app = _graph(aremember, saver, store)
        result = await app.ainvoke({"messages": [HumanMessage(LATER)]}, _config("t2", user))
        assert result["messages"][-1].content == (
            "colour=teal; recall=the garden needs watering on monday"
        )
        for ns in await store.alist_namespaces():
            for item in await store.asearch(ns, limit=100):
                await store.adelete(ns, item.key)
        await saver.adelete_thread("t1")
        await saver.adelete_thread("t2")
