"""The demo's LangGraph apps, deterministic (no LLM): a support-ticket graph that triages,
answers and drafts a refund behind a human approval, and a memory graph over a store."""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping
from typing import Annotated, Any, Literal, TypedDict

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.config import get_config, get_store
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import interrupt

from graphkeep.embeddings import hashing_embeddings

REFUND_AMOUNT = "249.00"
#: the store's semantic index: ticket notes embedded by a local, deterministic function
MEMORY_INDEX = {"dims": 64, "embed": hashing_embeddings(64), "fields": ["text"]}


def count_runs(left: Mapping[str, int] | None, right: Mapping[str, int] | None) -> dict[str, int]:
    """Reducer: node name -> how many times its update was committed."""
    merged = dict(left or {})
    for node, n in (right or {}).items():
        merged[node] = merged.get(node, 0) + n
    return merged


class Ticket(TypedDict, total=False):
    messages: Annotated[list[AnyMessage], add_messages]
    customer: str
    order: str
    category: str
    priority: str
    refund: dict[str, str]
    runs: Annotated[dict[str, int], count_runs]


def _last_human(state: Mapping[str, Any]) -> str:
    for message in reversed(state.get("messages", [])):
        if isinstance(message, HumanMessage):
            return str(message.content)
    return ""


def triage(state: Ticket) -> Ticket:
    text = _last_human(state)
    lowered = text.lower()
    update: Ticket = {"runs": {"triage": 1}}
    if name := re.search(r"\bI'?m ([A-Z][a-z]+)", text):
        update["customer"] = name.group(1)
    if order := re.search(r"#(\d+)", text):
        update["order"] = f"#{order.group(1)}"
    if "refund" in lowered:
        update["category"], update["priority"] = "refund", "high"
    elif any(w in lowered for w in ("damaged", "cracked", "broken")):
        update["category"], update["priority"] = "damage", "high"
    elif any(w in lowered for w in ("ship", "deliver", "when")):
        update["category"], update["priority"] = "shipping", "normal"
    else:
        update["category"], update["priority"] = "general", "normal"
    return update


def respond(state: Ticket) -> Ticket:
    name = state.get("customer", "there")
    order = state.get("order", "(no order yet)")
    priority = state.get("priority", "normal")
    category = state.get("category", "general")
    if category == "damage":
        text = f"Sorry to hear that, {name}. Damage logged on order {order}, priority {priority}."
    elif category == "shipping":
        text = f"{name}, the replacement for order {order} ships within 2 business days."
    else:
        text = f"Thanks {name}, noted on order {order}."
    return {"messages": [AIMessage(text)], "runs": {"respond": 1}}


def draft_refund(state: Ticket) -> Ticket:
    order = state.get("order", "?")
    return {
        "refund": {"order": order, "amount": REFUND_AMOUNT, "status": "awaiting approval"},
        "messages": [
            AIMessage(
                f"I drafted a refund of ${REFUND_AMOUNT} for order {order};"
                " a supervisor has to approve it."
            )
        ],
        "runs": {"draft_refund": 1},
    }


def approval(state: Ticket) -> Ticket:
    refund = dict(state.get("refund", {}))
    decision = interrupt(
        {"question": f"Approve refund of ${refund.get('amount')} for order {refund.get('order')}?"}
    )
    approved = bool(decision.get("approved")) if isinstance(decision, dict) else bool(decision)
    by = decision.get("by", "a supervisor") if isinstance(decision, dict) else "a supervisor"
    refund["status"] = "approved" if approved else "rejected"
    text = (
        f"Good news: {by} approved your refund of ${refund.get('amount')}; expect it in 3-5 days."
        if approved
        else f"Sorry, {by} did not approve the refund; a human agent will call you."
    )
    return {"refund": refund, "messages": [AIMessage(text)], "runs": {"approval": 1}}


def route(state: Ticket) -> Literal["draft_refund", "respond"]:
    return "draft_refund" if state.get("category") == "refund" else "respond"


def build_app(checkpointer: BaseCheckpointSaver[Any]) -> CompiledStateGraph[Any, Any, Any, Any]:
    builder = StateGraph(Ticket)
    builder.add_node("triage", triage)
    builder.add_node("respond", respond)
    builder.add_node("draft_refund", draft_refund)
    builder.add_node("approval", approval)
    builder.add_edge(START, "triage")
    builder.add_conditional_edges("triage", route)
    builder.add_edge("respond", END)
    builder.add_edge("draft_refund", "approval")
    builder.add_edge("approval", END)
    return builder.compile(checkpointer=checkpointer)


class Conversation(TypedDict, total=False):
    messages: Annotated[list[AnyMessage], add_messages]


def customer_namespace() -> tuple[str, ...]:
    """The signed-in customer's memory, as an app takes it from its auth layer (config)."""
    return ("customers", str(get_config()["configurable"]["customer_id"]))


def recall(state: Conversation) -> Conversation:
    """Answer with what the store remembers: the contact preference and related tickets."""
    store, namespace = get_store(), customer_namespace()
    text = _last_human(state)
    preference = store.get((*namespace, "prefs"), "contact")
    related = store.search((*namespace, "tickets"), query=text, limit=1)
    parts = []
    if preference is not None:
        parts.append(f"I'll keep you posted by {preference.value['channel']}")
    if related:
        parts.append(f"this looks related to your earlier ticket: {related[0].value['text']!r}")
    return {"messages": [AIMessage("; ".join(parts) or "Thanks, noted.")]}


def learn(state: Conversation) -> Conversation:
    """Remember a stated contact preference and keep the message as a ticket note."""
    store, namespace = get_store(), customer_namespace()
    text = _last_human(state)
    if channel := re.search(r"contact me by (\w+)", text):
        store.put((*namespace, "prefs"), "contact", {"channel": channel.group(1)})
    thread_id = str(get_config()["configurable"]["thread_id"])
    store.put((*namespace, "tickets"), uuid.uuid4().hex, {"text": text, "thread": thread_id})
    return {}


def build_memory_app(checkpointer: BaseCheckpointSaver[Any], store: Any) -> Any:
    builder = StateGraph(Conversation)
    builder.add_node("recall", recall)
    builder.add_node("learn", learn)
    builder.add_edge(START, "recall")
    builder.add_edge("recall", "learn")
    builder.add_edge("learn", END)
    return builder.compile(checkpointer=checkpointer, store=store)
