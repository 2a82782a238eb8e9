"""prune: what ``prune(strategy="keep_latest")`` must keep on a live thread (contract s7, s8).

The official suite's eight prune cases check a quiet thread. These are the cases of
langgraph-checkpoint-postgres 3.2.0's prune tests that hold for any saver, in our words:

- a run in flight under ``durability="async"`` can store a step's pending writes before its
  checkpoint: a prune between the two keeps them, and the checkpoint reads them back once it
  lands; the writes of a checkpoint the prune deletes go with it;
- a DeltaChannel thread keeps what its head replays, whichever evidence marks the channel:
  the metadata's ``counters_since_delta_snapshot``, a ``_DeltaSnapshot`` stored at an ancestor
  (a head written without counters), or LangGraph.js's ``delta_writes_versioned``. Pruned in
  one batch with a plain thread, its channel history reads back the same after the prune,
  while the plain thread is pruned to its head. (PostgresSaver refuses the whole batch
  instead; a saver that keeps the chain keeps the state, which is what both protect.)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from uuid import uuid4

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import CheckpointMetadata
from langgraph.checkpoint.serde.types import _DeltaSnapshot

from conformance.factory import Api, SaverFactory
from conformance.spec._registry import case
from conformance.spec.fixtures import (
    checkpoint,
    checkpoint_id_of,
    config,
    ids,
    metadata,
    must_get,
    new_checkpoint_id,
    new_thread,
    put_chain,
    write_values,
)

CHANNEL = "items"
STEPS = 4


@case("prune")
def keep_latest_keeps_writes_stored_before_their_checkpoint(factory: SaverFactory) -> None:
    thread = new_thread()
    with factory.open() as api:
        stored = put_chain(api, thread, 3)
        api.put_writes(stored[0], [("n", "of-a-pruned-checkpoint")], str(uuid4()))
        head = stored[-1]
        # the next step's writes, saved before its checkpoint as durability="async" may
        landing = new_checkpoint_id()
        api.put_writes(config(thread, "", landing), [("n", "in-flight")], str(uuid4()))

        api.prune([thread], strategy="keep_latest")
        assert ids(api.list(config(thread))) == [checkpoint_id_of(head)], "not pruned to head"

        next_cp = checkpoint({"n": 3}, {"n": 4}, checkpoint_id=landing)
        api.put(config(thread, "", checkpoint_id_of(head)), next_cp, metadata(3), {"n": 4})
        landed = must_get(api, config(thread, "", landing))
        assert write_values(landed) == [("n", "in-flight")], (
            f"prune deleted the writes of a checkpoint not stored yet: {write_values(landed)}"
        )
        # the pruned checkpoint's writes went with it: stored again, it has none
        oldest = checkpoint_id_of(stored[0])
        again = checkpoint({"n": 0}, {"n": 1}, checkpoint_id=oldest)
        api.put(config(thread), again, metadata(0), {"n": 1})
        assert write_values(must_get(api, config(thread, "", oldest))) == []


def _counters(step: int) -> CheckpointMetadata:
    return metadata(step, counters_since_delta_snapshot={CHANNEL: [step, step]})


def _versioned(step: int) -> CheckpointMetadata:
    return metadata(step, delta_writes_versioned=True)


def _delta_thread(
    api: Api, thread: str, seed: Any, meta_for: Callable[[int], CheckpointMetadata]
) -> RunnableConfig:
    """A DeltaChannel thread as LangGraph leaves it: step 0 stores ``seed`` (None: no value),
    every step has a new version of the channel and, but the head, a write of it."""
    parent: RunnableConfig | None = None
    for step in range(STEPS):
        version = step + 1
        values = {CHANNEL: seed} if step == 0 and seed is not None else {}
        parent_id = checkpoint_id_of(parent) if parent else None
        parent = api.put(
            config(thread, "", parent_id),
            checkpoint(values, {CHANNEL: version}),
            meta_for(step),
            {CHANNEL: version},
        )
        if step < STEPS - 1:
            api.put_writes(parent, [(CHANNEL, [f"w{step}"])], str(uuid4()))
    assert parent is not None
    return parent


def _prune_batch_keeps_delta_state(
    factory: SaverFactory, seed: Any, meta_for: Callable[[int], CheckpointMetadata]
) -> None:
    plain, delta = new_thread("plain"), new_thread("delta")
    with factory.open() as api:
        plain_head = put_chain(api, plain, 3)[-1]
        head = _delta_thread(api, delta, seed, meta_for)
        before = api.history(head, [CHANNEL])[CHANNEL]
        assert [v for _, _, v in before["writes"]] == [[f"w{s}"] for s in range(STEPS - 1)]

        api.prune([plain, delta], strategy="keep_latest")

        assert ids(api.list(config(plain))) == [checkpoint_id_of(plain_head)]
        assert api.get_tuple(config(delta)) is not None, "prune dropped the delta head"
        after = api.history(head, [CHANNEL])[CHANNEL]
        assert after == before, f"prune broke the DeltaChannel: {before} became {after}"


@case("prune")
def keep_latest_keeps_a_delta_channel_its_counters_name(factory: SaverFactory) -> None:
    _prune_batch_keeps_delta_state(factory, _DeltaSnapshot(["seed"]), _counters)


@case("prune")
def keep_latest_keeps_a_delta_channel_known_by_a_snapshot_at_an_ancestor(
    factory: SaverFactory,
) -> None:
    # no counters anywhere: the snapshot stored at the root is the only evidence
    _prune_batch_keeps_delta_state(factory, _DeltaSnapshot(["seed"]), metadata)


@case("prune")
def keep_latest_keeps_a_delta_channel_of_a_thread_marked_writes_versioned(
    factory: SaverFactory,
) -> None:
    # LangGraph.js's marker names no channel, and no value is stored: the walk goes to the root
    _prune_batch_keeps_delta_state(factory, None, _versioned)
