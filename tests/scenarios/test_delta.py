"""DeltaChannel over 100 turns on every backend set-up (issue #5 s1; contract s8).

conformance/spec/delta_prune_copy.py proves restart, copy and prune after 15 invokes; this is
the long version: 100 turns with snapshot_frequency=4, so the value of most checkpoints lives
in ancestor writes, read back after a restart (new saver, async API), through history, from a
``copy_thread`` target, after ``prune(keep_latest)`` and on a fork of turn 50.
"""

from __future__ import annotations

from langgraph.checkpoint.serde.types import _DeltaSnapshot

from tests.scenarios.backends import Graph, Store, thread_config
from tests.scenarios.graphs import delta_graph, delta_items

TURNS = 100
FORK_AT = 50


def test_delta_channel_over_100_turns_survives_restart_copy_prune_and_fork(
    store: Store, thread_id: str
) -> None:
    config = thread_config(thread_id)
    expected = {"items": delta_items(TURNS)}
    with store.open("sync") as api:
        graph = Graph(api, delta_graph())
        for turn in range(1, TURNS + 1):
            graph.invoke({"items": [f"in{turn}"]}, config)
            if turn == FORK_AT:
                fork_base = graph.state(config).config
        head = graph.state(config)
        assert head.values == expected
        stored = [t.checkpoint["channel_values"].get("items") for t in api.list(config)]
        snapshots = sum(isinstance(v, _DeltaSnapshot) for v in stored)
        assert 0 < snapshots < len(stored) // 2, "not a delta test: values stored every step"

    with store.open("async") as fresh:  # a restart, through the async API
        graph = Graph(fresh, delta_graph())
        assert graph.state(config).values == expected
        last = delta_items(TURNS - 1)
        # newest first: the reply, the input applied, the input checkpoint; per turn
        assert [s.values["items"] for s in graph.history(config, limit=6)] == [
            expected["items"], [*last, f"in{TURNS}"], last,
            last, [*delta_items(TURNS - 2), f"in{TURNS - 1}"], delta_items(TURNS - 2),
        ]  # fmt: skip

        copy = thread_config(f"{thread_id}-copy")
        fresh.copy_thread(thread_id, f"{thread_id}-copy")
        assert graph.state(copy).values == expected

        fresh.prune([f"{thread_id}-copy"], strategy="keep_latest")
        assert len(fresh.list(copy)) < len(stored)
        assert graph.state(copy).values == expected
        graph.invoke({"items": [f"in{TURNS + 1}"]}, copy)
        assert graph.state(copy).values == {"items": delta_items(TURNS + 1)}

        fork = graph.update(fork_base, {"items": ["fork"]})
        forked = [*delta_items(FORK_AT), "fork"]
        assert graph.state(fork).values == {"items": forked}
        graph.invoke({"items": [f"in{FORK_AT + 1}"]}, fork)
        assert graph.state(config).values == {
            "items": delta_items(1, start=FORK_AT + 1, before=forked)
        }

        # the original head and everything about it is unchanged
        assert graph.state(head.config).values == expected
        assert graph.state(head.config).parent_config == head.parent_config
