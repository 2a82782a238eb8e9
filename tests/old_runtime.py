"""A chat on LangGraph 1.1 (before DeltaChannel), run in the side venv of ``./dev``
(``GRAPHKEEP_LANGGRAPH_1_1_PYTHON``) by tests/test_materialize.py.

Standard library and what that venv installs only (never the suite's modules). Argument: one
JSON object ``{"url": ..., "key_prefix": ...}`` (``sqlite:///`` and ``postgresql://`` URLs
open LangGraph's ``SqliteSaver`` and ``PostgresSaver``). Then one JSON request per line on
stdin, each naming its ``thread_id``, one JSON answer per line on stdout:

- ``{"op": "read"}``: ``{"messages": [[type, id, content], ...], "next": [...],
  "interrupts": [...]}`` as ``get_state`` shows them;
- ``{"op": "turn", "text": ..., "id": ...}``: one more turn (the human message, the bot's
  answer), then ``read``'s answer;
- ``{"op": "resume", "value": ...}``: ``Command(resume=value)``, then ``read``'s answer;
- ``{"op": "quit"}``.

The graph: ``START -> route``; ``route`` goes to ``ask`` (which calls ``interrupt``) when the
last message says "approve", else to ``bot``, which answers "answer to <text>".
"""

from __future__ import annotations

import json
import sqlite3
import sys
from contextlib import ExitStack
from typing import Annotated, Any, TypedDict

import langgraph
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import Command, interrupt


class State(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


def route(state: State) -> str:
    last = state["messages"][-1] if state["messages"] else None
    return "ask" if last is not None and "approve" in str(last.content) else "bot"


def bot(state: State) -> dict[str, Any]:
    last = state["messages"][-1]
    return {"messages": [AIMessage(f"answer to {last.content}", id=f"ai-{last.id}")]}


def ask(state: State) -> dict[str, Any]:
    decision = interrupt("approve?")
    return {"messages": [AIMessage(f"approved: {decision}", id=f"ai-approved-{decision}")]}


def build(saver: Any) -> Any:
    builder = StateGraph(State)
    builder.add_node("bot", bot)
    builder.add_node("ask", ask)
    builder.add_conditional_edges(START, route, ["bot", "ask"])
    builder.add_edge("bot", END)
    builder.add_edge("ask", END)
    return builder.compile(checkpointer=saver)


def read(graph: Any, config: Any) -> dict[str, Any]:
    state = graph.get_state(config)
    return {
        "langgraph": getattr(langgraph, "__version__", None) or _version(),
        "messages": [[m.type, m.id, m.content] for m in state.values.get("messages", [])],
        "next": list(state.next),
        "interrupts": [str(i.value) for i in state.interrupts],
    }


def _version() -> str:
    from importlib.metadata import version

    return version("langgraph")


def main() -> None:
    args = json.loads(sys.argv[1])
    with ExitStack() as stack:
        url = args["url"]
        if url.startswith("sqlite:///"):
            from langgraph.checkpoint.sqlite import SqliteSaver

            conn = sqlite3.connect(url[len("sqlite:///") :], check_same_thread=False)
            stack.callback(conn.close)
            saver = SqliteSaver(conn)
        elif url.startswith("postgresql://"):
            from langgraph.checkpoint.postgres import PostgresSaver

            saver = stack.enter_context(PostgresSaver.from_conn_string(url))
        else:
            import graphkeep

            saver = stack.enter_context(graphkeep.connect(url, key_prefix=args["key_prefix"]))
        graph = build(saver)
        for line in sys.stdin:
            request = json.loads(line)
            op = request["op"]
            config = {"configurable": {"thread_id": request.get("thread_id")}}
            if op == "quit":
                break
            if op == "turn":
                message = HumanMessage(request["text"], id=request["id"])
                graph.invoke({"messages": [message]}, config)
            elif op == "resume":
                graph.invoke(Command(resume=request["value"]), config)
            print(json.dumps(read(graph, config)), flush=True)


if __name__ == "__main__":
    main()
