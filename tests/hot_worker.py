"""A process running turns through a Redis hot layer (tests/test_hot.py runs two at once).

``python -m tests.hot_worker DURABLE_URL PREFIX REDIS_URL LABEL TURNS THREAD...``: for each
turn and each thread, under the thread's lease (``saver.lock``, the durable saver's), read the
state through the layer, check it against the durable store alone, then add one item. A stale
read would lose the other process's item (the final count shows it) or fail the check here.
"""

from __future__ import annotations

import operator
import sys
from typing import Annotated, Any, TypedDict

from langgraph.graph import END, START, StateGraph

import graphkeep


class State(TypedDict):
    items: Annotated[list[str], operator.add]


def _keep(state: State) -> dict[str, Any]:
    return {}


def _graph(saver: Any) -> Any:
    builder = StateGraph(State)
    builder.add_node("keep", _keep)
    builder.add_edge(START, "keep")
    builder.add_edge("keep", END)
    return builder.compile(checkpointer=saver)


def main(argv: list[str]) -> int:
    url, prefix, redis_url, label, turns, *threads = argv
    with graphkeep.connect(url, key_prefix=prefix, hot=redis_url) as layer:
        app, alone = _graph(layer), _graph(layer.durable)
        for turn in range(int(turns)):
            for thread in threads:
                config = {"configurable": {"thread_id": thread}}
                with layer.lock(thread, ttl=30):
                    seen = app.get_state(config).values.get("items", [])
                    truth = alone.get_state(config).values.get("items", [])
                    if seen != truth:
                        print(f"STALE {thread}: {seen} != {truth}", flush=True)
                        return 1
                    app.invoke({"items": [f"{label}-{turn}"]}, config)
        print(f"DONE {dict(layer.reads)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
