"""Hot suite: Redis as the hot layer (``graphkeep.hot_layer``) over each durable store, and
what it saves the durable store, measured against the same saver without it in one run.

Per durable store (graphkeep's MongoDB and DynamoDB savers, LangGraph's ``PostgresSaver``),
a fresh saver WITHOUT the layer ("plain") and one WITH it ("hot", Redis at ``REDIS_URL``),
one after the other on the same servers, each on its own threads, both workloads in turn:

- **W50**: the W50 chat graph of :mod:`bench.workloads` (2 nodes, ``add_messages``)
  on 50 threads (``--quick``: 5), a few turns each (``graph.invoke`` of one human message),
  the threads interleaved turn by turn;
- **read-heavy**: then, on the same threads, turns "as a UI-driven Agent Server does":
  ``graph.get_state(config)``, a 10-item history page
  (``list(graph.get_state_history(config, limit=10))``) and ``graph.invoke`` of one more
  message;
- **reload**: then the same page shown again with nothing written since (``get_state`` and
  the history page, a few times per thread, after a first view that is not measured — the
  read-heavy turn measures first views): a UI reloading, polling, or a second reader.

Per (store, plain/hot) and workload: the median ms per turn, durable requests per turn and
bytes read from the durable store per turn; for the hot rows also the hit rate of the
layer's reads in that workload (``layer.reads``: hits over hits + misses + special + error)
and the Redis bytes per thread after it (``layer.footprint(thread)``, averaged over the
threads). Then hot vs plain: the requests and bytes saved (%) and the ms ratio.

How the durable side is counted (the hot layer's key-only probes included: they run on the
same executor or connection as the saver's own reads):

- **graphkeep's savers** (MongoDB, DynamoDB): the saver's executor is wrapped (as
  :class:`bench.live_workload.Requests` does); a request is one executor call (one
  MongoDB command, one DynamoDB API call; the executor's own retries are not counted).
  Bytes read: what each call returned — for MongoDB the BSON size (``bson.encode``) of every
  document returned (write acknowledgements count 0); for DynamoDB the size of every item in
  the response (``Item``, ``Items``, ``Responses``, ``Attributes``) by AWS's item-size rules
  (attribute name bytes + value bytes: strings in UTF-8, binaries as they are, a number one
  byte per two digits plus one, 1 for a boolean or null, 3 plus the elements for a list or
  map) — an approximation of what DynamoDB reads, not of the HTTP bytes.
- **LangGraph's PostgresSaver**: its psycopg connection is opened with a cursor class of
  ours (``cursor_factory``) that counts every SQL statement executed (``execute``: one;
  ``executemany``: one per parameter set) and, after each ``execute``, the bytes of the
  result's values as they came over the wire (the sum of the lengths of
  ``PGresult.get_value`` over every row and column; NULL counts 0). ``put``'s statements run
  in a pipeline: they are counted as statements (fewer round trips than statements) and
  return no rows, so no bytes.

The issue's targets (27): payload reads from the durable store go to 0 for a hot thread;
durable requests per turn down by at least 50% on the read-heavy turn. Both are judged on the
read-heavy turn and on the reload of every store and printed met or MISSED as measured. Run it with
``./dev bench --suite hot`` or ``python -m bench.suites.hot`` (``--quick``: 5
threads, 2 + 2 turns each instead of 4 + 4).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from langchain_core.runnables import RunnableConfig

from bench import render
from bench.capacity import item_size
from bench.render import number, section, table, target_lines, versions
from bench.suites import Options, Skip, Suite
from bench.workloads import WORKLOADS, human_message
from graphkeep.errors import mask_url

BACKENDS = ("mongodb", "dynamodb", "postgres")
MODES = ("plain", "hot")
FULL_TURNS = 50  # Options.turns of a full run (--quick: 10)
#: threads, W50 turns and read-heavy turns per thread (full run, quick run)
THREADS = (50, 5)
W50_TURNS = (4, 2)
READ_TURNS = (4, 2)
HISTORY_PAGE = 10
MONGODB_DATABASE = "graphkeep_bench_hot"
DYNAMODB_TABLE = "graphkeep_bench_hot"
#: the issue's target: durable requests per read-heavy turn down by at least this much
REQUESTS_CUT = 50.0
#: the parts of a read-heavy turn, in order
PARTS = ("get_state", "history", "invoke")
#: reloads per thread after the read-heavy turns (full run, quick run): a page showing the
#: thread again with nothing written in between (get_state + the history page)
RELOADS = (3, 2)
RELOAD_PARTS = ("get_state", "history")


# --------------------------------------------------------------------------- counting


class Meter:
    """Durable requests and bytes read (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.requests = 0
        self.bytes = 0

    def add(self, requests: int, read: int) -> None:
        with self._lock:
            self.requests += requests
            self.bytes += read

    def snapshot(self) -> tuple[int, int]:
        with self._lock:
            return self.requests, self.bytes

    def wrap(self, owner: Any, size: Callable[[Any], int]) -> None:
        """Count every call of ``owner``'s executor and ``size`` what it returns."""
        inner = owner._execute

        def counted(request: Any) -> Any:
            result = inner(request)
            self.add(1, size(result))
            return result

        owner._execute = counted


def mongodb_size(result: Any) -> int:
    """BSON bytes of the documents a MongoDB request returned (0 for anything else)."""
    import bson

    if isinstance(result, Mapping):
        return len(bson.encode(result))
    if isinstance(result, list):
        return sum(len(bson.encode(doc)) for doc in result if isinstance(doc, Mapping))
    return 0


def dynamodb_size(response: Any) -> int:
    """Bytes of the items in a DynamoDB response (:func:`item_size` each)."""
    if not isinstance(response, Mapping):
        return 0
    items: list[Any] = list(response.get("Items") or [])
    for key in ("Item", "Attributes"):
        if response.get(key):
            items.append(response[key])
    responses = response.get("Responses")
    if isinstance(responses, Mapping):  # BatchGetItem: table -> items
        for found in responses.values():
            items.extend(found or [])
    elif isinstance(responses, list):  # TransactGetItems: [{"Item": ...}]
        items.extend(r.get("Item") for r in responses if isinstance(r, Mapping))
    return sum(item_size(item) for item in items if item)


def counting_cursor(meter: Meter) -> type[Any]:
    """A psycopg cursor class counting statements and result bytes into ``meter``."""
    import psycopg

    class Counted(psycopg.Cursor[Any]):
        def execute(self, *args: Any, **kwargs: Any) -> Any:
            result = super().execute(*args, **kwargs)
            meter.add(1, _result_bytes(self.pgresult))
            return result

        def executemany(self, query: Any, params_seq: Any, **kwargs: Any) -> None:
            params = list(params_seq)
            super().executemany(query, params, **kwargs)
            meter.add(len(params), 0)

    return Counted


def _result_bytes(result: Any) -> int:
    if result is None:
        return 0
    rows, columns = result.ntuples, result.nfields
    values = (result.get_value(r, c) for r in range(rows) for c in range(columns))
    return sum(len(v) for v in values if v is not None)


# --------------------------------------------------------------------------- the durables


def redis_url() -> str:
    return os.environ.get("REDIS_URL", "redis://127.0.0.1:16379/0")


def postgres_url() -> str:
    return os.environ.get(
        "POSTGRES_URL", "postgresql://graphkeep:graphkeep@127.0.0.1:15432/graphkeep"
    )


@dataclass
class Durable:
    saver: Any
    meter: Meter
    prefix: str
    where: str


@contextmanager
def _graphkeep_durable(name: str, prefix: str) -> Iterator[Durable]:
    import graphkeep

    size: Callable[[Any], int]
    if name == "mongodb":
        from bench.suites.mongodb import mongodb_url

        parts = urlsplit(mongodb_url())  # the bench's own database, whatever the URL names
        url = urlunsplit(parts._replace(path=f"/{MONGODB_DATABASE}"))
        size = mongodb_size
    else:
        from bench.suites.dynamodb import local_credentials, table_url

        local_credentials()
        url, size = table_url(DYNAMODB_TABLE), dynamodb_size
    meter = Meter()
    with graphkeep.connect(url, key_prefix=prefix) as saver:
        meter.wrap(saver, size)
        yield Durable(saver, meter, prefix, mask_url(url))


@contextmanager
def _postgres_durable(prefix: str) -> Iterator[Durable]:
    import psycopg
    from langgraph.checkpoint.postgres import PostgresSaver
    from psycopg import sql
    from psycopg.rows import dict_row

    base = postgres_url()
    schema = f"gk_bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(base, autocommit=True, connect_timeout=5) as admin:
        admin.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
        try:
            joiner = "&" if "?" in base else "?"
            url = f"{base}{joiner}options=-csearch_path%3D{schema}"
            meter = Meter()
            with psycopg.Connection.connect(
                url,
                autocommit=True,
                prepare_threshold=0,
                row_factory=dict_row,
                cursor_factory=counting_cursor(meter),
            ) as conn:
                saver = PostgresSaver(conn)
                saver.setup()
                yield Durable(saver, meter, prefix, f"{mask_url(base)} (schema {schema})")
        finally:
            admin.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))


@contextmanager
def open_durable(name: str, prefix: str) -> Iterator[Durable]:
    """A fresh sync durable saver of ``name`` with its requests counted."""
    if name == "postgres":
        with _postgres_durable(prefix) as durable:
            yield durable
    elif name in ("mongodb", "dynamodb"):
        with _graphkeep_durable(name, prefix) as durable:
            yield durable
    else:
        raise ValueError(f"unknown backend {name!r}; known: {', '.join(BACKENDS)}")


def prepare(name: str) -> None:
    """Drop the bench's scratch database / table of ``name`` (fresh for this run)."""
    if name == "mongodb":
        from bench.suites.mongodb import mongo_client, scratch_database

        client = mongo_client()
        try:
            scratch_database(client, MONGODB_DATABASE, False)
        finally:
            client.close()
    elif name == "dynamodb":
        from bench.suites.dynamodb import drop_table, dynamodb_client

        drop_table(dynamodb_client(), DYNAMODB_TABLE)


def cleanup(name: str) -> None:
    """Drop what the bench wrote to ``name`` (Postgres: its schema is dropped already)."""
    if name == "mongodb":
        from bench.suites.mongodb import mongo_client

        client = mongo_client()
        try:
            client.drop_database(MONGODB_DATABASE)
        finally:
            client.close()
    elif name == "dynamodb":
        from bench.suites.dynamodb import drop_table, dynamodb_client

        drop_table(dynamodb_client(), DYNAMODB_TABLE)


# --------------------------------------------------------------------------- measuring


@dataclass
class Phase:
    """One workload of one row: per-turn samples and totals."""

    turns: int = 0
    samples_ms: list[float] = field(default_factory=list)
    requests: int = 0
    read: int = 0
    reads: Counter[str] = field(default_factory=Counter)
    #: read-heavy turns only: part -> [requests, bytes] summed over the turns
    parts: dict[str, list[int]] = field(default_factory=dict)
    footprint: float | None = None

    @property
    def ms(self) -> float | None:
        return statistics.median(self.samples_ms) if self.samples_ms else None

    @property
    def requests_per_turn(self) -> float | None:
        return self.requests / self.turns if self.turns else None

    @property
    def bytes_per_turn(self) -> float | None:
        return self.read / self.turns if self.turns else None

    @property
    def hit_rate(self) -> float | None:
        total = sum(self.reads.values())
        return self.reads["hit"] / total if total else None

    def part(self, name: str) -> tuple[float, float] | None:
        """Requests and bytes per turn of one part of a read-heavy turn."""
        if not self.turns or name not in self.parts:
            return None
        requests, read = self.parts[name]
        return requests / self.turns, read / self.turns


@dataclass
class Row:
    backend: str
    mode: str
    where: str = ""
    threads: int = 0
    w50: Phase = field(default_factory=Phase)
    read_heavy: Phase = field(default_factory=Phase)
    reload: Phase = field(default_factory=Phase)
    errors: list[str] = field(default_factory=list)


def _config(thread: str) -> RunnableConfig:
    return RunnableConfig(configurable={"thread_id": thread})


def _page(graph: Any, config: RunnableConfig) -> list[Any]:
    return list(graph.get_state_history(config, limit=HISTORY_PAGE))


def _reads(layer: Any) -> Counter[str]:
    return Counter(layer.reads) if layer is not None else Counter()


def _footprint(layer: Any, threads: Sequence[str]) -> float | None:
    if layer is None:
        return None
    return float(statistics.mean(layer.footprint(t) for t in threads))


def run_row(
    row: Row,
    durable: Durable,
    layer: Any,
    threads: Sequence[str],
    w50: int,
    reads: int,
    reloads: int,
) -> None:
    """The workloads on ``threads`` through ``layer`` (None: the durable saver alone)."""
    meter = durable.meter
    graph = WORKLOADS[0].build(layer if layer is not None else durable.saver)
    warm = _config(f"{durable.prefix}-warm-up")  # first-use costs, not measured
    graph.invoke({"messages": [human_message(0)]}, warm)
    graph.get_state(warm)
    list(graph.get_state_history(warm, limit=HISTORY_PAGE))
    graph.invoke({"messages": [human_message(1)]}, warm)
    graph.get_state(warm)

    phase = row.w50
    start_reads = _reads(layer)
    for turn in range(1, w50 + 1):
        for thread in threads:
            requests, read = meter.snapshot()
            started = time.perf_counter()
            graph.invoke({"messages": [human_message(turn)]}, _config(thread))
            phase.samples_ms.append((time.perf_counter() - started) * 1000)
            after = meter.snapshot()
            phase.requests += after[0] - requests
            phase.read += after[1] - read
            phase.turns += 1
    phase.reads = _reads(layer) - start_reads
    phase.footprint = _footprint(layer, threads)

    turns = list(range(w50 + 1, w50 + reads + 1))
    _parted(row.read_heavy, meter, layer, graph, threads, turns, PARTS)
    for thread in threads:  # the first view after the last turn's writes: a read-heavy
        graph.get_state(_config(thread))  # turn's reads measure that one (miss, copy)
        _page(graph, _config(thread))
    _parted(row.reload, meter, layer, graph, threads, [0] * reloads, RELOAD_PARTS)


def _parted(
    phase: Phase,
    meter: Meter,
    layer: Any,
    graph: Any,
    threads: Sequence[str],
    turns: Sequence[int],
    parts: Sequence[str],
) -> None:
    """Turns of ``parts`` (get_state, the history page, an invoke of message ``turn``) on
    every thread, measured part by part."""
    phase.parts = {name: [0, 0] for name in parts}
    start_reads = _reads(layer)
    for turn in turns:
        for thread in threads:
            config = _config(thread)
            steps: dict[str, Callable[[], Any]] = {
                "get_state": partial(graph.get_state, config),
                "history": partial(_page, graph, config),
                "invoke": partial(graph.invoke, {"messages": [human_message(turn)]}, config),
            }
            took = 0.0
            for name in parts:
                requests, read = meter.snapshot()
                started = time.perf_counter()
                steps[name]()
                took += time.perf_counter() - started
                after = meter.snapshot()
                phase.parts[name][0] += after[0] - requests
                phase.parts[name][1] += after[1] - read
            phase.samples_ms.append(took * 1000)
            phase.turns += 1
    phase.requests = sum(p[0] for p in phase.parts.values())
    phase.read = sum(p[1] for p in phase.parts.values())
    phase.reads = _reads(layer) - start_reads
    phase.footprint = _footprint(layer, threads)


def _forget(layer: Any, prefix: str, threads: Sequence[str]) -> None:
    """Drop the row's copies and shared counts from Redis."""
    import redis

    for thread in threads:
        layer.evict(thread)
    client = redis.Redis.from_url(redis_url())
    try:
        client.delete(f"{prefix}:hot1:stats")
    finally:
        client.close()


def measure_row(name: str, mode: str, threads: int, w50: int, reads: int, reloads: int) -> Row:
    import graphkeep

    row = Row(name, mode, threads=threads)
    prefix = f"bench-hot-{mode}-{uuid.uuid4().hex[:6]}"
    names = [f"{prefix}-t{i}" for i in range(threads)]
    try:
        with open_durable(name, prefix) as durable:
            row.where = durable.where
            if mode == "plain":
                run_row(row, durable, None, names, w50, reads, reloads)
                return row
            layer = graphkeep.hot_layer(durable.saver, redis_url(), key_prefix=prefix)
            try:
                run_row(row, durable, layer, names, w50, reads, reloads)
            finally:
                try:
                    _forget(layer, prefix, [*names, f"{prefix}-warm-up"])
                finally:
                    layer.close()
    except Exception as exc:  # noqa: BLE001 - a row that cannot run says why
        row.errors.append(f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}")
    return row


def measure_backend(name: str, options: Options) -> list[Row]:
    quick = options.turns < FULL_TURNS
    threads, w50, reads = THREADS[quick], W50_TURNS[quick], READ_TURNS[quick]
    reloads = RELOADS[quick]
    try:
        prepare(name)
    except Exception as exc:  # noqa: BLE001 - the backend's rows say why
        failed = f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
        return [Row(name, mode, threads=threads, errors=[failed]) for mode in MODES]
    try:
        return [measure_row(name, mode, threads, w50, reads, reloads) for mode in MODES]
    finally:
        try:
            cleanup(name)
        except Exception:  # noqa: BLE001, S110 - leftovers of a scratch space are harmless
            pass


# --------------------------------------------------------------------------- report


def _pair(rows: Sequence[Row], backend: str) -> tuple[Row | None, Row | None]:
    by = {(r.backend, r.mode): r for r in rows if not r.errors}
    return by.get((backend, "plain")), by.get((backend, "hot"))


def _cut(before: float | None, after: float | None) -> float | None:
    """How much smaller ``after`` is than ``before``, in % (negative: larger)."""
    if before is None or after is None or before == 0:
        return None
    return (before - after) / before * 100


def _ratio(hot: float | None, plain: float | None) -> float | None:
    if hot is None or plain is None or plain == 0:
        return None
    return hot / plain


def _percent(value: float | None) -> str:
    return "n/a" if value is None else f"{value * 100:.0f}%"


def _parts(phase: Phase) -> str:
    found = [(name, phase.part(name)) for name in PARTS]
    return ", ".join(f"{name} {p[1]:,.0f} B" for name, p in found if p is not None)


def targets(rows: Sequence[Row]) -> list[tuple[str, bool]]:
    out: list[tuple[str, bool]] = []
    for backend in dict.fromkeys(r.backend for r in rows):
        plain, hot = _pair(rows, backend)
        if plain is None or hot is None:
            continue
        heavy = hot.read_heavy
        read = heavy.bytes_per_turn or 0.0
        out.append(
            (
                f"{backend}: payload reads from the durable store -> 0 for a hot thread"
                f" (read-heavy turn): {read:,.0f} B/turn read ({_parts(heavy)})",
                read == 0,
            )
        )
        cut = _cut(plain.read_heavy.requests_per_turn, heavy.requests_per_turn)
        out.append(
            (
                f"{backend}: durable requests per read-heavy turn down by >= {REQUESTS_CUT:.0f}%"
                f" with hot: {number(plain.read_heavy.requests_per_turn, 2)} ->"
                f" {number(heavy.requests_per_turn, 2)} ({number(cut, 0)}%)",
                cut is not None and cut >= REQUESTS_CUT,
            )
        )
        reload = hot.reload
        served = sum(reload.reads.values())
        out.append(
            (
                f"{backend}: payload reads from the durable store -> 0 for a hot thread"
                f" (reload, nothing written since): {reload.reads['hit']} of {served} reads"
                " served from Redis; durable bytes per reload"
                f" {number(plain.reload.bytes_per_turn, 0)} ->"
                f" {number(reload.bytes_per_turn, 0)} (the key-only reads' ids and indexes)",
                served > 0 and reload.reads["hit"] == served,
            )
        )
        cut = _cut(plain.reload.requests_per_turn, reload.requests_per_turn)
        out.append(
            (
                f"{backend}: durable requests per reload down by >= {REQUESTS_CUT:.0f}% with"
                f" hot: {number(plain.reload.requests_per_turn, 2)} ->"
                f" {number(reload.requests_per_turn, 2)} ({number(cut, 0)}%)",
                cut is not None and cut >= REQUESTS_CUT,
            )
        )
    return out


def markdown(rows: Sequence[Row]) -> str:
    where = "; ".join(dict.fromkeys(f"{r.backend}: {r.where}" for r in rows if r.where))
    first = rows[0] if rows else Row("", "")
    lines = [
        "# graphkeep bench: Redis as the hot layer",
        "",
        f"Where: {where or 'no backend reachable'}; Redis (hot rows): {mask_url(redis_url())}."
        f" Versions: {versions(['graphkeep', 'langgraph', 'langgraph-checkpoint-postgres'])}.",
        f"Threads per row: {first.threads}; W50: {first.w50.turns} turns in all (invoke);"
        f" read-heavy: {first.read_heavy.turns} turns in all (get_state + a {HISTORY_PAGE}-item"
        f" history page + invoke); reload: {first.reload.turns} in all (get_state + the"
        " history page, nothing written since). Median ms per turn; requests and bytes are"
        " the durable store's (the hot layer's key-only reads included).",
        "",
    ]
    lines += table(
        [
            "backend",
            "hot",
            "workload",
            "ms / turn",
            "durable requests / turn",
            "durable bytes read / turn",
            "hit rate",
            "Redis bytes / thread",
        ],
        [
            [
                r.backend,
                "yes" if r.mode == "hot" else "no",
                label,
                number(phase.ms, 2),
                number(phase.requests_per_turn, 2),
                number(phase.bytes_per_turn, 0),
                _percent(phase.hit_rate) if r.mode == "hot" else "-",
                number(phase.footprint, 0) if r.mode == "hot" else "-",
            ]
            for r in rows
            if not r.errors
            for label, phase in (
                ("W50", r.w50),
                ("read-heavy", r.read_heavy),
                ("reload", r.reload),
            )
        ],
        "lllrrrrr",
    )
    lines += ["", "Hot vs plain (same store, same run):", ""]
    ratios: list[list[str]] = []
    for backend in dict.fromkeys(r.backend for r in rows):
        plain, hot = _pair(rows, backend)
        if plain is None or hot is None:
            continue
        for label, p, h in (
            ("W50", plain.w50, hot.w50),
            ("read-heavy", plain.read_heavy, hot.read_heavy),
            ("reload", plain.reload, hot.reload),
        ):
            ratios.append(
                [
                    backend,
                    label,
                    number(_cut(p.requests_per_turn, h.requests_per_turn), 0),
                    number(_cut(p.bytes_per_turn, h.bytes_per_turn), 0),
                    number(_ratio(h.ms, p.ms), 2),
                ]
            )
    lines += table(
        ["backend", "workload", "requests / turn cut (%)", "bytes read cut (%)", "ms ratio"],
        ratios,
        "llrrr",
    )
    lines += ["", "Read-heavy turn by part (durable requests / bytes read per turn):", ""]
    lines += table(
        ["backend", "hot", *PARTS],
        [
            [
                r.backend,
                "yes" if r.mode == "hot" else "no",
                *[
                    "n/a"
                    if (cell := r.read_heavy.part(name)) is None
                    else f"{cell[0]:.2f} / {cell[1]:,.0f}"
                    for name in PARTS
                ],
            ]
            for r in rows
            if not r.errors
        ],
        "llrrr",
    )
    lines += target_lines(targets(rows))
    lines += section(
        "Notes",
        [
            "the layer serves get_tuple (get_state, invoke's first read) and history pages from"
            " Redis after one key-only durable request each; every write goes to the durable"
            " store unchanged and Redis is filled by reads only: the first reads after a turn's"
            " writes are misses (the durable read alone: a put makes Redis forget the newest"
            " copy), so a turn that writes every time gains bytes on invoke's read only, and a"
            " reload gains all",
            *[f"{r.backend} {r.mode}: {e}" for r in rows for e in r.errors],
        ],
    )
    return "\n".join(lines) + "\n"


def run(
    options: Options, out: Path, chart_too: bool, only: Sequence[str] | None = None
) -> list[Row]:
    """Every store (``only``, else ``options.backends``, else all): report to stdout and
    ``<out>/hot.md``."""
    wanted = only or options.backends or BACKENDS
    rows = [row for name in BACKENDS if name in wanted for row in measure_backend(name, options)]
    render.publish(markdown(rows), out, "hot")
    return rows


def unavailable() -> Skip | None:
    return None  # every store that cannot run says why in the report's notes


SUITE = Suite(
    name="hot",
    title="Redis as the hot layer",
    stored_label="n/a",
    request_label="durable requests: executor calls (graphkeep), SQL statements (Postgres)",
    unavailable=unavailable,
    contenders=lambda options: [],
    default_rounds=1,
    run=lambda options, out, chart_too: run(options, out, chart_too),
)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.suites.hot")
    parser.add_argument("--quick", action="store_true", help="5 threads, 2 + 2 turns each")
    parser.add_argument("--only", default=None, help=f"comma list of: {', '.join(BACKENDS)}")
    parser.add_argument("--out", default=".bench", help="report directory (default .bench)")
    args = parser.parse_args(argv)
    options = Options(turns=10 if args.quick else FULL_TURNS)
    only = args.only.split(",") if args.only else None
    rows = run(options, Path(args.out), False, only)
    return 0 if all(not r.errors for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
