"""One turn of a slow chat graph on a thread, in a process of its own: the runs of
tests/test_exclusive.py (two workers at once, a worker SIGSTOPped past its lease).

    python -m tests.turn_worker URL PREFIX THREAD LINE MARKER {plain|exclusive} [TTL]

Connected, it prints ``ready`` and waits for a line on its standard input (so two workers
start together, whatever their start-up took), runs the turn (its node touches ``MARKER``
when it starts, then thinks for ``THINK`` seconds), and prints ``done``, ``busy``
(ThreadBusy) or ``lease-lost TOKEN NEWER`` (LeaseLost).
"""

from __future__ import annotations

import operator
import pathlib
import sys
import time
from typing import Annotated, Any

from langgraph.graph import END, START, StateGraph
from typing_extensions import TypedDict

import graphkeep
from graphkeep.errors import LeaseLost, ThreadBusy

#: how long the node thinks: longer than two workers' starts differ
THINK = 0.5


class Chat(TypedDict):
    log: Annotated[list[str], operator.add]


def slow_chat(marker: str | None = None, think: float = THINK) -> Any:
    """input -> think (touches ``marker``, sleeps ``think``) -> the reply."""

    def reply(state: Chat) -> dict[str, list[str]]:
        if marker:
            pathlib.Path(marker).touch()
        time.sleep(think)
        said = [line for line in state["log"] if line.startswith("user:")]
        return {"log": [f"bot:{len(said)}:{said[-1]}"]}

    builder = StateGraph(Chat)
    builder.add_node("reply", reply)
    builder.add_edge(START, "reply")
    builder.add_edge("reply", END)
    return builder


def main(argv: list[str]) -> int:
    url, prefix, thread, line, marker, mode, *rest = argv
    ttl = float(rest[0]) if rest else 30.0
    with graphkeep.connect(url, key_prefix=prefix) as saver:
        graph = slow_chat(marker).compile(checkpointer=saver)
        app = saver.exclusive(graph, timeout=60, ttl=ttl) if mode == "exclusive" else graph
        print("ready", flush=True)
        sys.stdin.readline()
        try:
            app.invoke({"log": [f"user:{line}"]}, {"configurable": {"thread_id": thread}})
        except ThreadBusy:
            print("busy", flush=True)
            return 2
        except LeaseLost as exc:
            print(f"lease-lost {exc.token} {exc.newer}", flush=True)
            return 3
    print("done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
