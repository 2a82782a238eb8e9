"""Graphs of every shape graphkeep's AG-UI translation covers, for the test that holds it to
``ag-ui-langgraph``'s events (tests/test_agui.py): a scripted chat model (no network) streams
exactly the chunks it is given.

:func:`build_shapes` is ``START -> plan -> act -> report -> direct -> act_again -> custom ->
think -> END`` on ``MessagesState``:

- ``plan``: text, then two tool calls whose names and arguments come in pieces, one call
  after the other (as providers stream them), the last chunk with token usage;
- ``act`` / ``act_again``: LangGraph's ``ToolNode`` (its tool messages without ids);
- ``report``: two model calls in one node (text, then more text), and a model call whose
  metadata says ``emit-messages: False``;
- ``direct``: a ``Command`` (no node-end snapshot) whose update is an ``AIMessage`` with a
  tool call made without a model (the tool's run is all the stream shows of it);
- ``custom``: ``manually_emit_message``, ``manually_emit_state`` and an event of its own,
  returning None;
- ``think``: reasoning content (signed), then text.

:func:`build_failing` streams a few words and raises.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, adispatch_custom_event
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage
from langchain_core.outputs import ChatGenerationChunk
from langchain_core.tools import tool
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode
from langgraph.types import Command

#: seconds a city's forecast takes (``ToolNode`` runs a message's calls at once: Lyon's
#: answer comes well after Paris's, so the results' order is the same in every run)
LATE = {"Lyon": 0.2}


@tool
async def forecast(city: str) -> str:
    """The forecast for a city."""
    await asyncio.sleep(LATE.get(city, 0))
    return f"{city}: sunny"


class Scripted(GenericFakeChatModel):
    """Streams the chunks of ``script`` (``AIMessageChunk`` keyword arguments), one per
    ``delay`` seconds."""

    script: list[dict[str, Any]] = []
    delay: float = 0.0

    async def _astream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[ChatGenerationChunk]:
        for fields in self.script:
            await asyncio.sleep(self.delay)
            yield ChatGenerationChunk(message=AIMessageChunk(**fields))


def _words(text: str) -> list[dict[str, Any]]:
    return [{"content": word + " "} for word in text.split()]


def _call(index: int, call_id: str, city: str) -> list[dict[str, Any]]:
    """A tool call streamed as providers do: its name, then its arguments in three pieces."""
    args = '{"city": "' + city + '"}'
    pieces = [args[:5], args[5:12], args[12:]]
    head = {"name": "forecast", "args": "", "id": call_id, "index": index}
    return [{"content": "", "tool_call_chunks": [head]}] + [
        {"content": "", "tool_call_chunks": [{"name": None, "args": p, "id": None, "index": index}]}
        for p in pieces
    ]


PLAN = [
    *_words("Checking two cities for you."),
    *_call(0, "call-paris", "Paris"),
    *_call(1, "call-lyon", "Lyon"),
    {
        "content": "",
        "usage_metadata": {"input_tokens": 12, "output_tokens": 30, "total_tokens": 42},
    },
]


#: reasoning content as a provider streams it (thinking blocks, the last signed, and a
#: redacted one), then the answer
THINK = [
    {"content": [{"type": "thinking", "thinking": "Weighing ", "index": 0}]},
    {"content": [{"type": "thinking", "thinking": "both cities.", "signature": "s", "index": 0}]},
    {"content": [{"type": "redacted_thinking", "data": "sealed", "index": 1}]},
    *_words("Both are sunny."),
]


def build_shapes(checkpointer: Any, delay: float = 0.0) -> Any:
    def model(script: list[dict[str, Any]]) -> Scripted:
        return Scripted(messages=iter([AIMessage(content="")]), script=script, delay=delay)

    async def plan(state: MessagesState) -> dict[str, Any]:
        return {"messages": [await model(PLAN).ainvoke(state["messages"])]}

    async def report(state: MessagesState) -> dict[str, Any]:
        first = await model(_words("Paris is sunny.")).ainvoke(state["messages"])
        second = await model(_words("Lyon is sunny too.")).ainvoke(state["messages"])
        quiet = await model(_words("not shown")).ainvoke(
            state["messages"], {"metadata": {"emit-messages": False}}
        )
        return {"messages": [first, second, quiet]}

    def direct(state: MessagesState) -> Command[Any]:
        call = {"name": "forecast", "args": {"city": "Nice"}, "id": "call-nice"}
        update = {"messages": [AIMessage(content="", tool_calls=[call], id="direct-1")]}
        return Command(update=update, goto="act_again")

    async def custom(state: MessagesState) -> None:
        await adispatch_custom_event(
            "manually_emit_message", {"message_id": "manual-1", "message": "Done."}
        )
        await adispatch_custom_event("manually_emit_state", {"checked": ["Paris", "Lyon"]})
        await adispatch_custom_event("progress", {"percent": 100})
        return None  # the manual message is the client's only

    async def think(state: MessagesState) -> dict[str, Any]:
        return {"messages": [await model(THINK).ainvoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("plan", plan)
    builder.add_node("act", ToolNode([forecast]))
    builder.add_node("report", report)
    builder.add_node("direct", direct, destinations=("act_again",))
    builder.add_node("act_again", ToolNode([forecast]))
    builder.add_node("custom", custom)
    builder.add_edge(START, "plan")
    builder.add_edge("plan", "act")
    builder.add_edge("act", "report")
    builder.add_edge("report", "direct")
    builder.add_edge("act_again", "custom")
    builder.add_node("think", think)
    builder.add_edge("custom", "think")
    builder.add_edge("think", END)
    return builder.compile(checkpointer=checkpointer)


def build_failing(checkpointer: Any) -> Any:
    async def fail(state: MessagesState) -> dict[str, Any]:
        model = Scripted(messages=iter([AIMessage(content="")]), script=_words("I will fail"))
        await model.ainvoke(state["messages"])
        raise ValueError("the model's provider went away")

    builder = StateGraph(MessagesState)
    builder.add_node("fail", fail)
    builder.add_edge(START, "fail")
    builder.add_edge("fail", END)
    return builder.compile(checkpointer=checkpointer)
