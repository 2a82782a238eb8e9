"""OpenTelemetry on every call: one CLIENT span and the database client metrics per logical call.

Written once, as a wrapper around an op (:meth:`Telemetry.observe`): the span starts when the
op does and ends when it returns, raises or is closed, so every request the op yields — and
every retry of one, which the executor makes inside a request — falls inside it. Savers,
stores, node caches and event logs wrap their public calls with it; a backend only declares
what it talks to (:class:`Target`: ``db.system.name``, ``db.namespace``, the server), as data
on its executors.

Only the OpenTelemetry **API** is used (``pip install 'graphkeep[otel]'``): the application
picks the SDK and its exporters. Telemetry is on whenever ``opentelemetry-api`` is importable
and costs a check per call until an SDK provider is installed; ``telemetry=False`` turns it
off, ``telemetry={...}`` takes the options in :data:`OPTIONS`. Nothing a call stores or
reads (payloads, values, keys) ever goes into a span or a metric; thread ids only with
``telemetry={"thread_ids": True}``. Exception messages are not recorded either (they may
name a key): a failed call carries ``error.type`` (the exception's class) and the ERROR
status. A provider or exporter that raises never fails a call: every telemetry step is
guarded.

Metrics (see docs/observability.md): ``db.client.operation.duration`` and the ``graphkeep.*``
instruments below, each with ``db.system.name``, ``db.namespace`` and
``db.operation.name`` (plus ``error.type`` on failure).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from graphkeep.errors import (
    CORRUPT_FRAMING,
    MISSING_VALUE,
    PLAINTEXT,
    TAMPERED,
    UNDECODABLE,
    UNKNOWN_KEY,
    ConfigurationError,
    CorruptData,
    GraphkeepError,
)
from graphkeep.port.ops import Call, Emit, Op, Sleep, T, each_counted

try:
    from opentelemetry import context as otel_context
    from opentelemetry import metrics, trace
    from opentelemetry.metrics import Observation
    from opentelemetry.trace import SpanKind, Status, StatusCode
except ImportError:  # pragma: no cover - graphkeep[otel] not installed: telemetry is off
    AVAILABLE = False
else:
    AVAILABLE = True

#: the instrumentation scope's name (tracer and meter)
SCOPE = "graphkeep"

#: ``db.client.operation.duration``'s buckets, as the database conventions advise (seconds)
DURATION_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0)
#: ``graphkeep.events.append.batch_size``' buckets (events)
BATCH_BUCKETS = (1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0)

#: the options ``telemetry={...}`` accepts: ``thread_ids`` (bool: record the thread id on
#: spans as ``graphkeep.thread_id``; it may be personal data), ``tracer_provider`` /
#: ``meter_provider`` (an SDK provider to use instead of the global one)
OPTIONS = ("thread_ids", "tracer_provider", "meter_provider")

#: every metric graphkeep records (the database conventions' duration, then graphkeep's own)
DURATION = "db.client.operation.duration"
CALL_REQUESTS = "graphkeep.call.requests"
PUT_BYTES = "graphkeep.put.bytes"
LOCK_WAIT = "graphkeep.lock.wait"
LOCK_CONTENTION = "graphkeep.lock.contention"
WATCH_LAG = "graphkeep.watch.lag"
APPEND_BATCH_SIZE = "graphkeep.events.append.batch_size"
RESUME_FAILURES = "graphkeep.resume.failures"
STORE_READ_FAILURES = "graphkeep.store.read.failures"
HOT_READS = "graphkeep.hot.reads"
METRICS = (
    DURATION,
    CALL_REQUESTS,
    PUT_BYTES,
    LOCK_WAIT,
    LOCK_CONTENTION,
    WATCH_LAG,
    APPEND_BATCH_SIZE,
    RESUME_FAILURES,
    STORE_READ_FAILURES,
    HOT_READS,
)
#: graphkeep's own attributes (beyond the conventions' ``db.*``, ``server.*``, ``error.type``)
THREAD_ID = "graphkeep.thread_id"
REASON = "graphkeep.reason"
LOCK_ACQUIRED = "graphkeep.lock.acquired"
HOT_OUTCOME = "graphkeep.hot.outcome"
ATTRIBUTES = (THREAD_ID, REASON, LOCK_ACQUIRED, HOT_OUTCOME)

#: ``graphkeep.resume.failures``' reasons (a :class:`~graphkeep.errors.CorruptData` carries
#: the one that applies as its ``kind``); also ``UNDECODABLE`` and ``MISSING_VALUE``, and
#: with encryption on ``PLAINTEXT``, ``UNKNOWN_KEY`` and ``TAMPERED``
CORRUPT_DATA = CORRUPT_FRAMING
REASONS = frozenset({CORRUPT_DATA, UNDECODABLE, MISSING_VALUE, PLAINTEXT, UNKNOWN_KEY, TAMPERED})


@dataclass(frozen=True, slots=True)
class Target:
    """What a backend's requests go to, as the database conventions name it.

    ``system``: ``db.system.name`` (``redis``, ``mongodb``, ``aws.dynamodb``); ``namespace``:
    ``db.namespace`` (Redis' database index, MongoDB's database, DynamoDB's table);
    ``address`` / ``port``: ``server.address`` / ``server.port`` where known.
    """

    system: str
    namespace: str | None = None
    address: str | None = None
    port: int | None = None

    def attributes(self) -> dict[str, str | int]:
        found: dict[str, str | int] = {"db.system.name": self.system}
        if self.namespace is not None:
            found["db.namespace"] = self.namespace
        if self.address is not None:
            found["server.address"] = self.address
        if self.port is not None:
            found["server.port"] = self.port
        return found


@dataclass(frozen=True, slots=True)
class Settings:
    """A checked ``telemetry`` option."""

    thread_ids: bool = False
    tracer_provider: Any = None
    meter_provider: Any = None


def check_telemetry(option: Any) -> Settings | None:
    """The ``telemetry`` option checked: None when off (``False``); else the opt-ins.

    ``None`` / ``True`` mean the defaults; a mapping takes the keys of :data:`OPTIONS`.
    Anything else, an unknown key or a value of the wrong type raises
    :class:`~graphkeep.errors.ConfigurationError`.
    """
    if option is False:
        return None
    if option is None or option is True:
        return Settings()
    if not isinstance(option, Mapping):
        raise ConfigurationError(
            f"telemetry must be True, False or a dict of options, got {type(option).__name__}"
        )
    unknown = sorted(str(k) for k in option if k not in OPTIONS)
    if unknown:
        raise ConfigurationError(
            f"unknown telemetry option(s) {', '.join(unknown)}; accepted: {', '.join(OPTIONS)}"
        )
    thread_ids = option.get("thread_ids", False)
    if not isinstance(thread_ids, bool):
        raise ConfigurationError(
            f"telemetry option thread_ids must be True or False, got {thread_ids!r}"
        )
    for name in ("tracer_provider", "meter_provider"):
        provider = option.get(name)
        wanted = "get_tracer" if name == "tracer_provider" else "get_meter"
        if provider is not None and not callable(getattr(provider, wanted, None)):
            raise ConfigurationError(
                f"telemetry option {name} must be an OpenTelemetry provider (with {wanted}),"
                f" got {type(provider).__name__}"
            )
    return Settings(
        thread_ids=thread_ids,
        tracer_provider=option.get("tracer_provider"),
        meter_provider=option.get("meter_provider"),
    )


AttributeKey = tuple[tuple[str, Any], ...]


class Totals:
    """Running sums per attribute set, read by an observable counter when the SDK collects.

    A call adds to a sum here (a dict update under a lock) instead of making a measurement:
    the SDK's cost per measurement (hashing and copying its attributes, about as much as
    the span) is then paid once per collection, not once per call. The sums live as long
    as the meter's instruments, so a saver closed and reopened continues its counts.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sums: dict[AttributeKey, float] = {}

    def add(self, key: AttributeKey, value: float) -> None:
        with self._lock:
            self._sums[key] = self._sums.get(key, 0) + value

    def observe(self, options: Any = None) -> Iterator[Any]:
        with self._lock:
            found = list(self._sums.items())
        for key, value in found:
            yield Observation(value, dict(key))


def seconds_histogram(meter: Any, name: str, description: str) -> Any:
    """A histogram of durations: in seconds, over :data:`DURATION_BUCKETS`."""
    return meter.create_histogram(
        name,
        unit="s",
        description=description,
        explicit_bucket_boundaries_advisory=DURATION_BUCKETS,
    )


class Instruments:
    """Every instrument graphkeep records with, made once per meter."""

    def __init__(self, meter: Any) -> None:
        self.duration = seconds_histogram(
            meter, DURATION, "Duration of a graphkeep call (every request and retry in it)."
        )
        #: graphkeep.call.requests / graphkeep.put.bytes: counters, summed per call here
        self.requests = Totals()
        self.put_bytes = Totals()
        meter.create_observable_counter(
            CALL_REQUESTS,
            callbacks=[self.requests.observe],
            unit="{request}",
            description="Requests sent to the server by graphkeep calls (per call: over"
            " db.client.operation.duration's count).",
        )
        meter.create_observable_counter(
            PUT_BYTES,
            callbacks=[self.put_bytes.observe],
            unit="By",
            description="Payload bytes written by put and put_writes (per call: over"
            " db.client.operation.duration's count).",
        )
        self.lock_wait = seconds_histogram(
            meter, LOCK_WAIT, "Time spent acquiring a thread's lease (acquired or given up)."
        )
        self.lock_contention = meter.create_counter(
            LOCK_CONTENTION,
            unit="{attempt}",
            description="Attempts to take a thread's lease that found it held.",
        )
        self.watch_lag = seconds_histogram(
            meter, WATCH_LAG, "Time from a checkpoint's creation to its delivery by watch."
        )
        self.append_batch = meter.create_histogram(
            APPEND_BATCH_SIZE,
            unit="{event}",
            description="Events stored by one event-log append.",
            explicit_bucket_boundaries_advisory=BATCH_BUCKETS,
        )
        self.hot_reads = meter.create_counter(
            HOT_READS,
            unit="{read}",
            description="Checkpoint reads through a Redis hot layer, by outcome (hit, miss,"
            " special, error).",
        )
        self.resume_failures = meter.create_counter(
            RESUME_FAILURES,
            unit="{failure}",
            description="Reads that could not return a thread's state, by reason.",
        )
        self.store_read_failures = meter.create_counter(
            STORE_READ_FAILURES,
            unit="{failure}",
            description="Store calls that refused a stored item (CorruptData), by reason.",
        )


_global_instruments: Instruments | None = None


def _global() -> Instruments:
    # the global meter is a proxy until an SDK is installed: instruments made from it now
    # record into the SDK installed later, so they are made once per process
    global _global_instruments
    if _global_instruments is None:
        _global_instruments = Instruments(metrics.get_meter(SCOPE))
    return _global_instruments


_INERT = frozenset({"ProxyTracerProvider", "NoOpTracerProvider"})
_INERT_METERS = frozenset({"_ProxyMeterProvider", "NoOpMeterProvider"})


_installed = False


def global_sdk_installed() -> bool:
    """Whether the application installed a tracer or meter provider (else every span and
    measurement would be dropped: calls skip telemetry altogether). The API sets a global
    provider once and for all, so a True answer is remembered."""
    global _installed
    if not _installed:
        _installed = (
            type(trace.get_tracer_provider()).__name__ not in _INERT
            or type(metrics.get_meter_provider()).__name__ not in _INERT_METERS
        )
    return _installed


def error_type(exc: BaseException) -> str:
    """``error.type``: the exception's fully qualified class name (builtins: the bare name)."""
    cls = type(exc)
    return (
        cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"
    )


def resume_failure_reason(exc: BaseException) -> str | None:
    """Why a read that raised ``exc`` itself (not a request) could not return state, or None
    when it is not a resume failure (bad input, cancellation)."""
    if isinstance(exc, CorruptData):  # its kind: damaged framing, undecodable, missing
        return exc.kind if exc.kind in REASONS else CORRUPT_DATA
    if isinstance(exc, GraphkeepError) or not isinstance(exc, Exception):
        return None
    if isinstance(exc, LookupError):
        return MISSING_VALUE
    return UNDECODABLE


class _Call:
    __slots__ = ("name", "span", "started", "attributes")

    def __init__(self, name: str, span: Any, started: float, attributes: dict[str, Any]) -> None:
        self.name = name
        self.span = span
        self.started = started
        self.attributes = attributes


class Telemetry:
    """The spans and metrics of one saver, store, cache or event log.

    ``option`` is the user's ``telemetry`` option (:func:`check_telemetry`), ``target`` what
    the backend's executor declared (None: no ``db.*`` attributes beyond the operation).
    """

    def __init__(self, option: Any = None, target: Target | None = None) -> None:
        settings = check_telemetry(option)
        self.enabled = AVAILABLE and settings is not None
        self.settings = settings or Settings()
        self.target = target
        self.base: dict[str, str | int] = {} if target is None else target.attributes()
        #: spans and metrics go to the global providers (skipped while none is installed)
        self.uses_global = self.settings.tracer_provider is None and (
            self.settings.meter_provider is None
        )
        self._by_name: dict[str, dict[str, Any]] = {}
        self._keys: dict[str, AttributeKey] = {}
        self.tracer: Any = None
        self.instruments: Instruments | None = None
        if not self.enabled:
            return
        try:
            provider = self.settings.tracer_provider
            self.tracer = (
                trace.get_tracer(SCOPE) if provider is None else provider.get_tracer(SCOPE)
            )
            meters = self.settings.meter_provider
            self.instruments = _global() if meters is None else Instruments(meters.get_meter(SCOPE))
        except Exception:  # noqa: BLE001 - a broken SDK turns telemetry off, never the saver
            self.enabled = False

    # -- when to record --------------------------------------------------------------

    def active(self) -> bool:
        """Whether this call is recorded: on, and a provider is there to take it."""
        if not self.enabled:
            return False
        if not self.uses_global:
            return True
        try:
            return global_sdk_installed()
        except Exception:  # noqa: BLE001
            return False

    def attributes(self, name: str) -> dict[str, Any]:
        """The attributes of every span and measurement of operation ``name`` (cached)."""
        found = self._by_name.get(name)
        if found is None:
            found = {**self.base, "db.operation.name": name}
            self._by_name[name] = found
        return found

    def key(self, name: str) -> AttributeKey:
        """:meth:`attributes` of ``name`` as the key of a :class:`Totals` sum (cached)."""
        found = self._keys.get(name)
        if found is None:
            found = tuple(self.attributes(name).items())
            self._keys[name] = found
        return found

    def span_name(self, name: str) -> str:
        """``{db.operation.name} {target}`` as the conventions say: the namespace, else the
        server, else the operation alone."""
        target = self.target
        if target is None:
            return name
        if target.namespace:
            return f"{name} {target.namespace}"
        if target.address:
            port = "" if target.port is None else f":{target.port}"
            return f"{name} {target.address}{port}"
        return name

    # -- calls -----------------------------------------------------------------------

    def observe(
        self,
        name: str,
        op: Op[T],
        *,
        thread_id: Any = None,
        read: bool = False,
        local: tuple[type, ...] = (),
        store_read: bool = False,
    ) -> Op[T]:
        """``op`` inside one CLIENT span named for ``name`` (``checkpoint.put``…), measured.

        The span's parent is the context current *now* (the caller's, even when the op
        runs on another thread or event loop). ``read``: a failure of the op's own
        (decoding, corrupt data — not a request's) counts as a resume failure.
        ``store_read``: a :class:`~graphkeep.errors.CorruptData` of the op's own (a stored
        item refused: damaged, or with encryption ``plaintext``, ``unknown_key``,
        ``tampered``) counts in ``graphkeep.store.read.failures`` under its kind.
        ``local``: request types the shell answers itself (not counted as requests).
        """
        if not self.active():
            return op
        try:
            parent = otel_context.get_current()
        except Exception:  # noqa: BLE001
            parent = None
        return self._observed(name, op, parent, thread_id, read, local, store_read)

    def _observed(
        self,
        name: str,
        op: Op[T],
        parent: Any,
        thread_id: Any,
        read: bool,
        local: tuple[type, ...],
        store_read: bool = False,
    ) -> Op[T]:
        call = self._start(name, parent, thread_id)
        skip = (Sleep, Emit, Call, *local)
        requests = 0
        thrown: BaseException | None = None
        try:
            request = next(op)
            while True:
                sent, tallies = each_counted(request)
                if tallies is None and not isinstance(request, skip):
                    requests += 1
                try:
                    result = yield sent
                except GeneratorExit:
                    op.close()
                    raise
                except BaseException as exc:  # a request failed: the op may handle it
                    thrown = exc
                    request = op.throw(exc)
                else:
                    request = op.send(result)
                finally:
                    requests += sum(t[0] for t in tallies or ())
        except StopIteration as stop:
            self._end(call, requests, None, read=False)
            return stop.value  # type: ignore[no-any-return]
        except GeneratorExit:  # the caller stopped reading early: not a failure
            self._end(call, requests, None, read=False)
            raise
        except BaseException as exc:
            from_request = thrown is not None and (
                exc is thrown or exc.__cause__ is thrown or exc.__context__ is thrown
            )
            self._end(call, requests, exc, read=read and not from_request)
            if store_read and not from_request and isinstance(exc, CorruptData):
                self._store_read_failed(call, exc)
            raise

    def _start(self, name: str, parent: Any, thread_id: Any) -> _Call:
        attributes = self.attributes(name)
        span: Any = None
        try:
            span = self.tracer.start_span(
                self.span_name(name), context=parent, kind=SpanKind.CLIENT, attributes=attributes
            )
            if self.settings.thread_ids and thread_id is not None and span.is_recording():
                span.set_attribute(THREAD_ID, str(thread_id))
        except Exception:  # noqa: BLE001 - telemetry never fails a call (the metrics go on)
            pass
        return _Call(name, span, time.perf_counter(), attributes)

    def _end(self, call: _Call, requests: int, exc: BaseException | None, read: bool) -> None:
        seconds = time.perf_counter() - call.started
        attributes = call.attributes
        kind = None if exc is None else error_type(exc)
        if kind is not None:
            attributes = {**attributes, "error.type": kind}
        span = call.span
        if span is not None:
            try:
                if kind is not None and span.is_recording():
                    span.set_attribute("error.type", kind)
                    span.set_status(Status(StatusCode.ERROR, kind))
            except Exception:  # noqa: BLE001
                pass
            try:
                span.end()
            except Exception:  # noqa: BLE001
                pass
        instruments = self.instruments
        if instruments is None:
            return
        try:
            instruments.duration.record(seconds, attributes)
        except Exception:  # noqa: BLE001
            pass
        instruments.requests.add(self.key(call.name), requests)
        reason = resume_failure_reason(exc) if exc is not None and read else None
        if reason is not None:
            try:
                instruments.resume_failures.add(1, {**attributes, REASON: reason})
            except Exception:  # noqa: BLE001
                pass

    def _store_read_failed(self, call: _Call, exc: CorruptData) -> None:
        instruments = self.instruments
        if instruments is None:
            return
        reason = exc.kind if exc.kind in REASONS else CORRUPT_DATA
        attributes = {**call.attributes, "error.type": error_type(exc), REASON: reason}
        try:
            instruments.store_read_failures.add(1, attributes)
        except Exception:  # noqa: BLE001 - telemetry never fails a call
            pass

    # -- measurements of the products' own ---------------------------------------------

    def _measure(
        self, pick: Callable[[Instruments], Any], value: float, name: str, **extra: Any
    ) -> None:
        if self.instruments is None or not self.active():
            return
        try:
            attributes = self.attributes(name)
            pick(self.instruments).record(value, {**attributes, **extra} if extra else attributes)
        except Exception:  # noqa: BLE001
            pass

    def put_bytes(self, name: str, size: int) -> None:
        """``graphkeep.put.bytes``: payload bytes one ``put`` / ``put_writes`` writes."""
        if self.instruments is not None and self.active():
            self.instruments.put_bytes.add(self.key(name), size)

    def append_batch(self, size: int) -> None:
        """``graphkeep.events.append.batch_size``: events in one append."""
        self._measure(lambda i: i.append_batch, size, "events.append")

    def lock_waited(self, seconds: float, acquired: bool) -> None:
        """``graphkeep.lock.wait``: how long acquiring a thread's lease took."""
        self._measure(
            lambda i: i.lock_wait,
            seconds,
            "checkpoint.lock.acquire",
            **{LOCK_ACQUIRED: acquired},
        )

    def lock_contended(self) -> None:
        """``graphkeep.lock.contention``: one attempt found the lease held by another run."""
        if self.instruments is None or not self.active():
            return
        try:
            self.instruments.lock_contention.add(1, self.attributes("checkpoint.lock.acquire"))
        except Exception:  # noqa: BLE001
            pass

    def hot_read(self, outcome: str) -> None:
        """``graphkeep.hot.reads``: one read through the hot layer and its outcome."""
        if self.instruments is None or not self.active():
            return
        try:
            attributes = self.attributes("checkpoint.get_tuple")
            self.instruments.hot_reads.add(1, {**attributes, HOT_OUTCOME: outcome})
        except Exception:  # noqa: BLE001
            pass

    def watch_lag(self, created: Any) -> None:
        """``graphkeep.watch.lag``: now minus a watched checkpoint's ``ts`` (ISO 8601)."""
        if self.instruments is None or not self.active() or not isinstance(created, str):
            return
        try:
            ts = datetime.fromisoformat(created)
            if ts.tzinfo is None:
                ts = ts.replace(tzinfo=timezone.utc)
            lag = max(0.0, (datetime.now(timezone.utc) - ts).total_seconds())
        except ValueError:
            return
        self._measure(lambda i: i.watch_lag, lag, "checkpoint.watch")


def target_of(execute: Any) -> Target | None:
    """The :class:`Target` an executor declares (None for one that declares none)."""
    found = getattr(execute, "target", None)
    return found if isinstance(found, Target) else None
