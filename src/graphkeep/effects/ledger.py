"""The effect ledger: side effects that happen once, recorded next to the checkpoints.

:class:`LedgerBase` holds the contract over an :class:`~graphkeep.effects.port.EffectsPort`
(claim, wait, take over, record, replay — each an op, so sync and async share every line);
:class:`SyncLedger` and :class:`AsyncLedger` say how ops run. A call of an effect:

1. claims its record (STARTED, with a lease of ``lease`` seconds): one atomic request,
   refused with :class:`~graphkeep.errors.LeaseLost` when the caller holds the thread's
   lease (``saver.lock``, ``saver.exclusive``) and a newer one was granted since;
2. a record already DONE returns its result without running (FAILED re-raises as
   :class:`~graphkeep.errors.EffectFailed`); a live STARTED one (a concurrent duplicate) is
   polled until it settles, at most ``wait`` seconds, then
   :class:`~graphkeep.errors.EffectInProgress`; a STARTED one whose lease ended (its holder
   died mid-effect, so the outcome is unknown) is run again under ``on_unknown="retry"``
   (with the same idempotency key: at-least-once, deduplicated by the far side when it
   honours the key) or raised as :class:`~graphkeep.errors.EffectOutcomeUnknown` under
   ``"raise"``;
3. runs the function (with ``idempotency_key=`` when it takes one) and records DONE with
   the result, serialized with the ledger's serializer (an encrypting one encrypts it);
4. an exception deletes the record (the next call runs again) unless ``cache_errors=True``
   (FAILED is recorded); LangGraph's interrupts and cancellation are never recorded.

A result the serializer cannot write raises :class:`~graphkeep.errors.SerializationError`
after the effect ran: its record stays STARTED until the lease ends (then ``on_unknown``
decides), because the effect did happen and its outcome cannot be replayed.
"""

from __future__ import annotations

import asyncio
import copy
import functools
import inspect
import logging
import math
import sys
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from graphkeep.effects.info import EffectInfo, at_ms, info_of
from graphkeep.effects.keys import (
    CURRENT_KEY,
    Positions,
    arguments_digest,
    check_key,
    check_thread,
    derived_key,
    earlier_record,
    task_scope,
)
from graphkeep.effects.port import (
    DONE,
    FAILED,
    LEDGER_OPTIONS,
    STARTED,
    EffectRecord,
    EffectsPort,
)
from graphkeep.effects.sealing import opened, packed, resealed
from graphkeep.errors import (
    ConfigurationError,
    EffectFailed,
    EffectInProgress,
    EffectKeyRequired,
    EffectOutcomeUnknown,
    InvalidInput,
    SerializationError,
)
from graphkeep.port import (
    Op,
    Sleep,
    Telemetry,
    codec,
    drive,
    target_of,
)
from graphkeep.port.clock import now_ms
from graphkeep.port.encryption import KeyRing, check_encryption
from graphkeep.port.fence import fence_of
from graphkeep.port.shells import Blocking, Hopping

log = logging.getLogger("graphkeep.effects")

DEFAULT_TTL = 7 * 24 * 3600.0
DEFAULT_LEASE = 60.0
DEFAULT_WAIT = 30.0
DEFAULT_POLL = 0.05
MAX_POLL = 1.0
ON_UNKNOWN = ("retry", "raise")
#: the parameter an effect function takes to receive its idempotency key
KEY_PARAMETER = "idempotency_key"


def _seconds(value: Any, option: str, *, zero: bool = False) -> float:
    if isinstance(value, timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        raise ConfigurationError(
            f"{option} must be seconds (a number or a timedelta), got {value!r}"
        )
    if value < 0 or (value == 0 and not zero) or math.isinf(value):
        raise ConfigurationError(f"{option} must be finite seconds > 0, got {value!r}")
    return float(value)


@dataclass(frozen=True, slots=True)
class Policy:
    """How a ledger (or one effect) claims, waits and records."""

    ttl_ms: int
    lease_ms: int
    wait: float
    poll: float
    on_unknown: str
    cache_errors: bool

    @classmethod
    def of(
        cls, *, ttl: Any, lease: Any, wait: Any, poll: Any, on_unknown: Any, cache_errors: Any
    ) -> Policy:
        """The policy of these options, checked (their defaults: :class:`LedgerBase`'s)."""
        lease_s, poll_s = _seconds(lease, "lease"), _seconds(poll, "poll")
        if lease_s < poll_s:
            raise ConfigurationError(
                f"lease ({lease_s}s) must not be shorter than poll ({poll_s}s): a waiting"
                " duplicate would see every live lease end"
            )
        return cls(
            ttl_ms=math.ceil(_seconds(ttl, "ttl") * 1000),
            lease_ms=math.ceil(lease_s * 1000),
            wait=_seconds(wait, "wait", zero=True),
            poll=poll_s,
            on_unknown=_on_unknown(on_unknown),
            cache_errors=_flag(cache_errors, "cache_errors"),
        )

    def but(self, on_unknown: Any, cache_errors: Any) -> Policy:
        """This policy with one effect's own ``on_unknown`` / ``cache_errors`` (None: kept)."""
        return replace(
            self,
            on_unknown=self.on_unknown if on_unknown is None else _on_unknown(on_unknown),
            cache_errors=(
                self.cache_errors if cache_errors is None else _flag(cache_errors, "cache_errors")
            ),
        )


def _on_unknown(value: Any) -> str:
    if value not in ON_UNKNOWN:
        raise ConfigurationError(f"on_unknown must be one of {ON_UNKNOWN}, got {value!r}")
    return str(value)


def _flag(value: Any, option: str) -> bool:
    if not isinstance(value, bool):
        raise ConfigurationError(f"{option} must be True or False, got {value!r}")
    return value


@dataclass(frozen=True, slots=True)
class Effect:
    """How one effect is called: its name, its key (None: derived from the task; a str;
    or a function of the call's arguments) and its policy."""

    name: str
    key: str | Callable[..., str] | None
    policy: Policy
    takes_key: bool


@dataclass(frozen=True, slots=True)
class Claimed:
    """A call that holds its record: it runs the effect."""

    record: EffectRecord
    #: True when it took over a record whose holder's lease ended (outcome unknown)
    retried: bool


def _name_of(fn: Any) -> str:
    module = getattr(fn, "__module__", None) or ""
    qualname = getattr(fn, "__qualname__", None) or getattr(fn, "name", None) or repr(fn)
    return f"{module}.{qualname}" if module else str(qualname)


def _takes_key(fn: Any) -> bool:
    try:
        return KEY_PARAMETER in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def _is_async(fn: Any) -> bool:
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        getattr(fn, "__call__", None)  # noqa: B004 - a callable object's async __call__
    )


class LedgerBase:
    """The effect ledger's contract over an :class:`~graphkeep.effects.port.EffectsPort`.

    Options: ``serde`` (default LangGraph's ``JsonPlusSerializer``; the saver's for
    ``saver.effects``), ``ttl`` (seconds a record is kept, default 7 days), ``lease``
    (seconds a running effect holds its record before it is presumed dead, default 60:
    longer than your slowest effect), ``wait`` (seconds a duplicate call waits for a
    running one, default 30), ``poll`` (first wait between polls, doubling up to 1 s),
    ``on_unknown`` (``"retry"`` or ``"raise"``), ``cache_errors`` (record an exception
    and re-raise it as :class:`~graphkeep.errors.EffectFailed` on later calls),
    ``encryption`` (a ``KeyRing``: outcomes sealed at their thread and key).
    """

    def __init__(
        self,
        port: EffectsPort,
        *,
        serde: Any = None,
        telemetry: Any = None,
        execute: Any = None,
        ttl: Any = DEFAULT_TTL,
        lease: Any = DEFAULT_LEASE,
        wait: Any = DEFAULT_WAIT,
        poll: Any = DEFAULT_POLL,
        on_unknown: Any = "retry",
        cache_errors: Any = False,
        encryption: KeyRing | None = None,
    ) -> None:
        self.port = port
        self.encryption = check_encryption(encryption)
        self.serde = serde if serde is not None else JsonPlusSerializer()
        self.policy = Policy.of(
            ttl=ttl,
            lease=lease,
            wait=wait,
            poll=poll,
            on_unknown=on_unknown,
            cache_errors=cache_errors,
        )
        #: spans and metrics of every call (see :mod:`graphkeep.port.telemetry`)
        self.telemetry = Telemetry(telemetry, target_of(execute))
        self.positions = Positions()

    # -- how ops run (the shells) --------------------------------------------------

    def _call(self, op: Op[Any]) -> Any:
        raise NotImplementedError

    async def _acall(self, op: Op[Any]) -> Any:
        raise NotImplementedError

    def drive(self, op: Op[Any]) -> Any:
        """Run ``op`` (one of :attr:`port`'s) to its result on this ledger's client."""
        return self._call(op)

    async def adrive(self, op: Op[Any]) -> Any:
        return await self._acall(op)

    def configured(self, **options: Any) -> Any:
        """This ledger (same client and records) with other policy options (``ttl``,
        ``lease``, ``wait``, ``poll``, ``on_unknown``, ``cache_errors``): e.g.
        ``saver.effects.configured(lease=600)``."""
        unknown = sorted(set(options) - LEDGER_OPTIONS)
        if unknown:
            raise ConfigurationError(
                f"unknown ledger option(s) {', '.join(unknown)};"
                f" accepted: {', '.join(sorted(LEDGER_OPTIONS))}"
            )
        current = {
            "ttl": self.policy.ttl_ms / 1000,
            "lease": self.policy.lease_ms / 1000,
            "wait": self.policy.wait,
            "poll": self.policy.poll,
            "on_unknown": self.policy.on_unknown,
            "cache_errors": self.policy.cache_errors,
        }
        twin = copy.copy(self)
        twin.policy = Policy.of(**{**current, **options})
        return twin

    def observed(self, name: str, op: Op[Any], thread_id: str) -> Op[Any]:
        return self.telemetry.observe(f"effects.{name}", op, thread_id=thread_id or None)

    # -- the contract, as ops ------------------------------------------------------

    def _fresh(
        self, thread: str, key: str, name: str, policy: Policy, created: int = 0
    ) -> EffectRecord:
        now = now_ms()
        return EffectRecord(
            thread_id=thread,
            key=key,
            state=STARTED,
            token=uuid.uuid4().hex,
            lease_until_ms=now + policy.lease_ms,
            expires_ms=now + policy.ttl_ms,
            data=None,
            name=name,
            created_ms=created or now,
            updated_ms=now,
        )

    def _begin(
        self, thread: str, key: str, name: str, policy: Policy
    ) -> Op[Claimed | EffectRecord]:
        """Claim the record, or return the settled one, waiting for a live holder."""
        started = time.monotonic()
        delay = policy.poll
        mine, fence = self._fresh(thread, key, name, policy), fence_of(thread)
        found = yield from self.port.claim(mine, mine.created_ms, fence)
        while True:
            now = now_ms()
            if found is None or found.expires_ms <= now:
                if found is not None:  # expired meanwhile: claim anew
                    mine = self._fresh(thread, key, name, policy)
                    found = yield from self.port.claim(mine, mine.created_ms, fence)
                    continue
                return Claimed(mine, retried=False)
            if found.state in (DONE, FAILED):
                return found
            if found.lease_until_ms <= now:
                if policy.on_unknown == "raise":
                    raise EffectOutcomeUnknown(
                        f"effect {found.name!r} (key {key!r}) was started and its lease ended"
                        f" at {at_ms(found.lease_until_ms).isoformat()} without a result: its"
                        " holder died mid-effect and whether it happened is unknown. Check the"
                        " outside system, then clear the record (graphkeep effects URL clear)"
                        " to run it again, or use on_unknown='retry'",
                        thread_id=thread,
                        key=key,
                    )
                heir = self._fresh(thread, key, name, policy, found.created_ms)
                if (yield from self.port.take_over(heir, found.token, now, fence)):
                    log.warning(
                        "effect %r (key %r) was started by a holder whose lease ended: its"
                        " outcome is unknown, running it again with the same idempotency key",
                        found.name,
                        key,
                    )
                    return Claimed(heir, retried=True)
            else:
                waited = time.monotonic() - started
                if waited >= policy.wait:
                    raise EffectInProgress(
                        f"effect {found.name!r} (key {key!r}) is running elsewhere (lease until"
                        f" {at_ms(found.lease_until_ms).isoformat()}) and did not finish within"
                        f" wait={policy.wait}s; nothing ran here",
                        thread_id=thread,
                        key=key,
                    )
                pause = min(delay, policy.wait - waited, (found.lease_until_ms - now) / 1000)
                yield Sleep(max(pause, 0.001))
                delay = min(delay * 2, MAX_POLL)
            found = yield from self.port.get(thread, key)
            if found is None:
                mine = self._fresh(thread, key, name, policy)
                found = yield from self.port.claim(mine, mine.created_ms, fence)

    def _open(
        self, thread: str, key: str, earlier: tuple[str, ...], name: str, policy: Policy
    ) -> Op[Claimed | EffectRecord]:
        """:meth:`_begin`; a call it lets run first takes a settled record of ``earlier``
        (the same call before a replay took a step: see :mod:`graphkeep.effects.keys`)."""
        outcome = yield from self._begin(thread, key, name, policy)
        if not isinstance(outcome, Claimed) or outcome.retried or not earlier:
            return outcome
        found = yield from earlier_record(self.port, thread, earlier)
        if found is None:
            return outcome
        now = now_ms()
        data = resealed(self.encryption, found, outcome.record)
        record = outcome.record.settled(found.state, data, now, now + policy.ttl_ms)
        yield from self.port.finish(record, now)  # lost meanwhile: the holder's record stands
        return record

    def _finish(self, claimed: Claimed, result: Any, policy: Policy) -> Op[None]:
        record = claimed.record
        try:
            typed = codec.dump(self.serde, result, f"the result of effect {record.name!r}")
        except SerializationError as exc:
            raise SerializationError(
                f"{exc}. The effect ran; its record (key {record.key!r}) stays 'started'"
                " until its lease ends, then on_unknown decides"
            ) from exc.__cause__
        yield from self._settle(claimed, DONE, packed(self.encryption, record, typed), policy)

    def _settle(self, claimed: Claimed, state: str, data: bytes, policy: Policy) -> Op[None]:
        now = now_ms()
        record = claimed.record.settled(state, data, now, now + policy.ttl_ms)
        if not (yield from self.port.finish(record, now)):
            log.warning(
                "effect %r (key %r) finished after its lease ended and another call took its"
                " record over: it may have run twice (raise lease= above the effect's longest"
                " run)",
                record.name,
                record.key,
            )

    def _failed(self, claimed: Claimed, exc: BaseException, policy: Policy) -> Op[None]:
        record = claimed.record
        recordable = policy.cache_errors and isinstance(exc, Exception) and not _bubbles_up(exc)
        if not recordable:
            yield from self.port.release(record.thread_id, record.key, record.token)
            return
        error = {"type": type(exc).__qualname__, "message": str(exc)}
        typed = codec.dump(self.serde, error, f"the error of effect {record.name!r}")
        yield from self._settle(claimed, FAILED, packed(self.encryption, record, typed), policy)

    def _replay(self, record: EffectRecord) -> Any:
        """The recorded outcome: the result of a DONE record, EffectFailed for FAILED."""
        value = codec.load(self.serde, opened(self.encryption, record))
        if record.state == DONE:
            return value
        error_type = str(value.get("type")) if isinstance(value, Mapping) else "Exception"
        message = str(value.get("message")) if isinstance(value, Mapping) else str(value)
        raise EffectFailed(
            f"effect {record.name!r} (key {record.key!r}) failed when it ran:"
            f" {error_type}: {message}",
            thread_id=record.thread_id,
            key=record.key,
            error_type=error_type,
        )

    def _list(self, thread_id: Any) -> Op[list[EffectInfo]]:
        thread = None if thread_id is None else check_thread(thread_id)
        records = yield from self.port.list(thread)
        now = now_ms()
        live = [r for r in records if r.expires_ms > now]
        live.sort(key=lambda r: (r.thread_id, r.created_ms, r.key))
        return [info_of(r) for r in live]

    def _clear(self, thread_id: Any) -> Op[int]:
        thread = None if thread_id is None else check_thread(thread_id)
        count = yield from self.port.clear(thread)
        return int(count)

    # -- addressing ----------------------------------------------------------------

    def _address(
        self, effect: Effect, args: tuple[Any, ...], kwargs: Mapping[str, Any]
    ) -> tuple[str, str, tuple[str, ...]]:
        from langgraph.config import get_config

        try:
            config: Any = get_config()
        except RuntimeError:
            config = None
        scope = task_scope(config)
        thread = scope.thread if scope is not None else ""
        if isinstance(effect.key, str):
            return thread, check_key(effect.key), ()
        if effect.key is not None:
            return thread, check_key(effect.key(*args, **kwargs)), ()
        if scope is None:
            raise EffectKeyRequired(
                f"effect {effect.name!r} has no key and is not running in a LangGraph task"
                " (its default key is derived from the task): call it inside a graph, or"
                " give it one: ledger.run('my-key', fn, ...) or @ledger.once(key=...)"
                + _no_task_in_async_code()
            )
        digest = arguments_digest(self.serde, args, kwargs)
        derived = derived_key(scope, self.positions, effect.name, digest)
        return thread, derived.key, derived.earlier

    def _effect(
        self,
        fn: Any,
        key: Any,
        name: Any,
        on_unknown: Any,
        cache_errors: Any,
    ) -> Effect:
        if key is not None and not isinstance(key, str) and not callable(key):
            raise InvalidInput(
                f"an idempotency key must be a str (or a function of the arguments giving"
                f" one), got {type(key).__name__}"
            )
        if isinstance(key, str):
            check_key(key)
        if name is not None and (not isinstance(name, str) or not name):
            raise ConfigurationError(f"name must be a non-empty str, got {name!r}")
        return Effect(
            name=name or _name_of(fn),
            key=key,
            policy=self.policy.but(on_unknown, cache_errors),
            takes_key=_takes_key(fn),
        )

    # -- calling -------------------------------------------------------------------

    def call(
        self, effect: Effect, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        """Run ``fn(*args, **kwargs)`` as ``effect`` (a sync function)."""
        thread, key, earlier = self._address(effect, args, kwargs)
        opening = self._open(thread, key, earlier, effect.name, effect.policy)
        outcome = self._call(self.observed("begin", opening, thread))
        if isinstance(outcome, EffectRecord):
            return self._replay(outcome)
        if effect.takes_key:
            kwargs = {**kwargs, KEY_PARAMETER: key}
        current = CURRENT_KEY.set(key)
        try:
            result = fn(*args, **kwargs)
        except BaseException as exc:
            self._record_failure(outcome, exc, effect.policy)
            raise
        finally:
            CURRENT_KEY.reset(current)
        self._call(self.observed("finish", self._finish(outcome, result, effect.policy), thread))
        return result

    async def acall(
        self, effect: Effect, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        """Run ``await fn(*args, **kwargs)`` as ``effect`` (an async function)."""
        thread, key, earlier = self._address(effect, args, kwargs)
        opening = self._open(thread, key, earlier, effect.name, effect.policy)
        outcome = await self._acall(self.observed("begin", opening, thread))
        if isinstance(outcome, EffectRecord):
            return self._replay(outcome)
        if effect.takes_key:
            kwargs = {**kwargs, KEY_PARAMETER: key}
        current = CURRENT_KEY.set(key)
        try:
            result = await fn(*args, **kwargs)
        except BaseException as exc:
            await self._arecord_failure(outcome, exc, effect.policy)
            raise
        finally:
            CURRENT_KEY.reset(current)
        await self._acall(
            self.observed("finish", self._finish(outcome, result, effect.policy), thread)
        )
        return result

    def _record_failure(self, claimed: Claimed, exc: BaseException, policy: Policy) -> None:
        try:
            self._call(
                self.observed("fail", self._failed(claimed, exc, policy), claimed.record.thread_id)
            )
        except Exception as failure:  # noqa: BLE001 - the effect's own error is what surfaces
            _unrecorded(claimed, failure)

    async def _arecord_failure(self, claimed: Claimed, exc: BaseException, policy: Policy) -> None:
        try:
            await self._acall(
                self.observed("fail", self._failed(claimed, exc, policy), claimed.record.thread_id)
            )
        except Exception as failure:  # noqa: BLE001 - the effect's own error is what surfaces
            _unrecorded(claimed, failure)

    # -- the public API --------------------------------------------------------------

    def once(
        self,
        fn: Any = None,
        *,
        key: str | Callable[..., str] | None = None,
        name: str | None = None,
        on_unknown: str | None = None,
        cache_errors: bool | None = None,
    ) -> Any:
        """Make ``fn`` an effect that happens once per key: ``@ledger.once`` or
        ``@ledger.once(key=..., name=..., on_unknown=..., cache_errors=...)``.

        ``fn``: a sync or async function (a node, a ``@task``'s function, a tool's function —
        put ``@tool`` / ``@task`` above ``@ledger.once``), or a LangChain tool (``BaseTool``:
        ``ledger.once(tool)`` for ``ToolNode`` / ``create_react_agent``). A ``fn`` taking
        ``idempotency_key`` receives the key (hidden from the signature a tool schema is
        built from); inside an effect
        :func:`graphkeep.effects.current_idempotency_key` gives it too.
        """
        if fn is None:
            return lambda f: self.once(
                f, key=key, name=name, on_unknown=on_unknown, cache_errors=cache_errors
            )
        from graphkeep.effects.tools import is_tool, once_tool

        if is_tool(fn):
            effect = self._effect(
                fn, key, name or getattr(fn, "name", None), on_unknown, cache_errors
            )
            return once_tool(self, fn, effect)
        if not callable(fn):
            raise ConfigurationError(f"ledger.once wraps a function or a tool, got {fn!r}")
        if type(fn).__name__ in ("_TaskFunction", "_EntrypointFunction"):
            raise ConfigurationError(
                "put @ledger.once beneath @task / @entrypoint (it wraps the function they run)"
            )
        effect = self._effect(fn, key, name, on_unknown, cache_errors)
        return wrap_function(self, fn, effect)

    def run(self, key: str | None, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        """Call ``fn(*args, **kwargs)`` once for ``key`` (None: derived from the running
        LangGraph task). An async ``fn`` returns an awaitable (or use :meth:`arun`)."""
        effect = self._effect(fn, key, None, None, None)
        if _is_async(fn):
            return self.acall(effect, fn, args, kwargs)
        return self.call(effect, fn, args, kwargs)

    async def arun(
        self, key: str | None, fn: Callable[..., Any], /, *args: Any, **kwargs: Any
    ) -> Any:
        """:meth:`run` awaited: ``fn`` may be async or sync (a sync one runs here, on the
        loop: keep it short or make it async)."""
        effect = self._effect(fn, key, None, None, None)
        if _is_async(fn):
            return await self.acall(effect, fn, args, kwargs)

        async def coroutine(*a: Any, **k: Any) -> Any:
            return fn(*a, **k)

        return await self.acall(effect, coroutine, args, kwargs)

    def records(self, thread_id: Any = None) -> list[EffectInfo]:
        """The live records (of ``thread_id``; None: of every thread), oldest first per
        thread; never their results."""
        return list(self._call(self.observed("list", self._list(thread_id), "")))

    async def arecords(self, thread_id: Any = None) -> list[EffectInfo]:
        return list(await self._acall(self.observed("list", self._list(thread_id), "")))

    def clear(self, thread_id: Any = None) -> int:
        """Delete the records of ``thread_id`` (None: every record under this key prefix);
        returns how many."""
        return int(self._call(self.observed("clear", self._clear(thread_id), "")))

    async def aclear(self, thread_id: Any = None) -> int:
        return int(await self._acall(self.observed("clear", self._clear(thread_id), "")))


def _bubbles_up(exc: BaseException) -> bool:
    """LangGraph's own control flow (``interrupt()``, ``Command(graph=PARENT)``): never an
    effect's outcome."""
    try:
        from langgraph.errors import GraphBubbleUp
    except ImportError:  # pragma: no cover - the ledger runs inside LangGraph graphs
        return False
    return isinstance(exc, GraphBubbleUp)


def _unrecorded(claimed: Claimed, failure: Exception) -> None:
    log.warning(
        "effect %r (key %r) raised and its record could not be updated (%s): it stays"
        " 'started' until its lease ends",
        claimed.record.name,
        claimed.record.key,
        type(failure).__name__,
    )


def wrap_function(ledger: LedgerBase, fn: Callable[..., Any], effect: Effect) -> Any:
    """``fn`` as an effect of ``ledger``: same name, docs and signature (without
    ``idempotency_key``, which the ledger passes)."""
    if _is_async(fn):

        @functools.wraps(fn)
        async def aonce(*args: Any, **kwargs: Any) -> Any:
            return await ledger.acall(effect, fn, args, kwargs)

        wrapper: Any = aonce
    else:

        @functools.wraps(fn)
        def once(*args: Any, **kwargs: Any) -> Any:
            return ledger.call(effect, fn, args, kwargs)

        wrapper = once
    try:
        signature: inspect.Signature | None = inspect.signature(fn)
    except (TypeError, ValueError):  # a builtin without one: callers see (*args, **kwargs)
        signature = None
    if signature is not None:
        wrapper.__signature__ = signature.replace(
            parameters=[p for n, p in signature.parameters.items() if n != KEY_PARAMETER]
        )
    wrapper.__annotations__ = {
        k: v for k, v in getattr(fn, "__annotations__", {}).items() if k != KEY_PARAMETER
    }
    # inspect (and @tool's schema) stop at __signature__; __wrapped__ stays for the
    # globals that resolve fn's string annotations (get_type_hints follows it)
    wrapper.effect = effect
    wrapper.ledger = ledger
    return wrapper


class SyncLedger(Blocking, LedgerBase):
    """An effect ledger on a blocking client; async effects run its requests in a worker
    thread."""

    async def _acall(self, op: Op[Any]) -> Any:
        return await asyncio.to_thread(drive, op, self._execute)

    def setup(self) -> None:
        self._call(self.observed("setup", self.port.setup(), ""))


class AsyncLedger(Hopping, LedgerBase):
    """An effect ledger on an asyncio client; sync effects (LangGraph runs sync nodes and
    tools in worker threads) hop onto the ledger's event loop."""

    HOP = (
        "effect ledger",
        "async effects (async def), arun, or a sync ledger from graphkeep.connect_effects()",
    )

    async def setup(self) -> None:
        await self._acall(self.observed("setup", self.port.setup(), ""))


def _no_task_in_async_code() -> str:
    """What to add to ``EffectKeyRequired`` where LangGraph cannot give async code its task:
    ``get_config()`` reads a context variable that asyncio tasks carry from Python 3.11 on."""
    if sys.version_info >= (3, 11):
        return ""
    try:
        asyncio.current_task()
    except RuntimeError:  # no running loop: sync code, which LangGraph does give its task
        return ""
    return (
        " (on Python 3.10 LangGraph cannot tell async code its task: give an async effect a"
        " key, or run on Python 3.11 or later)"
    )
