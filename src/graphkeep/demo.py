"""``python -m graphkeep.demo``: a support-ticket assistant that survives restarts.

A deterministic LangGraph app (no LLM, no network besides the store) run on each
available graphkeep backend. Per backend it prints a short transcript of

1. multi-turn memory: three turns, each through a *new* saver instance, and the
   state read back by yet another one;
2. a human approval: the third turn stops at ``interrupt()``; a child process
   (``python -m graphkeep.demo --resume-child``) opens its own saver and resumes
   the thread with ``Command(resume=...)``;
3. time travel: ``get_state_history`` newest first, then a replay from an older
   checkpoint that re-runs only the nodes after it;
4. a fork: ``update_state`` on an old checkpoint, continued, while the original
   history stays as it was;
5. long-term memory across threads: a second graph with a store
   (``graphkeep.connect_store``) learns a preference and keeps ticket notes in one thread;
   a brand-new thread (new saver, new store) uses the preference and finds the related
   earlier ticket by semantic search (a deterministic local embedding, no model);

and ends with the thread id, the (masked) URL and the key prefix so the data can
be inspected; nothing is cleaned up. Every fact printed is also checked; the exit
status is non-zero when any check fails.

Backends: ``--backend redis|mongodb|dynamodb|all``. By default every backend whose
URL scheme is registered in :data:`graphkeep.connect.BACKENDS` and whose server
answers; ``all`` runs every registered backend and fails when one is unreachable.
URLs come from ``REDIS_URL``, ``MONGODB_URI`` and ``DYNAMODB_ENDPOINT_URL``
(defaults: the local services of ``./dev services up``).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import re
import socket
import subprocess
import sys
import time
import traceback
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Annotated, Any, Literal, TypedDict
from urllib.parse import parse_qs, urlsplit

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.config import get_config, get_store
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Command, StateSnapshot, interrupt

import graphkeep
from graphkeep.cli import show_thread
from graphkeep.embeddings import hashing_embeddings
from graphkeep.errors import mask_url

KEY_PREFIX = "graphkeep-demo"
DYNAMODB_TABLE = "graphkeep_demo"
URL_ENV = "GRAPHKEEP_DEMO_URL"  # how the parent hands the URL to the child (not argv)
REFUND_AMOUNT = "249.00"
#: the store's semantic index: ticket notes embedded by a local, deterministic function
MEMORY_INDEX = {"dims": 64, "embed": hashing_embeddings(64), "fields": ["text"]}


# --------------------------------------------------------------------------- backends


def redis_url() -> str:
    return os.environ.get("REDIS_URL", "redis://127.0.0.1:16379/0")


def mongodb_url() -> str:
    return os.environ.get("MONGODB_URI", "mongodb://127.0.0.1:27117")


def local_aws_credentials(url: str) -> None:
    """Dummy credentials for a loopback DynamoDB endpoint (moto) when none are configured."""
    endpoints = parse_qs(urlsplit(url).query).get("endpoint_url") or [""]
    host = urlsplit(endpoints[0]).hostname or ""
    configured = os.environ.get("AWS_ACCESS_KEY_ID") or os.environ.get("AWS_PROFILE")
    if host in ("127.0.0.1", "localhost", "::1") and not configured:
        os.environ["AWS_ACCESS_KEY_ID"] = "test"
        os.environ["AWS_SECRET_ACCESS_KEY"] = "test"


def dynamodb_url() -> str:
    endpoint = os.environ.get("DYNAMODB_ENDPOINT_URL", "http://127.0.0.1:15000")
    region = os.environ.get("AWS_DEFAULT_REGION", "us-east-1")
    return f"dynamodb://{DYNAMODB_TABLE}?region={region}&endpoint_url={endpoint}"


@dataclass(frozen=True)
class Backend:
    name: str
    url: Callable[[], str]

    @property
    def registered(self) -> bool:
        scheme = self.url().split("://", 1)[0].lower()
        backends: Mapping[str, Any] = importlib.import_module("graphkeep.connect").BACKENDS
        return scheme in backends

    def inspect_hint(self, url: str, thread_id: str) -> str | None:
        if self.name != "redis":
            return None
        parts = urlsplit(url)
        pattern = f"'{KEY_PREFIX}:*{{{thread_id}}}*'"
        if parts.scheme.endswith("+cluster"):
            seed = f"{parts.hostname or '127.0.0.1'}:{parts.port or 6379}"
            return f"redis-cli --cluster call {seed} KEYS {pattern}"
        if parts.scheme == "unix":
            return f"redis-cli -s {parts.path} --scan --pattern {pattern}"
        db = parts.path.strip("/") or "0"
        where = f"-h {parts.hostname or '127.0.0.1'} -p {parts.port or 6379} -n {db}"
        return f"redis-cli {where} --scan --pattern {pattern}"


BACKEND_LIST: tuple[Backend, ...] = (
    Backend("redis", redis_url),
    Backend("mongodb", mongodb_url),
    Backend("dynamodb", dynamodb_url),
)
BACKEND_NAMES = tuple(b.name for b in BACKEND_LIST)


def server_answers(url: str, timeout: float = 1.0) -> bool:
    """A cheap reachability probe (TCP connect) that never waits for a driver's timeouts."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme == "unix":
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        target: Any = parts.path
    else:
        if scheme == "dynamodb":
            endpoints = parse_qs(parts.query).get("endpoint_url")
            if not endpoints:
                return True  # real AWS: nothing local to probe
            parts = urlsplit(endpoints[0])
        if scheme.endswith("+srv"):
            return True  # resolved by the driver through DNS
        host = (parts.hostname or "127.0.0.1").split(",")[0]
        default_port = {"http": 80, "https": 443, "mongodb": 27017}.get(parts.scheme, 6379)
        try:
            port = parts.port or default_port
        except ValueError:  # several mongodb hosts: probe the first one
            port = int(parts.netloc.split(",")[0].rsplit(":", 1)[-1])
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        target = (host, port)
    sock.settimeout(timeout)
    try:
        sock.connect(target)
    except OSError:
        return False
    finally:
        sock.close()
    return True


# --------------------------------------------------------------------------- the app


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


# --------------------------------------------------------------------------- transcript


class DemoFailure(Exception):
    """An expectation the demo prints did not hold."""


def say(text: str = "", indent: int = 0) -> None:
    print(" " * indent + text, flush=True)


def check(condition: bool, fact: str, indent: int = 4) -> None:
    """Print ``fact`` as verified, or stop this backend's demo."""
    if not condition:
        say(f"[FAIL] {fact}", indent)
        raise DemoFailure(fact)
    say(f"[ok] {fact}", indent)


def thread_config(thread_id: str, checkpoint_id: str | None = None) -> RunnableConfig:
    conf: dict[str, Any] = {"thread_id": thread_id}
    if checkpoint_id:
        conf["checkpoint_id"] = checkpoint_id
    return {"configurable": conf}


def checkpoint_id_of(snapshot: StateSnapshot) -> str:
    return str(snapshot.config["configurable"]["checkpoint_id"])


def short(checkpoint_id: str) -> str:
    return checkpoint_id[-8:]


def message_lines(messages: Sequence[AnyMessage]) -> list[tuple[str, str]]:
    return [(m.type, str(m.content)) for m in messages]


def fingerprint(snapshot: StateSnapshot) -> str:
    """What must not change in an existing checkpoint: values, next nodes, parent."""
    values = dict(snapshot.values)
    values["messages"] = message_lines(values.get("messages", []))
    parent = (
        snapshot.parent_config["configurable"]["checkpoint_id"] if snapshot.parent_config else None
    )
    return json.dumps([values, list(snapshot.next), parent], sort_keys=True, default=str)


def runs_of(snapshot: StateSnapshot) -> dict[str, int]:
    return dict(snapshot.values.get("runs", {}))


def runs_delta(before: Mapping[str, int], after: Mapping[str, int]) -> dict[str, int]:
    return {
        node: after.get(node, 0) - before.get(node, 0)
        for node in sorted(set(before) | set(after))
        if after.get(node, 0) != before.get(node, 0)
    }


@dataclass
class Demo:
    backend: Backend
    url: str
    thread_id: str

    @contextmanager
    def saver(self) -> Iterator[BaseCheckpointSaver[Any]]:
        """A brand-new saver instance (own client, own connections) for one step."""
        with graphkeep.connect(self.url, key_prefix=KEY_PREFIX) as saver:
            yield saver

    def config(self, checkpoint_id: str | None = None) -> RunnableConfig:
        return thread_config(self.thread_id, checkpoint_id)

    def run(self) -> None:
        self.memory()
        self.approval_in_child()
        original = self.time_travel()
        self.fork(original)
        self.memory_across_threads()
        self.hot_layer()

    # -- 1 -----------------------------------------------------------------------

    def memory(self) -> None:
        say("1. Multi-turn memory (every turn opens a new saver)")
        turns = [
            "Hi, I'm Ada. Order #1042 arrived with a cracked screen.",
            "When will the replacement arrive?",
            "Actually, I'd rather have a refund.",
        ]
        for number, text in enumerate(turns, start=1):
            with self.saver() as saver:
                app = build_app(saver)
                before = len(app.get_state(self.config()).values.get("messages", []))
                result = app.invoke({"messages": [HumanMessage(text)]}, self.config())
            say(f"turn {number}  user: {text}", 2)
            for message in result["messages"][before + 1 :]:
                say(f"        bot : {message.content}", 2)
            for pending in result.get("__interrupt__", []):
                say(f"        -> paused for approval: {pending.value['question']}", 2)
        with self.saver() as saver:
            state = build_app(saver).get_state(self.config())
        values = state.values
        say("read back through another new saver:", 2)
        check(
            len(values["messages"]) == 6, "6 messages (3 user, 3 bot) survived the saver restarts"
        )
        turn2_question, turn2_answer = (str(m.content) for m in values["messages"][2:4])
        check(
            values.get("customer") == "Ada" and values.get("order") == "#1042",
            "customer=Ada and order=#1042 are in the stored state",
        )
        check(
            "Ada" in turn2_answer
            and "#1042" in turn2_answer
            and "Ada" not in turn2_question
            and "#1042" not in turn2_question,
            "turn 2's answer names Ada and #1042, which only turn 1 mentioned",
        )
        check(
            state.next == ("approval",) and len(state.interrupts) == 1,
            "thread is paused before 'approval' with one pending interrupt",
        )

    # -- 2 -----------------------------------------------------------------------

    def approval_in_child(self) -> None:
        say()
        say("2. Human approval, resumed from another process")
        command = [
            sys.executable,
            "-m",
            "graphkeep.demo",
            "--resume-child",
            "--backend",
            self.backend.name,
            "--thread-id",
            self.thread_id,
        ]
        env = dict(os.environ, **{URL_ENV: self.url})
        say(f"spawning: python -m graphkeep.demo --resume-child --thread-id {self.thread_id}", 2)
        child = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
        for line in child.stdout.splitlines():
            say(f"| {line}", 4)
        if child.returncode != 0:
            for line in child.stderr.splitlines()[-15:]:
                say(f"! {line}", 4)
        check(child.returncode == 0, f"child process exited 0 (pid {child_pid(child.stdout)})")
        with self.saver() as saver:
            state = build_app(saver).get_state(self.config())
        runs = runs_of(state)
        say(
            f"parent reads back: next={state.next}, refund={state.values['refund']['status']},"
            f" node runs={runs}",
            2,
        )
        check(state.next == () and not state.interrupts, "thread finished, no pending interrupt")
        check(state.values["refund"]["status"] == "approved", "refund approved by the child")
        check(
            runs.get("draft_refund") == 1, "draft_refund (the node before the interrupt) ran once"
        )
        check(runs.get("approval") == 1, "approval committed exactly once")

    # -- 3 -----------------------------------------------------------------------

    def time_travel(self) -> list[StateSnapshot]:
        say()
        say("3. Time travel")
        with self.saver() as saver:
            app = build_app(saver)
            history = list(app.get_state_history(self.config()))
        say("get_state_history (newest first):", 2)
        say(f"{'step':>4}  {'next':<16} {'msgs':>4}  checkpoint", 4)
        for snap in history:
            step = snap.metadata.get("step") if snap.metadata else None
            nxt = ",".join(snap.next) or "-"
            count = len(snap.values.get("messages", []))
            say(f"{step!s:>4}  {nxt:<16} {count:>4}  ...{short(checkpoint_id_of(snap))}", 4)
        steps = [snap.metadata.get("step") if snap.metadata else None for snap in history]
        check(
            steps == sorted(steps, key=lambda s: -1 if s is None else s, reverse=True),
            f"{len(history)} checkpoints, newest first (steps {steps[0]} .. {steps[-1]})",
        )

        # The turn-2 checkpoint where triage is done and respond is next.
        target = next(
            s
            for s in reversed(history)
            if s.next == ("respond",) and len(s.values.get("messages", [])) == 3
        )
        target_step = target.metadata.get("step") if target.metadata else "?"
        say(
            f"replay from step {target_step} (next=respond, 3 messages):"
            f" invoke(None, checkpoint ...{short(checkpoint_id_of(target))})",
            2,
        )
        with self.saver() as saver:
            app = build_app(saver)
            result = app.invoke(None, self.config(checkpoint_id_of(target)))
            head = app.get_state(self.config())
        rerun = runs_delta(runs_of(target), dict(result.get("runs", {})))
        say(f"bot : {result['messages'][-1].content}", 4)
        say(f"nodes re-run by the replay: {rerun}", 4)
        check(
            rerun == {"respond": 1}, "only 'respond' (after the checkpoint) re-ran; triage did not"
        )
        check(
            len(head.values["messages"]) == 4 and head.values.get("refund") is None,
            "the replayed branch is now the head: 4 messages, no refund (turn 3 is not on it)",
        )
        return history

    # -- 4 -----------------------------------------------------------------------

    def fork(self, original: list[StateSnapshot]) -> None:
        say()
        say("4. Fork with update_state on an old checkpoint")
        base = next(
            s
            for s in reversed(original)
            if s.next == ("respond",) and len(s.values.get("messages", [])) == 1
        )
        base_step = base.metadata.get("step") if base.metadata else "?"
        with self.saver() as saver:
            app = build_app(saver)
            fork_config = app.update_state(
                self.config(checkpoint_id_of(base)), {"priority": "urgent"}, as_node="triage"
            )
            fork_result = app.invoke(None, fork_config)
            fork_id = str(fork_config["configurable"]["checkpoint_id"])
            fork_state = app.get_state(self.config(fork_id))
            after = {checkpoint_id_of(s): s for s in app.get_state_history(self.config())}
        say(
            f"update_state(step {base_step} checkpoint ...{short(checkpoint_id_of(base))},"
            f" {{'priority': 'urgent'}}, as_node='triage') -> fork ...{short(fork_id)}",
            2,
        )
        say(f"fork continued: bot : {fork_result['messages'][-1].content}", 4)
        parent = fork_state.parent_config
        check(
            parent is not None
            and parent["configurable"].get("checkpoint_id") == checkpoint_id_of(base),
            "the fork's parent is the old checkpoint",
        )
        check(
            fork_result["priority"] == "urgent"
            and len(fork_result["messages"]) == 2
            and "priority urgent" in str(fork_result["messages"][-1].content),
            "the fork has its own values: priority urgent, 2 messages",
        )
        unchanged = [
            s
            for s in original
            if checkpoint_id_of(s) in after
            and fingerprint(after[checkpoint_id_of(s)]) == fingerprint(s)
        ]
        check(
            len(unchanged) == len(original),
            f"all {len(original)} checkpoints of the original history are unchanged",
        )
        old_base = after[checkpoint_id_of(base)]
        check(
            old_base.values.get("priority") == "high", "the old checkpoint still says priority high"
        )

    # -- 5 -----------------------------------------------------------------------

    def memory_across_threads(self) -> None:
        say()
        say("5. Long-term memory across threads (store + semantic search)")
        customer = f"ada-{self.thread_id}"
        threads = [f"{self.thread_id}-chat1", f"{self.thread_id}-chat2"]
        first = [
            "Please contact me by email, not by phone.",
            "Order #1042 arrived with a cracked screen.",
            "Also, the charger cable is missing from the box.",
        ]
        second = "The replacement screen is cracked too."
        replies = []
        for thread, texts in ((threads[0], first), (threads[1], [second])):
            # every conversation opens its own saver and store, as a new worker would
            with (
                graphkeep.connect(self.url, key_prefix=KEY_PREFIX) as saver,
                graphkeep.connect_store(
                    self.url, key_prefix=KEY_PREFIX, index=MEMORY_INDEX
                ) as store,
            ):
                app = build_memory_app(saver, store)
                config = {"configurable": {"thread_id": thread, "customer_id": customer}}
                for text in texts:
                    result = app.invoke({"messages": [HumanMessage(text)]}, config)
                    replies.append(str(result["messages"][-1].content))
                    say(f"{thread[-5:]}  user: {text}", 2)
                    say(f"       bot : {replies[-1]}", 2)
                if thread == threads[1]:
                    notes = store.search(("customers", customer, "tickets"), limit=10)
                    namespaces = store.list_namespaces(prefix=("customers", customer))
        say(f"store namespaces of the customer: {namespaces}", 2)
        check(
            "by email" in replies[-1] and "by email" not in second,
            "the new thread used the preference learned in the first one (contact by email)",
        )
        check(
            "cracked screen" in replies[-1],
            "semantic search found the earlier cracked-screen ticket for the new message",
        )
        check(
            len(notes) == 4 and {n.value["thread"] for n in notes} == set(threads),
            "4 ticket notes from both threads are in the store, newest first",
        )

    # -- 6 -----------------------------------------------------------------------

    def hot_layer(self) -> None:
        say()
        say("6. Redis as the hot layer (graphkeep.connect(url, hot='redis://...'))")
        if self.backend.name == "redis":
            say("(the hot layer goes over MongoDB, DynamoDB and Postgres: skipped on Redis)", 2)
            return
        hot = redis_url()
        if not server_answers(hot):
            say(f"(no Redis at {mask_url(hot)} for the hot layer: skipped)", 2)
            return
        with graphkeep.connect(self.url, key_prefix=KEY_PREFIX, hot=hot) as layer:
            app, alone = build_app(layer), build_app(layer.durable)
            pages = 5
            for _ in range(pages):  # a UI reloading the thread: its state and a history page
                state = app.get_state(self.config())
                history = list(app.get_state_history(self.config(), limit=10))
            truth = alone.get_state(self.config())
            reads = dict(layer.reads)
            rate = layer.hit_rate() or 0.0
            say(
                f"{pages} page loads: {reads.get('hit', 0)} reads from Redis,"
                f" {reads.get('miss', 0) + reads.get('special', 0)} from {self.backend.name}"
                f" (hit rate {rate:.0%}); Redis holds {layer.footprint(self.thread_id)} bytes"
                " of this thread",
                2,
            )
            check(
                state.values == truth.values and state.config == truth.config,
                f"the state read through Redis is {self.backend.name}'s latest, exactly",
            )
            check(
                [h.config for h in history]
                == [h.config for h in alone.get_state_history(self.config(), limit=10)],
                "the history page is the durable store's",
            )
            check(
                reads.get("hit", 0) >= pages - 1,
                "every page load after the first read the checkpoint from Redis, after one"
                f" key-only check against {self.backend.name}",
            )
            layer.evict(self.thread_id)


class Metrics:
    """The demo's own OpenTelemetry SDK (an in-memory reader as the global meter provider),
    read after each backend's run for its summary: what graphkeep records on every call."""

    def __init__(self) -> None:
        from opentelemetry import metrics
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import InMemoryMetricReader

        self.reader = InMemoryMetricReader()
        metrics.set_meter_provider(MeterProvider(metric_readers=[self.reader]))

    def snapshot(self) -> dict[tuple[str, frozenset[tuple[str, Any]]], Any]:
        """Cumulative points: (metric, attributes) -> histogram point or counter value."""
        found: dict[tuple[str, frozenset[tuple[str, Any]]], Any] = {}
        data = self.reader.get_metrics_data()
        for resource in data.resource_metrics if data else []:
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    for point in metric.data.data_points:
                        key = (metric.name, frozenset((point.attributes or {}).items()))
                        found[key] = point
        return found


def _quantile(q: float, bounds: Sequence[float], counts: Sequence[float]) -> float | None:
    """Prometheus' histogram_quantile over one histogram's bucket counts (seconds)."""
    total = sum(counts)
    if not total:
        return None
    rank, lower, below = q * total, 0.0, 0.0
    for upper, count in zip([*bounds, bounds[-1]], counts, strict=True):
        if below + count >= rank:
            return lower + (upper - lower) * (rank - below) / count if count else lower
        lower, below = upper, below + count
    return lower


def metrics_summary(
    before: Mapping[tuple[str, frozenset[tuple[str, Any]]], Any],
    after: Mapping[tuple[str, frozenset[tuple[str, Any]]], Any],
    system: str,
) -> dict[str, Any]:
    """One backend's run, from the difference of two snapshots: saver/store calls, the
    checkpoint write latency P50/P99, requests per call and resume failures."""
    calls = requests = failures = 0
    put_counts: list[float] = []
    bounds: Sequence[float] = ()
    for (name, attrs), point in after.items():
        if dict(attrs).get("db.system.name") != system:
            continue
        old = before.get((name, attrs))
        if name == "db.client.operation.duration":
            calls += point.count - (old.count if old else 0)
            if dict(attrs).get("db.operation.name") == "checkpoint.put":
                bounds = point.explicit_bounds
                earlier = old.bucket_counts if old else [0] * len(point.bucket_counts)
                delta = [n - o for n, o in zip(point.bucket_counts, earlier, strict=True)]
                if put_counts:
                    put_counts = [a + b for a, b in zip(put_counts, delta, strict=True)]
                else:
                    put_counts = delta
        elif name == "graphkeep.call.requests":  # a counter: requests over the calls
            requests += point.value - (old.value if old else 0)
        elif name == "graphkeep.resume.failures":
            failures += point.value - (old.value if old else 0)
    p50 = _quantile(0.5, bounds, put_counts) if bounds else None
    p99 = _quantile(0.99, bounds, put_counts) if bounds else None
    return {
        "calls": calls,
        "puts": sum(put_counts),
        "p50_ms": None if p50 is None else p50 * 1000,
        "p99_ms": None if p99 is None else p99 * 1000,
        "requests_per_call": requests / calls if calls else None,
        "resume_failures": failures,
    }


SYSTEMS = {"redis": "redis", "redis-cluster": "redis", "mongodb": "mongodb"}


def child_pid(stdout: str) -> str:
    found = re.search(r"pid (\d+)", stdout)
    return found.group(1) if found else "?"


def resume_child(backend: Backend, thread_id: str) -> int:
    """Run in the spawned process: open a saver, resume the pending interrupt."""
    url = os.environ.get(URL_ENV) or backend.url()
    say(f"child pid {os.getpid()}: opened its own {backend.name} saver")
    with graphkeep.connect(url, key_prefix=KEY_PREFIX) as saver:
        app = build_app(saver)
        config = thread_config(thread_id)
        state = app.get_state(config)
        if not state.interrupts:
            say(f"no pending interrupt on thread {thread_id}")
            return 1
        say(f"pending interrupt in {state.next}: {state.interrupts[0].value['question']}")
        decision = {"approved": True, "by": "supervisor Grace"}
        say(f"invoke(Command(resume={decision}))")
        result = app.invoke(Command(resume=decision), config)
        say(f"bot : {result['messages'][-1].content}")
    return 0


# --------------------------------------------------------------------------- main


def pick_backends(choice: str | None) -> tuple[list[Backend], list[str], list[str]]:
    """(backends to run, skip notes, errors) for ``--backend``."""
    run: list[Backend] = []
    notes: list[str] = []
    errors: list[str] = []
    wanted = (
        BACKEND_LIST if choice in (None, "all") else [b for b in BACKEND_LIST if b.name == choice]
    )
    for backend in wanted:
        url = backend.url()
        scheme = url.split("://", 1)[0]
        if not backend.registered:
            message = f"{backend.name}: backend not available yet ({scheme}:// is not registered)"
            (errors if choice == backend.name else notes).append(message)
        elif not server_answers(url):
            message = f"{backend.name}: no server answers at {mask_url(url)}"
            (notes if choice is None else errors).append(message)
        else:
            run.append(backend)
    return run, notes, errors


def say_metrics(summaries: Sequence[tuple[str, dict[str, Any]]]) -> bool:
    """Print the OpenTelemetry summary of each backend's run; whether every fact holds."""
    say()
    say("What OpenTelemetry recorded (graphkeep's metrics, read from the SDK; this process):")
    say("backend        calls  puts  put P50 ms  put P99 ms  requests/call  resume failures", 2)

    def ms(value: float | None) -> str:
        return "n/a" if value is None else f"{value:.1f}"

    ok = True
    for name, m in summaries:
        per_call = m["requests_per_call"]
        say(
            f"{name:<13} {m['calls']:>6} {m['puts']:>5.0f} {ms(m['p50_ms']):>11}"
            f" {ms(m['p99_ms']):>11} {'n/a' if per_call is None else f'{per_call:.2f}':>14}"
            f" {m['resume_failures']:>16}",
            2,
        )
        ok = ok and m["calls"] > 0 and m["puts"] > 0 and m["resume_failures"] == 0
    fact = "every backend recorded its calls and checkpoint writes, and no resume failure"
    say(f"[ok] {fact}" if ok else f"[FAIL] {fact}", 4)
    return ok


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m graphkeep.demo", description=(__doc__ or "").split("\n\n")[0]
    )
    parser.add_argument("--backend", choices=[*BACKEND_NAMES, "all"], default=None)
    parser.add_argument("--resume-child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--thread-id", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.resume_child:
        backend = next(b for b in BACKEND_LIST if b.name == (args.backend or "redis"))
        return resume_child(backend, args.thread_id)

    backends, notes, errors = pick_backends(args.backend)
    for note in notes:
        say(f"skipped: {note}")
    for error in errors:
        say(f"error: {error}")
    failed = bool(errors)
    if not backends and not errors:
        say("error: no backend to run the demo on (start the servers: ./dev services up)")
        return 1
    try:
        meter: Metrics | None = Metrics()
    except ImportError:  # opentelemetry-sdk is not installed: no summary
        meter = None
    summaries: list[tuple[str, dict[str, Any]]] = []
    for backend in backends:
        before = meter.snapshot() if meter else {}
        url = backend.url()
        if backend.name == "dynamodb":
            local_aws_credentials(url)  # the child process inherits them
        demo = Demo(backend, url, f"ticket-{uuid.uuid4().hex[:8]}")
        say()
        say(f"=== graphkeep demo on {backend.name}: {mask_url(url)} ===")
        started = time.perf_counter()
        try:
            demo.run()
        except DemoFailure:
            failed = True
        except Exception as exc:  # noqa: BLE001 - report and carry on with the next backend
            say(f"[FAIL] {type(exc).__name__}: {exc}", 2)
            traceback.print_exc()
            failed = True
        elapsed = time.perf_counter() - started
        say()
        say(f"thread id : {demo.thread_id}")
        say(
            f"stored in : {backend.name} at {mask_url(url)}, key prefix {KEY_PREFIX!r}"
            " (kept for inspection)"
        )
        if hint := backend.inspect_hint(url, demo.thread_id):
            say(f"inspect   : {hint}")
        say(f"({backend.name}: {elapsed:.1f} s)")
        say()
        say("What the graphkeep command shows of this thread:")
        sys.stdout.flush()
        code = show_thread(
            url, demo.thread_id, key_prefix=KEY_PREFIX, channels=["messages"], limit=5
        )
        if code != 0:
            say(f"[FAIL] graphkeep history/dump exited with {code}", 2)
            failed = True
        if meter is not None:
            system = SYSTEMS.get(backend.name, "aws.dynamodb")
            summaries.append((backend.name, metrics_summary(before, meter.snapshot(), system)))
    if summaries:
        failed = not say_metrics(summaries) or failed
    say()
    say("demo FAILED" if failed else "demo passed: every fact above was checked")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
