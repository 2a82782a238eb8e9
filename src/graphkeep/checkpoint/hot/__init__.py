"""Redis as the hot layer over a durable saver: reads from Redis, never stale.

:class:`HotLayer` (sync) and :class:`AsyncHotLayer` wrap a durable saver — graphkeep's
MongoDB or DynamoDB saver, LangGraph's Postgres saver — and serve ``get_tuple`` (so
``get_state``, and the first read of every ``invoke``) from a Redis copy of the checkpoints
read recently, validated on every read by ONE key-only request to the durable store.

The rules, written once as ops (the Redis side is a :class:`HotPort`, the durable side the
requests :class:`Probe` and :class:`Durable`, answered by the shell):

- **Durability is the durable store's.** Every write (``put``, ``put_writes``, deletes,
  copies, prunes) goes to the durable saver only; Redis is filled by reads. A call returns
  when the durable store has answered (a ``put`` then has Redis forget the namespace's
  newest copy: one request, its failure logged); Redis never fails or loses a write.
- **Never stale.** A checkpoint never changes once written and its regular pending writes are
  only ever added, so a cached checkpoint is served only when the durable store's keys
  (:class:`~graphkeep.checkpoint.records.CheckpointKeys`: the checkpoint still there, no
  newer one for a "latest" read, as many writes as the copy holds) say it is what a read of
  the durable store would return. A checkpoint with a special write (an interrupt, an
  error, a resume: they replace in place) is always read from the durable store. So no
  read returns an older checkpoint as the latest or misses a pending write, whatever
  happened to Redis (flushed, restarted from an old snapshot, written by a process that
  died, unreachable from one process only) and whoever wrote the durable store.
- **Redis failing is never the graph's problem.** A Redis error is logged, counted
  (``graphkeep.hot.reads`` with outcome ``error``) and turns the layer durable-only for
  :data:`PAUSE` seconds; reads then go to the durable store as if there were no layer.
- **Bounded.** A thread's copies live in one Redis hash that expires ``hot_ttl`` seconds
  after the thread's last read through the layer (sliding), and come back on the next read.

Here: the two sides and the requests of the layer's ops (:mod:`.port`), the options a saver
takes for it (:mod:`.options`), the rules as ops (:mod:`.layer`) and the sync and async layers
that run them (:mod:`.shells`). See docs/hot.md for the measured costs and the fault matrix.
"""

from __future__ import annotations

from graphkeep.checkpoint.hot.layer import PAUSE, HotLayerBase
from graphkeep.checkpoint.hot.options import (
    DEFAULT_HOT_TTL,
    HOT_OPTIONS,
    HOT_SCHEMES,
    alayered,
    check_hot_ttl,
    check_hot_url,
    hot_options,
    layered,
    register_opener,
)
from graphkeep.checkpoint.hot.port import Durable, HotPort, Probe, Prober, ToHot
from graphkeep.checkpoint.hot.shells import AsyncHotLayer, HotLayer, layer_class

__all__ = [
    "DEFAULT_HOT_TTL",
    "HOT_OPTIONS",
    "HOT_SCHEMES",
    "PAUSE",
    "AsyncHotLayer",
    "Durable",
    "HotLayer",
    "HotLayerBase",
    "HotPort",
    "Probe",
    "Prober",
    "ToHot",
    "alayered",
    "check_hot_ttl",
    "check_hot_url",
    "hot_options",
    "layer_class",
    "layered",
    "register_opener",
]
