"""The demo's transcript on one backend: each step printed and every fact it prints checked
(memory across savers, an approval resumed by a child process, time travel, a fork, long-term
memory, the hot layer)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from langchain_core.messages import AnyMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.types import Command, StateSnapshot

import graphkeep
from graphkeep.demo.app import MEMORY_INDEX, build_app, build_memory_app
from graphkeep.demo.backends import KEY_PREFIX, Backend, redis_url, server_answers
from graphkeep.errors import mask_url

URL_ENV = "GRAPHKEEP_DEMO_URL"  # how the parent hands the URL to the child (not argv)


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
