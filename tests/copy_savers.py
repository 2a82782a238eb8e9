"""What ``graphkeep copy --source-saver / --dest-saver / --graph`` import in
tests/test_copy_versions.py: LangGraph's own MongoDBSaver (integer channel versions) opened
from a URL, and the app's graph (a chat with add_messages and an approval interrupt)."""

from __future__ import annotations

import os
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, Any, TypedDict

from langchain_core.messages import AIMessage
from langgraph.checkpoint.mongodb import MongoDBSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import interrupt


@contextmanager
def mongodb_saver(url: str) -> Iterator[MongoDBSaver]:
    """LangGraph's MongoDBSaver for ``mongodb://HOST:PORT/DB`` (DB: its database)."""
    server, _, db_name = url.rpartition("/")
    with MongoDBSaver.from_conn_string(server, db_name=db_name) as saver:
        yield saver


class ChatState(TypedDict, total=False):
    messages: Annotated[list[Any], add_messages]
    approved: str


def _bot(state: ChatState) -> dict[str, Any]:
    """Answers the last message, naming every human message so far (a reply that depends on
    the branch it is on)."""
    asked = [str(m.content) for m in state["messages"] if m.type == "human"]
    turn = len(asked)
    reply = f"answer {turn} to {' | '.join(asked)}"
    return {"messages": [AIMessage(content=reply, id=f"ai-{turn}-{zlib.crc32(reply.encode())}")]}


def _approval(state: ChatState) -> dict[str, Any]:
    asked = [m for m in state["messages"] if m.type == "human"]
    if "approve" not in str(asked[-1].content):
        return {}
    answer = interrupt({"question": f"approve {asked[-1].content}?"})
    return {"approved": f"{answer} after {len(state['messages'])} message(s)"}


def chat_builder() -> StateGraph[Any]:
    builder: StateGraph[Any] = StateGraph(ChatState)
    builder.add_node("bot", _bot)
    builder.add_node("approval", _approval)
    builder.add_edge(START, "bot")
    builder.add_edge("bot", "approval")
    builder.add_edge("approval", END)
    return builder


#: ``--graph tests.copy_savers:builder`` (a builder: graphkeep compiles it)
builder = chat_builder()
#: ``--graph tests.copy_savers:compiled`` (a compiled graph: graphkeep swaps its checkpointer)
compiled = chat_builder().compile()


def session_mongodb_saver() -> Any:
    """The no-argument form (as ``store copy --source-store`` takes): the database is named
    by GK_COPY_MONGODB_DB."""
    return mongodb_saver(
        f"{os.environ['MONGODB_URI'].rstrip('/')}/{os.environ['GK_COPY_MONGODB_DB']}"
    )
