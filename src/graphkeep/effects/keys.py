"""Idempotency keys: given ones checked, default ones derived from the LangGraph task.

A default key names one call of one effect in one execution of one task, the same way on
every re-execution of that task (a resume after ``interrupt()``, a retry, a new process
resuming a thread whose writes were not saved)::

    thread id, checkpoint namespace, task id   LangGraph derives the task id from the
                                               checkpoint, step and node: stable across
                                               re-executions of the same step
    tool call id                               when a tool wrapped by ``ledger.once`` runs
                                               for a model's tool call
    effect name, argument digest, position     the n-th call with these arguments in
                                               this execution of the task (a loop calling
                                               one effect twice gets two records)

The key is ``auto:`` + a SHA-256 over those, so it is the same length for every call and
safe to hand to an outside API (Stripe-style ``idempotency_key``).
"""

from __future__ import annotations

import contextvars
import hashlib
import threading
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from graphkeep.effects.port import MAX_KEY_CHARS
from graphkeep.errors import InvalidInput
from graphkeep.port.checks import short

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


def task_scope(config: Mapping[str, Any] | None) -> tuple[str, str, str, Any] | None:
    """``(thread_id, namespace, task_id, execution)`` of the LangGraph task running with
    ``config``, or None when ``config`` is not a graph task's."""
    conf = (config or {}).get("configurable") or {}
    thread, task_id = conf.get("thread_id"), conf.get(_TASK_ID)
    if thread is None or not task_id:
        return None
    return (
        check_thread(thread),
        str(conf.get("checkpoint_ns") or ""),
        str(task_id),
        conf.get(_SCRATCHPAD, conf),
    )


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


def derived_key(
    scope: tuple[str, str, str, Any], positions: Positions, name: str, arguments: str
) -> str:
    """The default key of this call in the task ``scope`` (see the module docstring)."""
    thread, namespace, task_id, execution = scope
    tool_call = TOOL_CALL_ID.get() or ""
    call = f"{name}\x00{arguments}\x00{tool_call}"
    position = positions.next(execution, call)
    return "auto:" + digest(thread, namespace, task_id, tool_call, name, arguments, str(position))
