"""``--hot REDIS_URL`` and ``graphkeep hot warm|evict``: the CLI's side of Redis as the hot
layer (:func:`graphkeep.hot_layer`) over a durable saver.

- ``stats`` and ``health`` with ``--hot`` add the layer's part: the hit rate of every process
  sharing that Redis and prefix (the shared totals, ``P:hot1:stats``), and the threads Redis
  holds now (a ``SCAN`` of the thread hashes: names only, no value read) with their bytes
  (``MEMORY USAGE`` of at most :data:`BYTES_SAMPLE` hashes; above that, their average times
  the count, marked as an estimate).
- ``history`` and ``dump`` with ``--hot`` read the thread's head through the layer (what
  ``get_state`` of an app with the layer reads: a hit, or a durable read that fills Redis)
  and say how it went; their rows still come from the durable store byte for byte (the
  layer serves ``get_tuple`` only).
- ``threads`` with ``--hot`` adds, per thread, the bytes Redis holds for it (none: not hot).
- The command's own reads through the layer are not added to the shared totals: the hit rate
  ``stats`` / ``health`` report stays the app's.
- ``hot warm`` reads the head of each namespace of each thread through the layer, so Redis
  holds it; ``hot evict`` drops threads' copies (``UNLINK``; ``--all``: every thread hash of
  the prefix). The durable store is never written.

What the CLI puts in Redis must be what the app would read: the layer here decodes with a
serializer that keeps every stored value byte for byte (no class of the app is imported,
nothing is lost) and, when ``LANGGRAPH_AES_KEY`` is set, encrypts its copies as the app's
``EncryptedSerializer`` does. A thread the key cannot decrypt is an error, never a copy.
"""

from __future__ import annotations

import argparse
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import Any, TextIO
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import graphkeep
from graphkeep.backends.redis.client import sync_client
from graphkeep.checkpoint.ids import normalize_thread_id
from graphkeep.cli.arguments import Commands, add_thread_choice
from graphkeep.cli.batch import report_not_found
from graphkeep.cli.console import (
    EXIT_NOT_FOUND,
    EXIT_OK,
    MASK,
    CliError,
    Opened,
    UsageError,
    human_bytes,
    print_json,
    safe_url,
    table,
)
from graphkeep.cli.endpoints import Endpoint, Native, open_endpoint
from graphkeep.errors import ConfigurationError
from graphkeep.moving.decode import LosslessSerde, cipher

#: the outcomes the layer counts a read as (``HotLayer.reads``, the shared totals)
OUTCOMES = ("hit", "miss", "special", "error")
#: thread hashes whose ``MEMORY USAGE`` a report asks for at most (the rest is estimated)
BYTES_SAMPLE = 100
#: keys per ``SCAN`` call
SCAN_COUNT = 1000
#: keys per pipeline of ``UNLINK`` (``hot evict --all``)
UNLINK_BATCH = 500

HOT_HELP = (
    "Redis of the hot layer (graphkeep.hot_layer) over this durable store: redis://...,"
    " redis+cluster://..., valkey://... (over LangGraph's Postgres saver, ?key_prefix= names"
    " its prefix)"
)


def add_hot_option(parser: argparse.ArgumentParser, *, required: bool = False) -> None:
    parser.add_argument("--hot", metavar="REDIS_URL", required=required, help=HOT_HELP)


def hot_serde() -> Any:
    """Values kept byte for byte (see the module), encrypted when ``LANGGRAPH_AES_KEY`` is."""
    lossless = LosslessSerde(strict=True)
    active = cipher()
    if active is None:
        return lossless
    from langgraph.checkpoint.serde.encrypted import EncryptedSerializer

    return EncryptedSerializer(active, lossless)


def _client_url(url: str) -> str:
    """The Redis URL without the layer's own ``key_prefix`` query option."""
    parts = urlsplit(url)
    pairs = [(n, v) for n, v in parse_qsl(parts.query, keep_blank_values=True) if n != "key_prefix"]
    return urlunsplit(parts._replace(query=urlencode(pairs)))


@dataclass
class HotView(Opened):
    """A durable endpoint, its hot layer (at ``url``) and a Redis client for what the layer
    does not offer (SCAN, MEMORY USAGE, UNLINK with a count, HGET of a namespace's newest id)."""

    endpoint: Endpoint
    layer: Any
    client: Any

    @property
    def prefix(self) -> str:
        return str(self.layer.port.prefix)

    def key(self, thread_id: str) -> str:
        return str(self.layer.port.key(normalize_thread_id(thread_id)))

    def thread_keys(self) -> Iterator[bytes]:
        pattern = self.layer.port.thread_pattern()
        yield from self.client.scan_iter(match=pattern, count=SCAN_COUNT)

    def held(self, key: Any) -> int | None:
        """``MEMORY USAGE`` of ``key``; None when Redis does not hold it."""
        size = self.client.memory_usage(key, samples=0)
        return None if size is None else int(size)

    def memory(self, key: Any) -> int:
        return self.held(key) or 0


@contextmanager
def open_hot(url: str, hot: str, key_prefix: str | None) -> Iterator[HotView]:
    """The durable saver at ``url`` with Redis at ``hot`` as its hot layer; a bad ``--hot``
    (not Redis, over a Redis or SQLite saver, a prefix that is not the saver's) is a usage
    error with the library's message."""
    MASK.remember(hot)
    with open_endpoint(url, key_prefix=key_prefix, serde=hot_serde()) as endpoint:
        saver = endpoint.saver
        try:
            layer: Any = graphkeep.hot_layer(saver, hot)
        except ConfigurationError as exc:
            raise UsageError(f"--hot: {exc}") from exc
        layer.shares = False  # the command's own reads are not the app's hit rate
        try:
            client = sync_client(_client_url(hot))
            try:
                _ping(client, hot)
                yield HotView(hot, endpoint, layer, client)
            finally:
                client.close()
        finally:
            layer.close()


def enter_hot(stack: ExitStack, args: argparse.Namespace) -> HotView | None:
    """The ``--hot`` view of a reading command, entered on ``stack`` before the command
    reads (so a bad ``--hot`` fails first); None without ``--hot``."""
    if not getattr(args, "hot", None):
        return None
    return stack.enter_context(open_hot(args.url, args.hot, args.key_prefix))


class HotUnreachable(CliError):
    """The hot layer's Redis does not answer: one line (``health``: exit code 2)."""


def _ping(client: Any, url: str) -> None:
    """A Redis that does not answer is an error of the command (the layer itself would
    only read the durable store: a CLI asked about Redis says so instead)."""
    try:
        client.ping()
    except Exception as exc:  # noqa: BLE001 - redis-py's errors and graphkeep's alike
        raise HotUnreachable(
            f"the hot layer's Redis at {safe_url(url)} does not answer"
            f" ({type(exc).__name__}: {exc})"
        ) from exc


# -- the report of stats and health ------------------------------------------------------


def hot_report(view: HotView) -> dict[str, Any]:
    """The hit rate of every process (shared totals) and the threads Redis holds now."""
    shared = view.layer.shared_stats()
    reads = {outcome: int(shared.get(outcome, 0)) for outcome in OUTCOMES}
    total = sum(reads.values())
    threads = 0
    measured: list[int] = []
    for key in view.thread_keys():
        threads += 1
        if len(measured) < BYTES_SAMPLE:
            measured.append(view.memory(key))
    estimated = threads > len(measured)
    size = sum(measured)
    if estimated and measured:
        size = round(size / len(measured) * threads)
    return {
        "url": view.label,
        "key_prefix": view.prefix,
        "hit_rate": None if total == 0 else round(reads["hit"] / total, 4),
        "reads": reads,
        "reads_total": total,
        "threads": threads,
        "bytes": size,
        "bytes_measured_threads": len(measured),
        "bytes_estimated": estimated,
    }


def write_hot_report(report: dict[str, Any], out: TextIO) -> None:
    rate = report["hit_rate"]
    reads = report["reads"]
    shown = "no read shared yet" if rate is None else f"hit rate {rate:.1%}"
    counts = ", ".join(f"{reads[o]} {o}" for o in OUTCOMES)
    out.write(
        f"hot layer {report['url']} (prefix {report['key_prefix']}): {shown} of"
        f" {report['reads_total']} read(s) by every process ({counts})\n"
    )
    how = (
        f"estimated from MEMORY USAGE of {report['bytes_measured_threads']} of them"
        if report["bytes_estimated"]
        else "MEMORY USAGE of each"
    )
    out.write(
        f"hot layer holds: {report['threads']} thread(s), {human_bytes(report['bytes'])} ({how})\n"
    )


def read_hot_report(args: argparse.Namespace) -> dict[str, Any] | None:
    """``--hot``'s part of ``stats`` / ``health`` (None without ``--hot``)."""
    if not getattr(args, "hot", None):
        return None
    with open_hot(args.url, args.hot, args.key_prefix) as view:
        return hot_report(view)


# -- reads through the layer -------------------------------------------------------------


def _config(thread_id: str, ns: str, checkpoint_id: str | None = None) -> dict[str, Any]:
    conf: dict[str, Any] = {"thread_id": thread_id, "checkpoint_ns": ns}
    if checkpoint_id:
        conf["checkpoint_id"] = checkpoint_id
    return {"configurable": conf}


def _outcome(counted: Counter[str]) -> str:
    if counted["error"]:
        return "error"
    return next((o for o in OUTCOMES if counted[o]), "none")


def read_through(
    view: HotView, thread_id: str, ns: str, checkpoint_id: str | None = None
) -> dict[str, Any]:
    """One ``get_tuple`` through the layer: how it was served and what Redis holds after."""
    before = Counter(view.layer.reads)
    found = view.layer.get_tuple(_config(thread_id, ns, checkpoint_id))
    outcome = _outcome(Counter(view.layer.reads) - before)
    found_id = None if found is None else str(found.config["configurable"]["checkpoint_id"])
    cached = False
    if found_id is not None:
        port = view.layer.port
        if checkpoint_id is None:
            newest = view.client.hget(view.key(thread_id), port.newest_field(ns))
            cached = newest is not None and newest.decode() == found_id
        else:
            field = port.entry_field(ns, found_id)
            cached = bool(view.client.hexists(view.key(thread_id), field))
    return {
        "checkpoint_ns": ns,
        "checkpoint_id": found_id,
        "read": outcome,
        "cached": cached,
    }


def thread_namespaces(endpoint: Endpoint, thread_id: str) -> list[str] | None:
    """The thread's namespaces, root first (None: no checkpoint); LangGraph's savers: the
    root only (listing theirs reads every checkpoint)."""
    if not isinstance(endpoint, Native):
        return [""]
    inventory = endpoint.call(endpoint.saver.port.inventory(thread_id))
    found = {s.ns for s in inventory.checkpoints}
    if not found:
        return None
    return sorted(found, key=lambda ns: (ns != "", ns))


def thread_hot(
    view: HotView, thread_id: str, ns: str, checkpoint_id: str | None = None
) -> dict[str, Any]:
    """``history`` / ``dump --hot``: the head read through the layer, the thread's bytes."""
    read = read_through(view, thread_id, ns, checkpoint_id)
    return {"url": view.label, **read, "bytes": view.memory(view.key(thread_id))}


def hot_bytes(view: HotView, thread_ids: Sequence[str]) -> list[int | None]:
    """``threads --hot``: the bytes Redis holds for each thread (None: not in Redis)."""
    return [view.held(view.key(thread_id)) for thread_id in thread_ids]


def write_thread_hot(hot: dict[str, Any], out: TextIO) -> None:
    out.write(f"hot layer {hot['url']}: {_read_text(hot)}; {human_bytes(hot['bytes'])} in Redis\n")


def _read_text(read: dict[str, Any]) -> str:
    ns = read["checkpoint_ns"]
    where = f" (ns {ns})" if ns else ""
    if read["checkpoint_id"] is None:
        return f"no checkpoint{where}"
    outcome = {
        "hit": "served from Redis",
        "miss": "read from the durable store",
        "special": "read from the durable store (special write: never cached)",
        "error": "read from the durable store (Redis failed)",
    }.get(read["read"], read["read"])
    state = "in Redis" if read["cached"] else "not in Redis"
    return f"{read['checkpoint_id']}{where} {outcome}, {state}"


# -- graphkeep hot warm | evict ----------------------------------------------------------


def add_hot_commands(commands: Commands) -> None:
    hot = commands.group(
        "hot",
        "hot_command",
        help="Redis as the hot layer: warm threads into it, evict them from it",
        description="Redis as the hot layer (graphkeep.hot_layer) over a durable store:"
        " warm threads into it, evict them from it. The durable store is never written.",
    )

    p = hot.add(
        "warm URL",
        cmd_hot_warm,
        "read threads' latest checkpoints (every namespace) through the hot layer, so Redis"
        " holds them",
        "  graphkeep hot warm mongodb://db/app --hot redis://cache:6379/0 --thread t1 t2\n"
        "  graphkeep hot warm 'dynamodb://app?region=eu-west-1' --hot redis://cache:6379/0 \\\n"
        "      --thread support-42 --json\n"
        "\n"
        "A checkpoint with a special write (an interrupt, an error) is never cached: the\n"
        "layer always reads it from the durable store. Copies expire hot_ttl after their\n"
        "last read (an hour by default). An app whose saver has a state_schema reads copies\n"
        "made without it as misses (and refills them).\n",
    )
    add_hot_option(p, required=True)
    p.add_argument("--thread", nargs="+", required=True, metavar="THREAD", help="these threads")

    p = hot.add(
        "evict URL",
        cmd_hot_evict,
        "drop threads' copies from the hot layer's Redis (the durable store keeps everything)",
        "  graphkeep hot evict mongodb://db/app --hot redis://cache:6379/0 --thread t1 t2\n"
        "  graphkeep hot evict 'dynamodb://app?region=eu-west-1' --hot redis://cache:6379/0 \\\n"
        "      --all --json\n",
    )
    add_hot_option(p, required=True)
    add_thread_choice(p, "every thread hash under the prefix (SCAN + UNLINK)")


def cmd_hot_warm(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    results: list[dict[str, Any]] = []
    missing: list[str] = []
    with open_hot(args.url, args.hot, args.key_prefix) as view:
        label, durable = view.label, view.endpoint.label
        for thread_id in dict.fromkeys(args.thread):
            namespaces = thread_namespaces(view.endpoint, thread_id)
            reads = [read_through(view, thread_id, ns) for ns in namespaces or []]
            if not any(r["checkpoint_id"] for r in reads):
                missing.append(thread_id)
                continue
            results.append(
                {
                    "thread_id": thread_id,
                    "namespaces": reads,
                    "bytes": view.memory(view.key(thread_id)),
                }
            )
    if args.json:
        report = {"url": durable, "hot": label, "key_prefix": view.prefix}
        print_json({**report, "threads": results, "not_found": missing}, out)
    else:
        rows = [
            [r["thread_id"], n["checkpoint_ns"] or '""', n["checkpoint_id"], n["read"], _yes(n)]
            for r in results
            for n in r["namespaces"]
        ]
        if rows:
            table(["THREAD", "NS", "CHECKPOINT", "READ", "IN REDIS"], rows, out)
        for r in results:
            out.write(f"{r['thread_id']}: {human_bytes(r['bytes'])} in Redis\n")
        report_not_found(missing, durable, err)
    return EXIT_NOT_FOUND if missing else EXIT_OK


def _yes(read: dict[str, Any]) -> str:
    if read["cached"]:
        return "yes"
    return "no (special write)" if read["read"] == "special" else "no"


def _evict_keys(view: HotView, keys: Sequence[Any]) -> tuple[int, int]:
    """UNLINK ``keys`` (one command each: a Cluster's keys live in different slots);
    (keys dropped, bytes they used: measured before, for more than BYTES_SAMPLE keys the
    average of the first BYTES_SAMPLE times their number)."""
    measured = [view.memory(k) for k in keys[:BYTES_SAMPLE]]
    size = sum(measured)
    if len(keys) > len(measured) and measured:
        size = round(size / len(measured) * len(keys))
    dropped = 0
    for start in range(0, len(keys), UNLINK_BATCH):
        pipe = view.client.pipeline(transaction=False)
        for key in keys[start : start + UNLINK_BATCH]:
            pipe.unlink(key)
        dropped += sum(int(n or 0) for n in pipe.execute())
    return dropped, size


def cmd_hot_evict(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    with open_hot(args.url, args.hot, args.key_prefix) as view:
        label = view.label
        where = {"url": view.endpoint.label, "hot": label, "key_prefix": view.prefix}
        if args.all:
            keys = list(view.thread_keys())
            dropped, size = _evict_keys(view, keys)
            report: dict[str, Any] = {
                **where,
                "all": True,
                "threads_dropped": dropped,
                "bytes": size,
                "bytes_estimated": len(keys) > BYTES_SAMPLE,
            }
            threads: list[dict[str, Any]] = []
        else:
            threads = []
            for thread_id in dict.fromkeys(args.thread):
                dropped, size = _evict_keys(view, [view.key(thread_id)])
                threads.append({"thread_id": thread_id, "dropped": bool(dropped), "bytes": size})
            report = {**where, "all": False, "threads": threads}
    if args.json:
        print_json(report, out)
    elif args.all:
        more = " (estimated)" if report["bytes_estimated"] else ""
        out.write(
            f"dropped {report['threads_dropped']} thread(s), {human_bytes(report['bytes'])}{more},"
            f" from {label} (prefix {report['key_prefix']}); the durable store is untouched\n"
        )
    else:
        for t in threads:
            what = f"dropped {human_bytes(t['bytes'])}" if t["dropped"] else "nothing in Redis"
            out.write(f"{t['thread_id']}: {what}\n")
        out.write("the durable store is untouched\n")
    return EXIT_OK
