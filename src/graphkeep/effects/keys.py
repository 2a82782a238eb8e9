"""Idempotency keys: given ones checked, default ones derived from the LangGraph task.

A default key names one call of one effect at one place of a thread's run, the same way on
every re-execution of that place — a resume after ``interrupt()``, a retry, a new process
resuming a thread whose writes were not saved, and a replay or fork of the thread
(``graph.invoke(None, config_with_checkpoint_id)``, ``update_state`` then invoke), which
re-executes steps with new task ids: the world does not fork with the thread::

    thread id                                  ``1`` and ``"1"`` are one thread
    checkpoint namespace                       without the task's own task id (LangGraph's
                                               ``node:<task id>``); an enclosing subgraph
                                               call keeps its task id, because a subgraph's
                                               steps start over each time its node runs
    step, node, task path                      LangGraph's ``langgraph_step``,
                                               ``langgraph_node`` and ``langgraph_path`` (a
                                               ``Send``'s index, a ``@task`` call's index
                                               in its caller): no task or checkpoint id
    effect name, argument digest, position     the n-th call with these arguments in this
                                               execution of the task (a loop calling one
                                               effect twice gets two records)

The model's tool call id is not part of it: it labels a request, and a model that runs
again (a replay, a crash that lost the model's step) asks the same thing under a new id;
two calls with the same arguments in one step are told apart by their position.

LangGraph saves a replay's fork checkpoint (and an ``update_state``) as a step of its own, so
a replay re-executes the replayed checkpoint's tasks one step later than they first ran. A
call whose key has no record, in a task that re-executes a saved step (any step of a replay
run; the first step of a run resumed without new input), therefore also takes the record of
the same call one step back (:func:`earlier_keys`), or that of the key an earlier graphkeep
derived from the task id (a pending task resumed across an upgrade), and stores it under its
own key too. Not covered (docs/effects.md): steps a replayed branch first reaches in a later
run, effects one fork deeper, and effects inside a subgraph across a replay of its parent.
An app that wants a fresh effect per branch passes its own key (``ledger.run(key, fn, ...)``,
``@ledger.once(key=...)``).

The key is ``auto:`` + a SHA-256 over those, so it is the same length for every call and
safe to hand to an outside API (Stripe-style ``idempotency_key``).
"""

from __future__ import annotations

import contextvars
import hashlib
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from graphkeep.effects.port import DONE, FAILED, MAX_KEY_CHARS, EffectRecord, EffectsPort
from graphkeep.errors import InvalidInput
from graphkeep.port import Op
from graphkeep.port.checks import short
from graphkeep.port.clock import now_ms

#: the tool call a ``ledger.once`` tool is running for (set by :mod:`graphkeep.effects.tools`)
TOOL_CALL_ID: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "graphkeep_tool_call_id", default=None
)
#: the idempotency key of the effect running now (:func:`current_idempotency_key`)
CURRENT_KEY: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "graphkeep_idempotency_key", default=None
)

# LangGraph's configurable keys of a running task (public values of its config, read as data)
_TASK_ID = "__pregel_task_id"
_SCRATCHPAD = "__pregel_scratchpad"
_RESUMING = "__pregel_resuming"
_REPLAY_STATE = "__pregel_replay_state"
# ... and of its metadata
_STEP, _NODE, _PATH = "langgraph_step", "langgraph_node", "langgraph_path"
# LangGraph's namespace separators: ``parent:<task id>|child:<task id>``
_NS_SEP, _NS_END = "|", ":"
#: how many task executions keep their call positions (the oldest are forgotten first)
_EXECUTIONS = 4096


def current_idempotency_key() -> str | None:
    """The idempotency key of the effect running now (inside ``ledger.once`` /
    ``ledger.run``), to hand to the outside system; None outside an effect."""
    return CURRENT_KEY.get()


def check_key(key: Any) -> str:
    """A given idempotency key: a non-empty str of at most :data:`MAX_KEY_CHARS` characters,
    without NUL."""
    if not isinstance(key, str):
        raise InvalidInput(f"an idempotency key must be a str, got {type(key).__name__}")
    if not key or len(key) > MAX_KEY_CHARS or "\x00" in key:
        raise InvalidInput(
            f"an idempotency key must be 1 to {MAX_KEY_CHARS} characters without NUL,"
            f" got {short(key)} ({len(key)} characters)"
        )
    return key


def check_thread(thread_id: Any) -> str:
    """A thread id as the savers take it (``1`` and ``"1"`` are one thread); ``""`` or None:
    no thread."""
    if thread_id is None:
        return ""
    if isinstance(thread_id, bool) or not isinstance(thread_id, (str, int)):
        raise InvalidInput(
            f"thread_id must be a str or an int, got {type(thread_id).__name__}"
            f" ({short(thread_id)})"
        )
    text = str(thread_id)
    if "\x00" in text or len(text.encode()) > 1024:
        raise InvalidInput(f"thread_id cannot be stored: {short(text)}")
    return text


class Positions:
    """The n-th call of an effect with given arguments, per execution of a task.

    An execution is told apart by LangGraph's per-execution scratchpad object (a new one
    each time the task runs, a ``RetryPolicy`` attempt included), so a re-execution counts
    from zero again. Thread-safe: a
    task's parallel tool calls run in a thread pool.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seen: OrderedDict[int, tuple[Any, dict[str, int]]] = OrderedDict()

    def next(self, execution: Any, call: str) -> int:
        with self._lock:
            entry = self._seen.get(id(execution))
            if entry is None or entry[0] is not execution:
                entry = (execution, {})
                self._seen[id(execution)] = entry
                while len(self._seen) > _EXECUTIONS:
                    self._seen.popitem(last=False)
            self._seen.move_to_end(id(execution))
            counts = entry[1]
            position = counts.get(call, 0)
            counts[call] = position + 1
            return position


@dataclass(frozen=True, slots=True)
class TaskScope:
    """Where a default key is derived: the LangGraph task running with a config."""

    thread: str
    #: the checkpoint namespace with the task's own task id removed
    namespace: str
    #: LangGraph's ``langgraph_step``, ``langgraph_node`` and ``langgraph_path``; a step of
    #: None (a config without them) derives the key from the task id, as before
    step: int | None
    node: str
    path: str
    #: tells one execution of the task from the next (call positions count per execution)
    execution: Any
    #: the task re-executes a saved step: any step of a replay (a run given a checkpoint
    #: id: LangGraph's replay state is set for the whole run) or the first step of a run
    #: resumed without new input (LangGraph's resuming flag, which it drops after that step)
    continuing: bool
    #: the task id and namespace as LangGraph gives them (the key of earlier versions)
    task_id: str
    raw_namespace: str


def task_scope(config: Mapping[str, Any] | None) -> TaskScope | None:
    """The :class:`TaskScope` of the LangGraph task running with ``config``, or None when
    ``config`` is not a graph task's."""
    conf = (config or {}).get("configurable") or {}
    thread, task_id = conf.get("thread_id"), conf.get(_TASK_ID)
    if thread is None or not task_id:
        return None
    metadata = (config or {}).get("metadata") or {}
    raw = str(conf.get("checkpoint_ns") or "")
    step = metadata.get(_STEP)
    node = metadata.get(_NODE)
    known = isinstance(step, int) and not isinstance(step, bool) and isinstance(node, str)
    return TaskScope(
        thread=check_thread(thread),
        namespace=stable_namespace(raw),
        step=step if known else None,
        node=str(node or ""),
        path=repr(metadata.get(_PATH, ())),
        execution=conf.get(_SCRATCHPAD, conf),
        continuing=bool(conf.get(_RESUMING) or conf.get(_REPLAY_STATE)),
        task_id=str(task_id),
        raw_namespace=raw,
    )


def stable_namespace(namespace: str) -> str:
    """``namespace`` without the task's own task id: LangGraph names a task's namespace
    ``[<enclosing>|]<node>:<task id>``, and the task id changes when a replay re-executes
    the task. Enclosing parts keep theirs: a subgraph's steps start over each time its node
    runs, so that id is what tells two runs of one subgraph apart."""
    enclosing, _, own = namespace.rpartition(_NS_SEP)
    name = own.partition(_NS_END)[0]
    return f"{enclosing}{_NS_SEP}{name}" if enclosing else name


def digest(*parts: str | bytes) -> str:
    h = hashlib.sha256()
    for part in parts:
        data = part.encode() if isinstance(part, str) else part
        h.update(len(data).to_bytes(8, "big"))
        h.update(data)
    return h.hexdigest()


def arguments_digest(serde: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> str:
    """A digest of a call's arguments, the same in every process: each value as the ledger's
    serializer writes it (a value it cannot write — a runtime handle, a config — counts by
    its type)."""
    parts: list[str | bytes] = []
    for name, value in [*((str(i), a) for i, a in enumerate(args)), *sorted(kwargs.items())]:
        try:
            tag, data = serde.dumps_typed(value)
            parts += [name, tag, bytes(data)]
        except Exception:  # noqa: BLE001 - unserializable: its type stands for it
            parts += [name, "type", f"{type(value).__module__}.{type(value).__qualname__}"]
    return digest(*parts)


@dataclass(frozen=True, slots=True)
class Derived:
    """A call's default key and the keys whose record it takes when it has none."""

    key: str
    earlier: tuple[str, ...]


def derived_key(scope: TaskScope, positions: Positions, name: str, arguments: str) -> Derived:
    """The default key of this call in the task ``scope`` (see the module docstring)."""
    tool_call = TOOL_CALL_ID.get() or ""
    legacy_position = positions.next(scope.execution, f"v1\x00{name}\x00{arguments}\x00{tool_call}")
    legacy = "auto:" + digest(
        scope.thread,
        scope.raw_namespace,
        scope.task_id,
        tool_call,
        name,
        arguments,
        str(legacy_position),
    )
    if scope.step is None:
        return Derived(legacy, ())
    position = str(positions.next(scope.execution, f"v2\x00{name}\x00{arguments}"))

    def at(step: int) -> str:
        parts = (scope.namespace, str(step), scope.node, scope.path, name, arguments, position)
        return "auto:" + digest("v2", scope.thread, *parts)

    key = at(scope.step)
    return Derived(key, earlier_keys(scope, at, legacy))


def earlier_keys(scope: TaskScope, at: Callable[[int], str], legacy: str) -> tuple[str, ...]:
    """Where the record of a call that has none may already be, when its task re-executes
    a saved step (:attr:`TaskScope.continuing`): the same call one step back (a replay's
    fork checkpoint, or an ``update_state``, took a step, so the replayed tasks run one step
    later than they first did), then the task-id key of earlier versions (a pending task
    resumed across an upgrade). Other tasks look nowhere else: a run with new input starts a
    new turn, and a loop's next round is not its last one replayed."""
    if not scope.continuing or scope.step is None:
        return ()
    return (at(scope.step - 1), legacy)


def earlier_record(
    port: EffectsPort, thread: str, keys: tuple[str, ...]
) -> Op[EffectRecord | None]:
    """The first settled (done or failed), unexpired record of ``keys``, or None."""
    for key in keys:
        found = yield from port.get(thread, key)
        if found is not None and found.state in (DONE, FAILED) and found.expires_ms > now_ms():
            return found
    return None
