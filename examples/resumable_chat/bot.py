"""The support bot: a LangGraph graph whose answers stream token by token, deterministically.

Two nodes on ``MessagesState`` plus an approval flag::

    START -> approval -> answer -> END

- ``approval`` does nothing for ordinary questions; when the customer's last message asks for
  a refund it calls ``interrupt({"question": ...})`` and waits for ``Command(resume=True |
  False)`` from a human agent;
- ``answer`` asks a fake chat model for the reply, :func:`answer_for` of the message (and of
  the approval), which it streams one chunk per whitespace-separated token (the spaces are
  chunks too, as :class:`GenericFakeChatModel` splits them) with ``token_delay`` seconds
  between chunks, so a reply of ~60 words takes a few seconds: long enough to reload the page
  or drop the connection in the middle of it.

No network and no API key: the same input always gives the same reply, which is what lets
the browser tests compare the page with the exact expected text.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
from collections.abc import AsyncIterator
from typing import Any

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.outputs import ChatGenerationChunk
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.types import interrupt

__all__ = ["REFUND", "SlowFakeChatModel", "answer_for", "build_graph", "refund_question"]

#: a customer message matching this asks for a refund, which needs a human's approval
REFUND = re.compile(r"\brefund", re.IGNORECASE)

#: (words that name it, topic) in the order they are tried; no match: "your account"
_TOPICS = (
    (re.compile(r"\b(bill|invoice|charge|paid|payment)", re.IGNORECASE), "billing"),
    (re.compile(r"\b(parcel|package|ship|deliver|arriv|order)", re.IGNORECASE), "your order"),
    (re.compile(r"\b(password|log ?in|sign ?in)", re.IGNORECASE), "signing in"),
    (re.compile(r"\b(app|phone|mobile)", re.IGNORECASE), "the mobile app"),
)


class ChatState(MessagesState):
    #: None until a human decided on a refund: True approved, False declined
    approved: bool | None


class SlowFakeChatModel(GenericFakeChatModel):
    """:class:`GenericFakeChatModel` whose async stream waits ``token_delay`` s per chunk."""

    token_delay: float = 0.025

    async def _astream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[ChatGenerationChunk]:
        for chunk in self._stream(messages, stop=stop, **kwargs):
            await asyncio.sleep(self.token_delay)
            if run_manager is not None:
                await run_manager.on_llm_new_token(chunk.text, chunk=chunk)
            yield chunk


def _ticket(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:6].upper()


def refund_question(message: str) -> str:
    """What the bot asks the human agent before refunding."""
    return f"Approve a refund for ticket {_ticket(message)}? ({message[:80]})"


def answer_for(message: str, approved: bool | None = None) -> str:
    """The bot's exact reply to ``message`` (``approved``: the agent's refund decision)."""
    ticket = _ticket(message)
    if REFUND.search(message):
        if approved:
            return (
                f"Good news: your refund for ticket {ticket} has been approved by a member of"
                " our support team. The money goes back to the card you paid with, and most"
                " banks show it within five to seven working days. You will also get an email"
                " confirming the amount and the date. Thank you for your patience."
            )
        return (
            f"I am sorry, but the refund for ticket {ticket} was not approved this time. A"
            " member of our support team reviewed the order and will email you the reasons"
            " within one working day, together with the options you still have, such as an"
            " exchange or store credit."
        )
    topic = next((name for words, name in _TOPICS if words.search(message)), "your account")
    return (
        f"Thanks for reaching out about {topic}. I have opened ticket {ticket} for you."
        " Here is what usually helps: first, sign out and back in so that your session is"
        " fresh; second, look at the status page for any ongoing incident. If neither"
        " solves it, reply here with what you see, and a member of our team will pick up"
        " the ticket within one working day."
    )


def _last_question(state: ChatState) -> str:
    for message in reversed(state["messages"]):
        if isinstance(message, HumanMessage):
            return message.text
    return ""


def build_graph(checkpointer: Any, *, token_delay: float = 0.025) -> Any:
    """The compiled support bot, checkpointed with ``checkpointer``."""

    def approval(state: ChatState) -> dict[str, Any]:
        question = _last_question(state)
        if not REFUND.search(question):
            return {"approved": None}
        decision = interrupt({"question": refund_question(question)})
        return {"approved": bool(decision)}

    async def answer(state: ChatState) -> dict[str, Any]:
        reply = answer_for(_last_question(state), state.get("approved"))
        model = SlowFakeChatModel(
            messages=iter([AIMessage(content=reply)]), token_delay=token_delay
        )
        return {"messages": [await model.ainvoke(state["messages"])]}

    builder = StateGraph(ChatState)
    builder.add_node("approval", approval)
    builder.add_node("answer", answer)
    builder.add_edge(START, "approval")
    builder.add_edge("approval", "answer")
    builder.add_edge("answer", END)
    return builder.compile(checkpointer=checkpointer)
