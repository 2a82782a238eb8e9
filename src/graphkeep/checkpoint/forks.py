"""The fork rule, once: a branch of a thread no one asked for (``concurrent_fork``).

LangGraph does not serialise the runs of a thread (langgraph#8796): two runs that start on one
thread at once both read its head and both write a child of it, and a run that reads the
head while another run is between two steps writes a child of a checkpoint the other run is
about to continue. The thread forks; LangGraph's latest state follows the newest branch and the
other run's turn is gone from it. :func:`concurrent_forks` finds these forks in what a store
keeps of each checkpoint without a payload (:class:`~graphkeep.checkpoint.records.Link`: the
namespace, the parent id, the metadata's ``source`` and ``run_id``); ``graphkeep check``
reports each as an error and ``graphkeep health`` counts those of its window.

**The rule.** In one namespace, a parent checkpoint with two or more children whose ``source``
is a run's (:data:`~graphkeep.checkpoint.records.RUN_SOURCES`: ``"input"`` or ``"loop"``) is
a concurrent fork; children of any other source do not count. What LangGraph (1.2) writes:

- a run writes ``"input"`` for the checkpoint of its input (a child of the checkpoint it
  loaded: the thread's head, or the ``checkpoint_id`` it was given) and ``"loop"`` for each
  step after (a child of its own previous checkpoint); with ``durability="exit"`` only the
  last one, still a child of what it loaded. Without a race every checkpoint has at most one
  such child: the next thing the run that wrote it did.
- ``update_state`` writes ``"update"`` (a child of the checkpoint it was given, or of the head),
  and so do graphkeep's ``migrate`` and ``materialize``; ``update_state(config, None,
  as_node="__copy__")`` writes ``"fork"`` as a sibling of the copied checkpoint.
- a replay, ``invoke(None, {thread_id, checkpoint_id})`` of a checkpoint of source input or
  loop (or of one that already has children), writes a ``"fork"`` child of it first; the
  replayed steps are ``"loop"`` children of that fork. A replay of an ``update``/``fork``
  checkpoint with no child yet continues it with ``"loop"`` children: its first.

So asked-for branches put an ``update`` or ``fork`` checkpoint at the branching point and are
never a finding, with any number of them beside one run child; two racing runs leave two
``input`` children of the head they both read, or an ``input`` child (the later run) beside
the ``loop`` child of the earlier run's next step.

**What the store cannot tell apart.** Three ways to branch that LangGraph offers also write a
run's source at the branching point, exactly as a race does, and are reported: new input
given at an older checkpoint (``invoke(input, {thread_id, checkpoint_id})``, which is what
LangGraph's SDK ``submit(values, {checkpoint})`` does to edit a message), ``update_state(...,
as_node="__input__")`` on a checkpoint that has a child, and ``Command(resume=...)`` given the
``checkpoint_id`` of an interrupt that was already resumed. Branch through ``update_state``
(then ``invoke(None, config)``) or a replay instead to keep ``graphkeep check`` clean.
A checkpoint whose source the store does not hold (Redis and DynamoDB heads written before
graphkeep recorded it; a ``put`` whose metadata has none) never counts.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from graphkeep.checkpoint.records import RUN_SOURCES, Link

__all__ = ["Fork", "concurrent_forks"]


@dataclass(frozen=True, slots=True)
class Fork:
    """Two or more run-written children of one parent checkpoint, in id order."""

    ns: str
    parent_id: str
    children: tuple[Link, ...]

    @property
    def newest(self) -> str:
        """The newest child's id (the fork's time, by LangGraph's uuid6 ids)."""
        return self.children[-1].checkpoint_id

    def detail(self) -> str:
        named = ", ".join(
            f"{c.checkpoint_id} ({c.source}, {'run ' + c.run_id if c.run_id else 'no run id'})"
            for c in self.children
        )
        return (
            f"{len(self.children)} children written by runs, not by update_state or a replay:"
            f" {named}; runs of the thread raced (each read the head before the other wrote)"
        )


def concurrent_forks(links: Iterable[Link]) -> list[Fork]:
    """The concurrent forks among ``links`` (the rule above), by namespace and parent id."""
    children: dict[tuple[str, str], list[Link]] = {}
    for link in links:
        if link.parent_id is None or link.source not in RUN_SOURCES:
            continue
        children.setdefault((link.ns, link.parent_id), []).append(link)
    return [
        Fork(ns, parent, tuple(sorted(found, key=lambda c: c.checkpoint_id)))
        for (ns, parent), found in sorted(children.items())
        if len(found) > 1
    ]
