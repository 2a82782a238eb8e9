"""The graph the AG-UI tests serve: streamed text, a tool call, an approval interrupt.

``START -> agent -> (tools -> agent)* -> approval? -> END`` on ``MessagesState``:

- ``agent`` asks a fake chat model (no network): a message naming a city ("weather in
  Paris") gets a ``get_weather`` tool call first, then — after the tool's answer — a reply
  quoting it; any other message gets :func:`reply_to` of it. Replies stream one chunk per
  word with ``TOKEN_DELAY`` seconds between chunks (environment ``AGUI_TOKEN_DELAY``);
- ``tools`` runs ``get_weather`` (LangGraph's ``ToolNode``; each ToolMessage's id is its tool
  call's);
- a message asking for a refund first stops at ``interrupt({"question": ...})`` and the reply
  says whether the human approved.

``python -m tests.agui.graph`` serves it with :mod:`graphkeep.agui` at ``/agent`` on
``AGUI_PORT`` (environment ``GRAPHKEEP_URL``: the saver and the event log; ``AGUI_ON_BUSY``
``wait`` or ``reject``: through ``saver.exclusive`` with that ``on_busy``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
from collections.abc import AsyncIterator
from typing import Any

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    HumanMessage,
    ToolMessage,
)
from langchain_core.outputs import ChatGenerationChunk
from langchain_core.tools import tool
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode
from langgraph.types import interrupt

CITY = re.compile(r"weather in ([A-Z][a-z]+)")
REFUND = re.compile(r"\brefund", re.IGNORECASE)


def reply_to(text: str, approved: bool | None = None) -> str:
    """The exact reply to a user message without a city."""
    if approved is not None:
        verdict = "approved" if approved else "declined"
        return f"Your refund was {verdict} by our team. Thank you for waiting while we checked."
    return (
        f"You said {len(text.split())} words. Here is a longer answer so that the stream has"
        " many chunks to cut in the middle of, one word at a time, all of them in order."
    )


#: what the agent says with its tool call, before the tool answers
LOOKUP_REPLY = "Let me look that up."


def weather_reply(city: str, forecast: str) -> str:
    return f"The weather in {city}: {forecast}. Enjoy your day there."


@tool
def get_weather(city: str) -> str:
    """The forecast for a city."""
    return f"sunny and {len(city) * 3} degrees"


class StreamingFake(GenericFakeChatModel):
    """Streams its message word by word (tool calls as one last chunk), waiting
    ``token_delay`` seconds before each chunk; with a ``gate`` (an ``asyncio.Event``) it
    waits for the gate to open before its word number ``gate_after``."""

    token_delay: float = 0.01
    gate: Any = None
    gate_after: int = 0

    async def _astream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[ChatGenerationChunk]:
        message = next(self.messages)
        words = re.findall(r"\S+\s*", str(message.content))
        for i, word in enumerate(words):
            if self.gate is not None and i == self.gate_after:
                await self.gate.wait()
            await asyncio.sleep(self.token_delay)
            chunk = ChatGenerationChunk(message=AIMessageChunk(content=word, id=message.id))
            if run_manager is not None:
                await run_manager.on_llm_new_token(word, chunk=chunk)
            yield chunk
        if isinstance(message, AIMessage) and message.tool_calls:
            await asyncio.sleep(self.token_delay)
            for i, call in enumerate(message.tool_calls):  # as providers do: name, then args
                for part in (
                    {"name": call["name"], "args": "", "id": call["id"], "index": i},
                    {"name": None, "args": _json(call["args"]), "id": None, "index": i},
                ):
                    await asyncio.sleep(self.token_delay)
                    yield ChatGenerationChunk(
                        message=AIMessageChunk(content="", id=message.id, tool_call_chunks=[part])
                    )


def _json(value: Any) -> str:
    import json

    return json.dumps(value)


def _last_human(messages: list[BaseMessage]) -> str:
    return next((m.text for m in reversed(messages) if isinstance(m, HumanMessage)), "")


class State(MessagesState):
    approved: bool | None


def build_graph(
    checkpointer: Any,
    token_delay: float | None = None,
    *,
    tool_message_ids: bool = True,
    gate: asyncio.Event | None = None,
    gate_after: int = 0,
) -> Any:
    """The graph; ``tool_message_ids=False`` keeps ``ToolNode``'s id-less tool messages;
    with a ``gate``, a plain reply (no city, no refund) waits for it before its word number
    ``gate_after``: a test holds the run mid-stream as long as it needs, whatever the load."""
    delay = (
        float(os.environ.get("AGUI_TOKEN_DELAY", "0.01")) if token_delay is None else token_delay
    )

    async def agent(state: State) -> dict[str, Any]:
        messages = state["messages"]
        last = messages[-1]
        text = _last_human(messages)
        city = CITY.search(text)
        if isinstance(last, ToolMessage):
            reply = AIMessage(content=weather_reply(city.group(1) if city else "?", last.text))
        elif city:
            call = {
                "name": "get_weather",
                "args": {"city": city.group(1)},
                "id": "call-" + city.group(1),
            }
            reply = AIMessage(content=LOOKUP_REPLY, tool_calls=[call])
        else:
            reply = AIMessage(content=reply_to(text, state.get("approved")))
            model = StreamingFake(
                messages=iter([reply]), token_delay=delay, gate=gate, gate_after=gate_after
            )
            return {"messages": [await model.ainvoke(messages)]}
        model = StreamingFake(messages=iter([reply]), token_delay=delay)
        return {"messages": [await model.ainvoke(messages)]}

    def route(state: State) -> str:
        last = state["messages"][-1]
        if isinstance(last, AIMessage) and last.tool_calls:
            return "tools"
        if REFUND.search(_last_human(state["messages"])) and state.get("approved") is None:
            return "approval"
        return END

    def approval(state: State) -> dict[str, Any]:
        decision = interrupt({"question": "Approve the refund?", "message": "Approve the refund?"})
        return {"approved": bool(decision)}

    async def after_approval(state: State) -> dict[str, Any]:
        reply = AIMessage(content=reply_to("", state.get("approved")))
        model = StreamingFake(messages=iter([reply]), token_delay=delay)
        return {"messages": [await model.ainvoke(state["messages"])]}

    builder = StateGraph(State)
    builder.add_node("agent", agent)
    tool_node = ToolNode([get_weather])

    async def tools(state: State) -> dict[str, Any]:
        # ToolNode's ToolMessages have no id (the reducer gives them a random one), and
        # ag-ui-langgraph's TOOL_CALL_RESULT then names the message by its tool call id: the
        # run's closing MESSAGES_SNAPSHOT carries another id, and @ag-ui/client drops the
        # streamed tool message and appends the snapshot's after the final answer. The tool
        # call id as the message id keeps both the same.
        update: dict[str, Any] = await tool_node.ainvoke(state)
        for message in update["messages"] if tool_message_ids else ():
            message.id = message.id or message.tool_call_id
        return update

    builder.add_node("tools", tools)
    builder.add_node("approval", approval)
    builder.add_node("answer", after_approval)
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", route, ["tools", "approval", END])
    builder.add_edge("tools", "agent")
    builder.add_edge("approval", "answer")
    builder.add_edge("answer", END)
    return builder.compile(checkpointer=checkpointer)


def create_app(
    url: str | None = None, key_prefix: str | None = None, on_busy: str | None = None
) -> Any:
    """The Starlette app serving the graph at ``/agent`` (saver and log on ``url``); with
    ``on_busy`` (``"wait"`` or ``"reject"``) the graph is served through
    ``saver.exclusive(graph, on_busy=on_busy)``."""
    from starlette.applications import Starlette

    import graphkeep
    from graphkeep.agui import AGUIRuns, agui_routes

    url = url or os.environ["GRAPHKEEP_URL"]
    options: dict[str, Any] = {} if key_prefix is None else {"key_prefix": key_prefix}
    holder: dict[str, AGUIRuns] = {}

    @contextlib.asynccontextmanager
    async def lifespan(app: Any) -> AsyncIterator[None]:
        async with (
            graphkeep.aconnect(url, **options) as saver,
            graphkeep.aconnect_events(url, **options) as events,
        ):
            graph = build_graph(saver)
            if on_busy is not None:
                graph = saver.exclusive(graph, on_busy=on_busy)
            runs = AGUIRuns(graph, events)
            holder["runs"] = runs
            try:
                yield
            finally:
                await runs.aclose()

    return Starlette(routes=agui_routes(lambda: holder["runs"], "/agent"), lifespan=lifespan)


if __name__ == "__main__":
    import uvicorn

    uvicorn.run(
        create_app(
            key_prefix=os.environ.get("GRAPHKEEP_KEY_PREFIX") or None,
            on_busy=os.environ.get("AGUI_ON_BUSY") or None,
        ),
        host="127.0.0.1",
        port=int(os.environ["AGUI_PORT"]),
        log_level="warning",
    )
