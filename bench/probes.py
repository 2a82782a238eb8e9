"""Counting what a saver costs: network round trips and bytes sent at the client, calls per
saver method.

A :class:`Probe` is shared by a store client (which reports every round trip with
:meth:`Probe.request`, and the bytes of what it sends) and by the saver (whose public
methods :meth:`Probe.trace` wraps), so each round trip is attributed to the saver call
that made it. Calls
made by the saver on itself (the base ``get_delta_channel_history`` calls
``get_tuple`` once per ancestor) count towards the outer call: the table says what
the LangGraph runtime asked for and what it cost.

For redis-py, :func:`count_round_trips` gives a client connections that
report one request per ``send_packed_command``: a single command, a pipeline
(every command is packed and sent at once) or a script call each count once,
which is one network round trip; the bytes sent are the packed RESP bytes written
on the socket. Connection handshakes (HELLO, CLIENT SETINFO, SELECT) are not
counted: they happen once per pooled connection, not per call.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

#: the BaseCheckpointSaver methods the LangGraph runtime calls
TRACED_METHODS = ("get_tuple", "list", "put", "put_writes", "get_delta_channel_history")
OUTSIDE = "(no saver call)"
#: the thread lease's calls (``saver.lock(...)``'s acquire, release and renewal), as
#: :func:`trace_lease` names them in a tally
LEASE_METHODS = ("lease.acquire", "lease.release", "lease.extend")
#: a lease taken with the run's first read (``saver.exclusive`` where the store folds the
#: two, :meth:`graphkeep.checkpoint.lock.ThreadLock.with_first_read`): counted as a call,
#: its one request being the read's
LEASE_WITH_READ = "lease.with_read"


@dataclass
class Tally:
    """Calls, requests and seconds spent per saver method over one phase of a run.

    Seconds are wall time inside the outer saver calls, summed over threads: the
    runtime overlaps background ``put``/``put_writes`` with node execution, so this
    is the saver's cost, not its share of the turn's latency.
    """

    calls: dict[str, int] = field(default_factory=dict)
    requests: dict[str, int] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    #: capacity units the requests consumed (DynamoDB's WCU and RCU; empty: not counted)
    write_units: dict[str, float] = field(default_factory=dict)
    read_units: dict[str, float] = field(default_factory=dict)
    #: requests per saver method by the store's operation (a client that names them:
    #: the DynamoDB suite's ``Query``, ``PutItem`` ...; empty: not named)
    operations: dict[str, dict[str, int]] = field(default_factory=dict)

    @property
    def total_requests(self) -> int:
        return sum(self.requests.values())

    @property
    def total_seconds(self) -> float:
        return sum(self.seconds.values())

    def to_json(self) -> dict[str, dict[str, Any]]:
        return {
            "calls": dict(self.calls),
            "requests": dict(self.requests),
            "seconds": dict(self.seconds),
            "write_units": dict(self.write_units),
            "read_units": dict(self.read_units),
            "operations": {m: dict(ops) for m, ops in self.operations.items()},
        }

    @classmethod
    def from_json(cls, data: dict[str, dict[str, Any]]) -> Tally:
        return cls(
            dict(data.get("calls", {})),
            dict(data.get("requests", {})),
            dict(data.get("seconds", {})),
            dict(data.get("write_units", {})),
            dict(data.get("read_units", {})),
            {m: dict(ops) for m, ops in data.get("operations", {}).items()},
        )


class Probe:
    """Thread-safe counters of saver calls and the client round trips they make."""

    def __init__(self, counts_requests: bool = True) -> None:
        self.counts_requests = counts_requests
        self._lock = threading.Lock()
        self._local = threading.local()
        self._calls: Counter[str] = Counter()
        self._requests: Counter[str] = Counter()
        self._operations: dict[str, Counter[str]] = {}
        self._seconds: dict[str, float] = {}
        self._total = 0
        self._sent = 0
        #: set by a capacity meter attached to the client (the DynamoDB suite)
        self.counts_capacity = False
        self._write_units: dict[str, float] = {}
        self._read_units: dict[str, float] = {}
        self._units = [0.0, 0.0]

    # -- the client side -------------------------------------------------------------

    def request(self, n: int = 1, sent: int = 0, operation: str | None = None) -> None:
        """Record ``n`` round trips made by the current thread, sending ``sent`` bytes;
        ``operation``: the store's name for them (DynamoDB's ``PutItem``), when known."""
        method = getattr(self._local, "method", None) or OUTSIDE
        with self._lock:
            self._total += n
            self._sent += sent
            self._requests[method] += n
            if operation is not None:
                self._operations.setdefault(method, Counter())[operation] += n

    def consumed(self, read: float = 0.0, write: float = 0.0) -> None:
        """Record capacity units consumed by a request of the current thread."""
        method = getattr(self._local, "method", None) or OUTSIDE
        with self._lock:
            self._read_units[method] = self._read_units.get(method, 0.0) + read
            self._write_units[method] = self._write_units.get(method, 0.0) + write
            self._units[0] += read
            self._units[1] += write

    @property
    def read_units(self) -> float:
        with self._lock:
            return self._units[0]

    @property
    def write_units(self) -> float:
        with self._lock:
            return self._units[1]

    @property
    def total(self) -> int:
        with self._lock:
            return self._total

    @property
    def bytes_sent(self) -> int:
        """Bytes the client sent to the store so far (requests as written, not replies)."""
        with self._lock:
            return self._sent

    # -- the saver side ----------------------------------------------------------------

    @contextmanager
    def _inside(self, method: str, *, call: bool = True) -> Iterator[None]:
        """Mark the current thread as running ``method`` and time it, unless nested.

        ``call``: this is a new call (not the next item of a ``list`` iterator).
        """
        if getattr(self._local, "method", None) is not None:
            yield
            return
        self._local.method = method
        started = time.perf_counter()
        try:
            yield
        finally:
            elapsed = time.perf_counter() - started
            self._local.method = None
            with self._lock:
                self._seconds[method] = self._seconds.get(method, 0.0) + elapsed
                if call:
                    self._calls[method] += 1

    def count(self, method: str) -> None:
        """Count a call of ``method`` made inside another (its requests are that one's)."""
        with self._lock:
            self._calls[method] += 1

    def trace(self, saver: Any) -> Any:
        """Wrap the saver's public methods on the instance (the runtime calls them there)."""
        for name in TRACED_METHODS:
            original = getattr(saver, name, None)
            if original is None:
                continue
            wrapper = (
                self._wrap_iterator(name, original)
                if name == "list"
                else self._wrap(name, original)
            )
            setattr(saver, name, wrapper)
        return saver

    def _wrap(self, name: str, original: Callable[..., Any]) -> Callable[..., Any]:
        def traced(*args: Any, **kwargs: Any) -> Any:
            with self._inside(name):
                return original(*args, **kwargs)

        return traced

    def _wrap_iterator(self, name: str, original: Callable[..., Any]) -> Callable[..., Any]:
        def traced(*args: Any, **kwargs: Any) -> Iterator[Any]:
            with self._inside(name):
                iterator = iter(original(*args, **kwargs))
            return self._drain(name, iterator)

        return traced

    def _drain(self, name: str, iterator: Iterator[Any]) -> Iterator[Any]:
        while True:
            with self._inside(name, call=False):
                try:
                    item = next(iterator)
                except StopIteration:
                    return
            yield item

    # -- phases ------------------------------------------------------------------------

    def take(self) -> Tally:
        """Return the counts since the last ``take`` and start counting afresh."""
        with self._lock:
            tally = Tally(
                dict(self._calls),
                dict(self._requests) if self.counts_requests else {},
                dict(self._seconds),
                {m: u for m, u in self._write_units.items() if u},
                {m: u for m, u in self._read_units.items() if u},
                {m: dict(ops) for m, ops in self._operations.items()}
                if self.counts_requests
                else {},
            )
            self._operations.clear()
            self._write_units.clear()
            self._read_units.clear()
            self._calls.clear()
            self._requests.clear()
            self._seconds.clear()
            return tally


# --------------------------------------------------------------------------- the lease


def trace_lease(saver: Any, probe: Probe | None = None, waits: list[float] | None = None) -> Any:
    """Wrap ``saver.lock`` on the instance (``saver.exclusive`` takes its leases there) so
    that each lease it grants reports to ``probe`` — its sync acquire, release and renewals
    as the calls :data:`LEASE_METHODS`, their round trips attributed to them, and a lease
    taken with the run's first read as :data:`LEASE_WITH_READ` — and appends the seconds
    each acquire took (sync or async, or with the read: the wait for the thread, polls
    included) to ``waits``. Only public API: any backend's saver. Returns the saver."""
    original = saver.lock

    def lock(*args: Any, **kwargs: Any) -> Any:
        lease = original(*args, **kwargs)
        for name in ("acquire", "release", "extend"):
            method = getattr(lease, name)
            if probe is not None:
                method = probe._wrap(f"lease.{name}", method)
            if name == "acquire" and waits is not None:
                method = _timed(method, waits)
            setattr(lease, name, method)
        if waits is not None:
            lease.aacquire = _atimed(lease.aacquire, waits)
        lease.load_op = _with_read(lease.load_op, probe, waits)
        return lease

    saver.lock = lock
    return saver


def _with_read(
    op: Callable[..., Any], probe: Probe | None, waits: list[float] | None
) -> Callable[..., Any]:
    """A lease's ``load_op`` (taken with the run's first read) counted as
    :data:`LEASE_WITH_READ` and timed whole (its wait for the thread, polls included)."""

    def load_op(*args: Any, **kwargs: Any) -> Any:
        if probe is not None:
            probe.count(LEASE_WITH_READ)
        started = time.perf_counter()
        try:
            return (yield from op(*args, **kwargs))
        finally:
            if waits is not None:
                waits.append(time.perf_counter() - started)

    return load_op


def _timed(call: Callable[..., Any], waits: list[float]) -> Callable[..., Any]:
    def timed(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return call(*args, **kwargs)
        finally:
            waits.append(time.perf_counter() - started)

    return timed


def _atimed(call: Callable[..., Any], waits: list[float]) -> Callable[..., Any]:
    async def timed(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return await call(*args, **kwargs)
        finally:
            waits.append(time.perf_counter() - started)

    return timed


# --------------------------------------------------------------------------- redis-py


def count_round_trips(client: Any, probe: Probe) -> Any:
    """Make a ``redis.Redis`` client report each round trip to ``probe``; return the client.

    The client gets a fresh pool with the same settings whose connections count;
    the old pool's connections are closed. Scripts registered on the client keep
    working (they call the client, not a connection).
    """
    old = client.connection_pool
    pool = type(old)(
        connection_class=_counting_connection_class(old.connection_class, probe),
        max_connections=old.max_connections,
        **old.connection_kwargs,
    )
    client.connection_pool = pool
    old.disconnect()
    return client


def _counting_connection_class(base: type[Any], probe: Probe) -> type[Any]:
    class CountingConnection(base):  # type: ignore[misc]
        _graphkeep_handshake = 0

        def on_connect_check_health(self, *args: Any, **kwargs: Any) -> Any:
            self._graphkeep_handshake += 1
            try:
                return super().on_connect_check_health(*args, **kwargs)
            finally:
                self._graphkeep_handshake -= 1

        def on_connect(self, *args: Any, **kwargs: Any) -> Any:
            self._graphkeep_handshake += 1
            try:
                return super().on_connect(*args, **kwargs)
            finally:
                self._graphkeep_handshake -= 1

        def send_packed_command(self, command: Any, check_health: bool = True) -> Any:
            if not self._graphkeep_handshake:
                probe.request(sent=packed_size(command))
            return super().send_packed_command(command, check_health)

    CountingConnection.__name__ = f"Counting{base.__name__}"
    return CountingConnection


def packed_size(command: Any) -> int:
    """Bytes of what redis-py's ``send_packed_command`` writes: one packed string or a list
    of chunks (bytes, memoryview or str, as :meth:`Connection.pack_command` makes them)."""
    chunks = [command] if isinstance(command, (str, bytes, bytearray, memoryview)) else command
    total = 0
    for chunk in chunks:
        total += len(chunk.encode()) if isinstance(chunk, str) else memoryview(chunk).nbytes
    return total


def acount_round_trips(client: Any, probe: Probe) -> Any:
    """:func:`count_round_trips` for a ``redis.asyncio.Redis`` client that has not connected
    yet (the old pool is dropped unused); return the client."""
    old = client.connection_pool
    client.connection_pool = type(old)(
        connection_class=_acounting_connection_class(old.connection_class, probe),
        max_connections=old.max_connections,
        **old.connection_kwargs,
    )
    return client


def _acounting_connection_class(base: type[Any], probe: Probe) -> type[Any]:
    class CountingConnection(base):  # type: ignore[misc]
        _graphkeep_handshake = 0

        async def on_connect_check_health(self, *args: Any, **kwargs: Any) -> Any:
            self._graphkeep_handshake += 1
            try:
                return await super().on_connect_check_health(*args, **kwargs)
            finally:
                self._graphkeep_handshake -= 1

        async def send_packed_command(self, command: Any, check_health: bool = True) -> Any:
            if not self._graphkeep_handshake:
                probe.request(sent=packed_size(command))
            return await super().send_packed_command(command, check_health)

    CountingConnection.__name__ = f"Counting{base.__name__}"
    return CountingConnection
