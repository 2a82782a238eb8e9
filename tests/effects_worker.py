"""A worker process for tests/test_effects.py: a ``create_react_agent`` whose tool (an effect
of the saver's ledger, ``ledger.once(tool)``) appends a line to a counter file.

``python -m tests.effects_worker URL PREFIX THREAD COUNTER MODE PHASE``; MODE ``sync`` or
``async``; PHASE ``crash``: run the thread from its question, and once the tool has returned,
stop inside the saver's write of the tool's output (before anything of it is stored), print
``TOOL-RETURNED`` and wait to be killed; PHASE ``resume``: resume the thread (``invoke(None)``)
and print its final messages as JSON lines.

The graph runs with ``durability="sync"``: each step's checkpoint is stored before the next
step starts, so the step that asked for the tool is saved when the tool runs (under
LangGraph's default ``"async"`` it may still be in flight, and a crash then loses the
request itself: the model step runs again and asks anew — see docs/effects.md).
"""

from __future__ import annotations

import asyncio
import json
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from langgraph.prebuilt import create_react_agent

import graphkeep


class ScriptedModel(BaseChatModel):
    """A chat model that asks for one ticket, then answers with the tool's result."""

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ScriptedModel:
        return self

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> ChatResult:
        results = [m for m in messages if isinstance(m, ToolMessage)]
        if results:
            reply = AIMessage(f"Done: {results[-1].content}")
        else:
            call = {"name": "create_ticket", "args": {"title": "parcel lost"}, "id": "call-1"}
            reply = AIMessage("", tool_calls=[call])
        return ChatResult(generations=[ChatGeneration(message=reply)])


def agent(saver: Any, counter: Path) -> Any:
    @tool
    def create_ticket(title: str) -> str:
        """Open a support ticket."""
        with counter.open("a") as f:
            f.write(title + "\n")
        count = len(counter.read_text().splitlines())
        return f"ticket #{count}: {title}"

    return create_react_agent(
        ScriptedModel(), [saver.effects.once(create_ticket)], checkpointer=saver
    )


def _holds_tool_output(writes: Sequence[tuple[str, Any]]) -> bool:
    return any(
        ch == "messages"
        and any(isinstance(m, ToolMessage) for m in (v if isinstance(v, list) else [v]))
        for ch, v in writes
    )


def _stop_here() -> None:
    print("TOOL-RETURNED", flush=True)
    while True:  # killed here (kill -9), before the write reaches the store
        time.sleep(60)


def crash_on_tool_output(saver: Any) -> None:
    """The window the test makes deterministic: the tool returned (its record is DONE), its
    ToolMessage is about to be written: the process stops before the write."""
    put_writes, aput_writes = saver.put_writes, saver.aput_writes

    def hooked(
        config: Any, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        if _holds_tool_output(writes):
            _stop_here()
        put_writes(config, writes, task_id, task_path)

    async def ahooked(
        config: Any, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        if _holds_tool_output(writes):
            threading.Thread(target=_stop_here, daemon=True).start()
            await asyncio.Event().wait()
        await aput_writes(config, writes, task_id, task_path)

    saver.put_writes, saver.aput_writes = hooked, ahooked


def report(state: dict[str, Any]) -> None:
    for message in state["messages"]:
        print(json.dumps({"type": message.type, "content": message.content}), flush=True)


def main(url: str, prefix: str, thread: str, counter: str, mode: str, phase: str) -> None:
    config = {"configurable": {"thread_id": thread}}
    question = {"messages": [("user", "My parcel is lost")]}
    if mode == "sync":
        with graphkeep.connect(url, key_prefix=prefix) as saver:
            graph = agent(saver, Path(counter))
            if phase == "crash":
                crash_on_tool_output(saver)
                graph.invoke(question, config, durability="sync")
                raise SystemExit("the crash window was never reached")
            report(graph.invoke(None, config, durability="sync"))
        return

    async def run() -> None:
        async with graphkeep.aconnect(url, key_prefix=prefix) as saver:
            graph = agent(saver, Path(counter))
            if phase == "crash":
                crash_on_tool_output(saver)
                await graph.ainvoke(question, config, durability="sync")
                raise SystemExit("the crash window was never reached")
            report(await graph.ainvoke(None, config, durability="sync"))

    asyncio.run(run())


if __name__ == "__main__":
    main(*sys.argv[1:7])
