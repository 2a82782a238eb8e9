"""The AG-UI events of a LangGraph run, translated by graphkeep from the graph's own streams —
the events ``ag-ui-langgraph``'s :class:`~ag_ui_langgraph.LangGraphAgent` makes from
``astream_events``, in the same order with the same fields, for half the work per event.

``astream_events`` builds a LangChain event for every start, stream and end of every runnable
(a task and a gather per callback in LangChain's async callback manager), and the agent then
translates each into a pydantic model. Here the graph runs with ``graph.astream(...,
stream_mode=["tasks", "custom"])`` — a node's start and its result — and a small inline
callback handler (:class:`_Marks`, a streaming handler, so models stream to it as to
LangGraph's messages stream) writes each model token, model end, tool end and custom event
into the node's custom stream where it happens: one ordered stream, read once, each AG-UI
event made as the dict it is sent as.

What it translates, as ``ag-ui-langgraph`` does with ``AGUIRuns``' options (no raw events,
the interrupt outcome, no legacy ``on_interrupt`` event, no subagent events): text messages
streamed (one message id per node, as the agent pins it), tool calls streamed in pieces (one
after another too) or only run by a tool (``TOOL_CALL_*`` from the tool's end), tool results,
steps (one per node), the state snapshot at the end of each node that returns a dict (not a
``Command`` or None), ``manually_emit_message`` /
``_tool_call`` / ``_state`` and other custom events, the ``emit-messages`` /
``emit-tool-calls`` metadata, reasoning content (through the agent's own
``handle_reasoning_event``), token usage, ``RUN_ERROR``. The run's start (the input merged
with the checkpoint, the resume command, the regenerate of an edited message) and its end
(the closing snapshots, the interrupt outcome, ``RUN_FINISHED``) are the agent's own methods,
called once per run (``ag-ui-langgraph`` is pinned in constraints.txt; the equality test,
tests/test_agui_translate.py, is what holds the two together).

:func:`supported` says before a run starts whether it is translated here; any other run — a
graph with subgraphs, ``forwardedProps`` (``node_name``, ``command``, ``stream_subgraphs``…),
subagent messages, agent options or an agent class other than ``AGUIRuns``' — runs through
``ag-ui-langgraph`` whole. What a run only shows once it runs is not translated as
``ag-ui-langgraph`` would: ``predict_state`` metadata, a graph invoked inside a node, nodes
of one step running at once — so it is chosen with ``AGUIRuns(..., translation="graphkeep")``,
not by default.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Iterator
from typing import Any
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import AIMessageChunk

from graphkeep.agui.dump import pydantic_dump

__all__ = ["supported", "translate"]

log = logging.getLogger("graphkeep.agui")

#: the agent options this module translates for (AGUIRuns' defaults)
_OPTIONS = {
    "emit_raw_events": False,
    "emit_interrupt_outcome": True,
    "enable_legacy_on_interrupt_event": False,
    "emit_subagent_events": False,
}
#: the agent's methods a translated run calls (an ag-ui-langgraph without one of them: its own
#: translation runs)
_METHODS = (
    "prepare_stream",
    "get_stream_kwargs",
    "get_state_snapshot",
    "get_state_and_messages_snapshots",
    "_seed_public_ids_from_input",
    "_collect_interrupts",
    "_emit_interrupt_finish",
    "_emit_success_finish",
    "_record_usage",
    "handle_reasoning_event",
    "_get_reasoning_process",
    "_set_reasoning_process",
)
#: the key a mark of :class:`_Marks` is written under in the custom stream
_MARK = "graphkeep.agui.mark"


def supported(agent: Any, request: Any) -> bool:
    """Whether ``request`` (a ``RunAgentInput``) on ``agent`` is translated here (decided
    before the run starts; the other runs go through ``ag-ui-langgraph``)."""
    from langgraph.graph.state import CompiledStateGraph

    from graphkeep.agui.agent import Agent

    if type(agent) is not Agent or not isinstance(agent.graph, CompiledStateGraph):
        return False
    if any(getattr(agent, name, None) != value for name, value in _OPTIONS.items()):
        return False
    if not all(callable(getattr(agent, name, None)) for name in _METHODS):
        return False
    if getattr(agent, "subagent_visibility", "inline") != "inline" or agent.subgraphs:
        return False
    if request.forwarded_props:
        return False
    return not any(getattr(m, "subagent_run_id", None) is not None for m in request.messages or ())


class _Marks(BaseCallbackHandler):
    """Writes a model's end, a tool's start and end, and a custom event into the run's custom
    stream, inline (in the node's context, so in order with its streamed tokens)."""

    run_inline = True
    raise_error = True
    ignore_chain = False  # a node's own run: whether it returned a dict
    ignore_retriever = True
    ignore_agent = False  # tools' starts and ends
    ignore_retry = True
    ignore_chat_model = False

    def __init__(self) -> None:
        #: tool run id -> the input it was called with
        self.inputs: dict[UUID, Any] = {}
        #: a node's run id -> its task id; task id -> whether the node returned a dict (the
        #: agent snapshots the state at a node's end only then: not for a Command, None)
        self.nodes: dict[UUID, str] = {}
        self.returned_dict: dict[str, bool] = {}
        #: chat model run id -> (its metadata, its node's stream writer)
        self.models: dict[UUID, tuple[dict[str, Any], Any]] = {}

    # a streaming handler (LangChain's protocol, checked by these two methods): models
    # attached to it stream their tokens, as with LangGraph's own messages stream
    def tap_output_aiter(self, run_id: UUID, output: AsyncIterator[Any]) -> AsyncIterator[Any]:
        return output

    def tap_output_iter(self, run_id: UUID, output: Iterator[Any]) -> Iterator[Any]:
        return output

    @staticmethod
    def _writer() -> Any:
        """The stream writer of the node this runs in (None outside a node)."""
        from langgraph.config import get_stream_writer

        try:
            return get_stream_writer()
        except RuntimeError:
            return None

    @classmethod
    def _write(cls, kind: str, *values: Any) -> None:
        writer = cls._writer()
        if writer is not None:
            writer({_MARK: (kind, *values)})

    def on_chain_start(self, serialized: Any, inputs: Any, *, run_id: UUID, **kwargs: Any) -> None:
        metadata = kwargs.get("metadata") or {}
        node = metadata.get("langgraph_node")
        if node is not None and kwargs.get("name") == node:
            namespace = str(metadata.get("langgraph_checkpoint_ns", ""))
            self.nodes[run_id] = namespace.rpartition("|")[2].partition(":")[2]

    def on_chain_end(self, outputs: Any, *, run_id: UUID, **kwargs: Any) -> None:
        task = self.nodes.pop(run_id, None)
        if task is not None:
            self.returned_dict[task] = isinstance(outputs, dict)

    def on_chain_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        self.nodes.pop(run_id, None)

    def on_chat_model_start(
        self, serialized: Any, messages: Any, *, run_id: UUID, **kwargs: Any
    ) -> None:
        self.models[run_id] = (kwargs.get("metadata") or {}, self._writer())

    def on_llm_new_token(
        self, token: Any, *, chunk: Any = None, run_id: UUID, **kwargs: Any
    ) -> None:
        model = self.models.get(run_id)
        message = getattr(chunk, "message", None)
        if model is not None and model[1] is not None and isinstance(message, AIMessageChunk):
            model[1]({_MARK: ("token", message, model[0])})

    def on_llm_end(self, response: Any, *, run_id: UUID, **kwargs: Any) -> None:
        model = self.models.pop(run_id, None)
        if model is None or model[1] is None:
            return  # not a chat model's (the agent reads chat models' ends only)
        message = None
        if response.generations and response.generations[0]:
            message = getattr(response.generations[0][0], "message", None)
        model[1]({_MARK: ("model_end", run_id, message, model[0])})

    def on_llm_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        self.models.pop(run_id, None)

    def on_tool_start(
        self,
        serialized: Any,
        input_str: str,
        *,
        run_id: UUID,
        inputs: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        self.inputs[run_id] = inputs or {}

    def on_tool_end(self, output: Any, *, run_id: UUID, **kwargs: Any) -> None:
        from langchain_core.messages import ToolMessage
        from langgraph.types import Command

        given = self.inputs.pop(run_id, {})
        if isinstance(output, ToolMessage):
            results = [output]
        elif isinstance(output, Command):
            from ag_ui_langgraph.agent import _command_update_tool_messages

            update = output.update
            found = update.get("messages", []) or [] if isinstance(update, dict) else []
            results = [
                m for m in _command_update_tool_messages(found) if isinstance(m, ToolMessage)
            ]
        else:
            log.warning("a tool's output is not a ToolMessage (%s): no result", type(output))
            return
        # the messages as the tool made them (the graph may give them ids afterwards)
        ends = [(m.tool_call_id, m.id, m.name, m.content) for m in results]
        self._write("tool_end", ends, given, kwargs.get("name"))

    def on_tool_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        self.inputs.pop(run_id, None)

    def on_custom_event(self, name: str, data: Any, *, run_id: UUID, **kwargs: Any) -> None:
        self._write("custom", name, data)


def _ended(kind: str, **fields: Any) -> dict[str, Any]:
    return {"type": kind, **fields}


class _Run:
    """One run's translation: what is open (a text message or a tool call), the node it is
    in, the state its node-end snapshots are made from."""

    def __init__(self, agent: Any, state: dict[str, Any]) -> None:
        self.agent = agent
        #: the text message or the tool call streaming now (one at most)
        self.text_id: str | None = None
        self.call_id: str | None = None
        self.node: str | None = None
        #: whether reasoning content is streaming (the next chunk without any ends it)
        self.thinking = False
        #: the text message id pinned for the node (text, tool, text: one message)
        self.pinned: str | None = None
        self.streamed: set[str] = set()
        #: tool call id -> the message that made it
        self.owners: dict[str, str] = {}
        self.state = state
        #: a manually emitted state not yet snapshotted as the run's state (the agent does
        #: at the next event with no message open)
        self.manual: Any = None

    # -- steps -----------------------------------------------------------------------

    def step(self, node: str | None) -> list[dict[str, Any]]:
        if node == "__end__":
            node = None
        if node == self.node:
            return []
        out = []
        if self.node:
            out.append({"type": "STEP_FINISHED", "stepName": self.node})
        if node:
            out.append({"type": "STEP_STARTED", "stepName": node})
        self.node = node
        self.pinned = None
        self.agent.active_run["node_name"] = node
        return out

    # -- a model's tokens ------------------------------------------------------------

    def chunk(self, chunk: Any, meta: dict[str, Any]) -> list[dict[str, Any]]:
        """A model's streamed chunk (the agent's rules for what it opens, continues or
        closes, in the same order)."""
        out: list[dict[str, Any]] = []
        usage = chunk.usage_metadata
        if usage:
            self.agent._record_usage({"run_id": chunk.id, "metadata": meta}, usage, streamed=True)
        if (chunk.response_metadata or {}).get("finish_reason"):
            return out
        node = meta.get("langgraph_node")
        if node and node != self.node:
            out += self.step(node)
        texts = meta.get("emit-messages", True)
        calls = meta.get("emit-tool-calls", True)
        pieces = chunk.tool_call_chunks
        call: dict[str, Any] | None = pieces[0] if pieces else None
        name = call.get("name") if call is not None else None
        content = chunk.content
        text = content if type(content) is str else _text_of(content)
        chunk_id = chunk.id
        text_id, call_id = self.text_id, self.call_id
        if call_id is not None and call is not None and name and call.get("id"):
            if call["id"] != call_id:  # the next of several calls streamed one by one
                out.append({"type": "TOOL_CALL_END", "toolCallId": call_id})
                call_id = self.call_id = None
        if self.thinking or type(content) is not str or chunk.additional_kwargs:
            thought, said = self.reasoning(chunk)
            out += thought
            if said:
                return out
        start = text_id is None and call_id is None and bool(name)
        end_text = text_id is not None and not (call is None and text is not None)
        if name and text is not None:
            message = text_id
            if message is None and text != "":
                message = chunk_id
                if texts:
                    out.append(_start(message))
            if message and texts:
                if text != "":
                    out.append(_content(message, text))
                out.append({"type": "TEXT_MESSAGE_END", "messageId": message})
            if message:
                text_id = call_id = self.text_id = self.call_id = None
            start, end_text = True, False
        elif end_text and name:
            out.append({"type": "TEXT_MESSAGE_END", "messageId": text_id})
            text_id = self.text_id = None
            start, end_text = True, False
        if call_id is not None and call is None:
            out.append({"type": "TOOL_CALL_END", "toolCallId": call_id})
            self.call_id = None
        elif end_text:
            out.append({"type": "TEXT_MESSAGE_END", "messageId": text_id})
            self.text_id = None
        elif start:
            assert call is not None
            self.streamed.add(call["id"])
            if calls:
                started = {
                    "type": "TOOL_CALL_START",
                    "toolCallId": call["id"],
                    "toolCallName": name,
                }
                if chunk_id is not None:
                    started["parentMessageId"] = chunk_id
                out.append(started)
                self.text_id, self.call_id = None, call["id"]
        elif call_id is not None and call is not None and call.get("args") and calls:
            out.append({"type": "TOOL_CALL_ARGS", "toolCallId": call_id, "delta": call["args"]})
        elif call is None and text and texts:
            if text_id is None:
                if self.pinned is None:
                    self.pinned = chunk_id
                text_id = self.text_id = self.pinned
                out.append(_start(text_id))
            out.append(_content(text_id, text))
        return out

    def reasoning(self, chunk: Any) -> tuple[list[dict[str, Any]], bool]:
        """A chunk's reasoning content as the agent streams it (``REASONING_*``, through its own
        ``handle_reasoning_event``), or the end of the reasoning streamed before a chunk
        without any; and whether that is all the chunk says."""
        from ag_ui_langgraph.utils import (
            resolve_encrypted_reasoning_content,
            resolve_reasoning_content,
        )

        agent = self.agent
        thought = resolve_reasoning_content(chunk)
        if thought:
            self.thinking = True
            return [pydantic_dump(e) for e in agent.handle_reasoning_event(thought) if e], True
        process = agent._get_reasoning_process()
        if process is None:
            self.thinking = False
            return [], False
        message = process["message_id"]
        encrypted = resolve_encrypted_reasoning_content(chunk)
        if encrypted:
            return [_encrypted(message, encrypted)], True
        out = [_encrypted(message, process["signature"])] if process.get("signature") else []
        out.append({"type": "REASONING_MESSAGE_END", "messageId": message})
        out.append({"type": "REASONING_END", "messageId": message})
        agent._set_reasoning_process(None)
        self.thinking = False
        return out, False

    def model_end(self, run_id: UUID, message: Any, meta: Any) -> list[dict[str, Any]]:
        if message is not None:
            event = {"run_id": getattr(message, "id", None), "metadata": meta or {}}
            usage = getattr(message, "usage_metadata", None)
            self.agent._record_usage(event, usage, streamed=False)
            for call in getattr(message, "tool_calls", None) or ():
                if call.get("id") and message.id:
                    self.owners[call["id"]] = str(message.id)  # a later call wins
        text_id, call_id = self.text_id, self.call_id
        self.text_id = self.call_id = None
        if call_id is not None:
            return [{"type": "TOOL_CALL_END", "toolCallId": call_id}]
        if text_id is not None:
            return [{"type": "TEXT_MESSAGE_END", "messageId": text_id}]
        return []

    # -- tools, custom events, node ends ---------------------------------------------

    def tool_end(self, ends: list[Any], given: Any, name: str | None) -> list[dict[str, Any]]:
        from ag_ui_langgraph.agent import dump_json_safe
        from ag_ui_langgraph.utils import normalize_tool_content

        out: list[dict[str, Any]] = []
        for call_id, message_id, tool_name, content in ends:
            if call_id not in self.streamed:
                started = {
                    "type": "TOOL_CALL_START",
                    "toolCallId": call_id,
                    "toolCallName": tool_name or name or "",
                }
                owner = self.owners.get(call_id)
                if owner is not None:
                    started["parentMessageId"] = owner
                out.append(started)
                delta = dump_json_safe(given)
                out.append({"type": "TOOL_CALL_ARGS", "toolCallId": call_id, "delta": delta})
                out.append({"type": "TOOL_CALL_END", "toolCallId": call_id})
            self.streamed.discard(call_id)
            out.append(
                {
                    "type": "TOOL_CALL_RESULT",
                    "messageId": str(message_id or call_id),
                    "toolCallId": call_id,
                    "content": normalize_tool_content(content),
                    "role": "tool",
                }
            )
        return out

    def custom(self, name: str, data: Any) -> list[dict[str, Any]]:
        from ag_ui.core import CustomEvent, EventType

        out: list[dict[str, Any]] = []
        if name == "manually_emit_message":
            message = data["message_id"]
            out += [_start(message), _content(message, data["message"])]
            out.append({"type": "TEXT_MESSAGE_END", "messageId": message})
        elif name == "manually_emit_tool_call":
            args = data["args"]
            out.append(
                {
                    "type": "TOOL_CALL_START",
                    "toolCallId": data["id"],
                    "toolCallName": data["name"],
                    "parentMessageId": data["id"],
                }
            )
            delta = args if isinstance(args, str) else json.dumps(args)
            out.append({"type": "TOOL_CALL_ARGS", "toolCallId": data["id"], "delta": delta})
            out.append({"type": "TOOL_CALL_END", "toolCallId": data["id"]})
        elif name == "manually_emit_state":
            self.agent.active_run["manually_emitted_state"] = data
            self.manual = data
            out.append(self.snapshot(data))
        out.append(pydantic_dump(CustomEvent(type=EventType.CUSTOM, name=name, value=data)))
        return out

    def snapshot(self, state: Any) -> dict[str, Any]:
        from ag_ui.core import EventType, StateSnapshotEvent

        snapshot = self.agent.get_state_snapshot(state)
        return pydantic_dump(StateSnapshotEvent(type=EventType.STATE_SNAPSHOT, snapshot=snapshot))

    def settle(self) -> list[dict[str, Any]]:
        """Before the next event: the manually emitted state as the run's, once nothing is
        open (the agent's state-diff snapshot)."""
        manual, self.manual = self.manual, None
        if self.text_id is not None or self.call_id is not None:
            self.manual = manual
            return []
        self.state.update(manual)
        return [self.snapshot(manual)]

    def node_end(self, node: str, result: Any) -> list[dict[str, Any]]:
        """The state snapshot at a node's end (its update on the run's state so far)."""
        if not isinstance(result, dict):
            return []
        self.state.update(result)
        if node != self.node:
            return self.settle() if self.manual is not None else []
        self.manual = None
        manual = self.agent.active_run.get("manually_emitted_state")
        if manual is not None:
            self.state.update(manual)
            return [self.snapshot(manual)]
        return [self.snapshot(self.state)]


def _encrypted(message: str, value: str) -> dict[str, Any]:
    from ag_ui.core import EventType, ReasoningEncryptedValueEvent

    event = ReasoningEncryptedValueEvent(
        type=EventType.REASONING_ENCRYPTED_VALUE,
        subtype="message",
        entity_id=message,
        encrypted_value=value,
    )
    return pydantic_dump(event)


def _start(message: str) -> dict[str, Any]:
    return {"type": "TEXT_MESSAGE_START", "messageId": message, "role": "assistant"}


def _content(message: str, delta: str) -> dict[str, Any]:
    return {"type": "TEXT_MESSAGE_CONTENT", "messageId": message, "delta": delta}


def _text_of(content: Any) -> str | None:
    from ag_ui_langgraph.utils import resolve_message_content

    text = resolve_message_content(content)
    return text if isinstance(text, str) or text is None else str(text)


def _initial_run(request: Any, agent: Any) -> dict[str, Any]:
    """The agent's per-run bookkeeping, as its own run starts it (the parts its start and end
    methods read)."""
    return {
        "id": request.run_id,
        "thread_id": request.thread_id,
        "mode": "start",
        "reasoning_processes": {},
        "pending_reasoning_ids": {},
        "current_text_message_ids": {},
        "current_text_message_nodes": {},
        "node_name": None,
        "has_function_streaming": False,
        "streamed_tool_call_ids": set(),
        "tool_call_owners": {},
        "model_made_tool_call": False,
        "state_reliable": True,
        "active_subagents": {},
        "current_subagent_run_id": None,
        "subagent_task_meta": {},
        "subagent_task_runs": {},
        "subagent_parents": {},
        "pending_task_calls": [],
        "seen_task_call_ids": set(),
        "task_tool_call_ids_by_ns": {},
        "subagent_segments": set(),
        "subagent_messages": {},
        "emit_subagent_events": agent.emit_subagent_events,
        "subagent_tool_call_owner": {},
        "inbound_subagent_messages": [],
        "usage": [],
        "usage_run_ids": set(),
        "manually_emitted_state": None,
    }


async def translate(agent: Any, request: Any) -> AsyncIterator[dict[str, Any]]:
    """The run ``request`` of ``agent`` (a clone per run; :func:`supported` said yes) as the
    AG-UI events ``agent.run(request)`` yields, as dicts; an error ends it with
    ``RUN_ERROR`` as the agent's does."""
    started = False
    try:
        async for event in _events(agent, request):
            started = started or event.get("type") == "RUN_STARTED"
            yield event
    except Exception as exc:
        log.exception("LangGraph run failed")
        if not started:
            yield {"type": "RUN_STARTED", "threadId": request.thread_id, "runId": request.run_id}
        yield {"type": "RUN_ERROR", "message": str(exc) or type(exc).__name__}
    finally:
        agent.active_run = None


async def _events(agent: Any, request: Any) -> AsyncIterator[dict[str, Any]]:
    from langchain_core.runnables import ensure_config

    graph = agent.graph
    update: dict[str, Any] = {"forwarded_props": {}}
    if request.messages:
        update["messages"] = list(request.messages)
    agent._inbound_subagent_messages = []
    request = request.model_copy(update=update)
    agent.active_run = _initial_run(request, agent)
    request = agent._seed_public_ids_from_input(request)
    config = ensure_config(agent.config.copy() if agent.config else {})
    config["configurable"] = {**config.get("configurable", {}), "thread_id": request.thread_id}
    checkpoint = await graph.aget_state(config)

    asked: dict[str, Any] = {}
    given = agent.get_stream_kwargs

    def kwargs_of(**kwargs: Any) -> dict[str, Any]:  # what astream_events would be given
        asked.update(given(**kwargs))
        return asked

    agent.get_stream_kwargs = kwargs_of
    prepared = await agent.prepare_stream(input=request, agent_state=checkpoint, config=config)
    stream = prepared.get("stream")
    close = getattr(stream, "aclose", None)
    if close is not None:
        await close()  # never started: it ran nothing
    for event in prepared.get("events_to_dispatch") or ():
        yield pydantic_dump(event)
    if prepared.get("events_to_dispatch"):
        return
    config = prepared["config"]
    thread_id, run_id = request.thread_id, request.run_id
    yield {"type": "RUN_STARTED", "threadId": thread_id, "runId": run_id}
    run = _Run(agent, prepared["state"])
    marks = _Marks()
    run_config = dict(asked.get("config") or config)
    callbacks = run_config.get("callbacks")
    if callbacks is None or isinstance(callbacks, list):
        run_config["callbacks"] = [*(callbacks or ()), marks]
    else:  # a callback manager: a copy with the marks added
        manager = callbacks.copy()
        manager.add_handler(marks, inherit=True)
        run_config["callbacks"] = manager
    options: dict[str, Any] = {"stream_mode": ["tasks", "custom"]}
    if "context" in asked:
        options["context"] = asked["context"]
    async for mode, item in graph.astream(asked.get("input"), run_config, **options):
        if run.manual is not None and not (mode == "tasks" and "result" in item):
            for event in run.settle():
                yield event
        if mode == "tasks":
            if "result" in item:
                failed = item.get("error") is not None or item.get("interrupts")
                returned_dict = marks.returned_dict.pop(item["id"], True)
                if failed or not returned_dict:
                    events = []
                else:
                    events = run.node_end(item["name"], item["result"])
            else:
                events = run.step(item["name"])
        elif isinstance(item, dict) and _MARK in item:
            kind, *values = item[_MARK]
            if kind == "token":
                events = run.chunk(*values)
            elif kind == "model_end":
                events = run.model_end(*values)
            elif kind == "tool_end":
                events = run.tool_end(*values)
            else:
                events = run.custom(*values)
        else:
            continue
        for event in events:
            yield event

    state = await graph.aget_state(config)
    interrupts = agent._collect_interrupts(state.tasks)
    writes = (state.metadata or {}).get("writes", {}) or {}
    node = agent.active_run["node_name"] if interrupts else next(iter(writes), None)
    if not (state.next or ()) and not interrupts:
        node = "__end__"
    if agent.active_run.get("node_name") != node:
        for event in run.step(node):
            yield event
    async for snapshot in agent.get_state_and_messages_snapshots(config):
        yield pydantic_dump(snapshot)
    for event in run.step(None):
        yield event
    if interrupts:
        for finish in agent._emit_interrupt_finish(
            thread_id=thread_id, run_id=run_id, lg_interrupts=interrupts
        ):
            yield pydantic_dump(finish)
    else:
        yield pydantic_dump(agent._emit_success_finish(thread_id=thread_id, run_id=run_id))
