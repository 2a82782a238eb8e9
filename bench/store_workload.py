"""Workload S1 for LangGraph stores (``BaseStore``), independent of any store.

S1 at full size: 1,000 items in 20 namespaces ``("users", "u<n>", "memories")``, each value
``{"text": ..., "category": ..., "score": ...}``; then 2,000 ``get``, 200 filtered
``search`` (one user's namespace, ``category`` equality and ``score`` ``$gt``), 100 semantic
``search`` over every user (``query=``, top 10) and 20 ``list_namespaces``. Everything is
drawn from a seeded generator, so every contender gets the same calls in the same order.

The embedding is local and deterministic: a hashing bag-of-words in 64 dimensions
(:func:`embed`), so no model is downloaded and every store indexes the same vectors.

This module needs only the standard library and ``langgraph``: it also runs as the worker of
a rival store that lives in another virtualenv::

    python -m bench.store_workload --factory pkg.module:open_store --scale 1.0 \\
        --contender DynamoDBStore

printing one ``RESULT_MARK`` line of JSON (:meth:`StoreResult.to_json`).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import json
import math
import random
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass, field
from typing import Any

from bench.probes import Probe

DIMS = 64
RESULT_MARK = "GRAPHKEEP-BENCH-STORE-RESULT "
#: the operation kinds of S1, in the order they run
KINDS = (
    "put",
    "get",
    "search (filter)",
    "search (semantic)",
    "list_namespaces",
    "put (index=False)",
)
TOP_K = 10
#: scores closer than this count as a tie when comparing a top-10 with InMemoryStore's
SCORE_TOLERANCE = 1e-5

WORDS = (
    "coffee tea breakfast lunch dinner vegetarian vegan spicy sweet salty"
    " morning evening weekend holiday travel flight hotel train beach mountain"
    " running cycling swimming yoga football tennis chess music jazz rock"
    " piano guitar novel poetry history science physics biology painting movie"
    " series podcast python rust database cloud laptop phone garden dog"
    " cat birthday family friend meeting deadline report budget invoice"
    " doctor dentist allergy medicine sleep quiet noisy window aisle seat"
).split()
CATEGORIES = ("preference", "fact", "event", "contact", "task")


@dataclass(frozen=True)
class Sizes:
    """How many of each call one run of S1 makes (full size: :meth:`full`)."""

    items: int
    namespaces: int
    gets: int
    searches: int
    semantic: int
    list_namespaces: int

    @classmethod
    def full(cls) -> Sizes:
        return cls(1000, 20, 2000, 200, 100, 20)

    @classmethod
    def scaled(cls, scale: float, data: int = 1) -> Sizes:
        """S1 scaled down (``scale`` < 1) with at least one call of each kind; ``data`` > 1
        stores that many times the items in as many times the namespaces (S10: ``data=10``)
        and makes the same calls, to show how each operation grows with the data."""
        f = cls.full()
        return cls(
            items=max(f.namespaces * data, round(f.items * scale * data)),
            namespaces=f.namespaces * data,
            gets=max(1, round(f.gets * scale)),
            searches=max(1, round(f.searches * scale)),
            semantic=max(1, round(f.semantic * scale)),
            list_namespaces=max(1, round(f.list_namespaces * scale)),
        )

    @property
    def label(self) -> str:
        """``S1``, or ``S10`` for ten times its data."""
        return f"S{max(1, self.namespaces // self.full().namespaces)}"

    def calls(self, kind: str) -> int:
        return {
            "put": self.items,
            "get": self.gets,
            "search (filter)": self.searches,
            "search (semantic)": self.semantic,
            "list_namespaces": self.list_namespaces,
            "put (index=False)": self.gets // 4,
        }[kind]


def _tokens(text: str) -> list[str]:
    return [t for t in "".join(c if c.isalnum() else " " for c in text.lower()).split() if t]


def embed(texts: Sequence[str]) -> list[list[float]]:
    """Hashing bag-of-words: each word adds +-1 to one of 64 buckets; unit length."""
    out: list[list[float]] = []
    for text in texts:
        vector = [0.0] * DIMS
        for token in _tokens(text):
            digest = hashlib.blake2b(token.encode(), digest_size=8).digest()
            vector[digest[0] % DIMS] += 1.0 if digest[1] & 1 else -1.0
        norm = math.sqrt(sum(v * v for v in vector)) or 1.0
        out.append([v / norm for v in vector])
    return out


def index_config() -> dict[str, Any]:
    """The ``index`` every contender gets (LangGraph's ``IndexConfig``)."""
    return {"dims": DIMS, "embed": embed, "fields": ["text"]}


# --------------------------------------------------------------------------- the calls


@dataclass(frozen=True)
class Calls:
    """Every call of one S1 run, drawn from a seeded generator."""

    puts: list[tuple[tuple[str, ...], str, dict[str, Any]]]
    gets: list[tuple[tuple[str, ...], str]]
    searches: list[tuple[tuple[str, ...], dict[str, Any]]]
    queries: list[str]
    prefixes: list[tuple[str, ...]]
    #: new items put with ``index=False`` (nothing to embed), after every other phase
    plain_puts: list[tuple[tuple[str, ...], str, dict[str, Any]]]


def namespace(user: int) -> tuple[str, ...]:
    return ("users", f"u{user}", "memories")


def calls(sizes: Sizes, seed: int = 1) -> Calls:
    rng = random.Random(seed)

    def sentence(n: int) -> str:
        return " ".join(rng.choice(WORDS) for _ in range(n))

    puts = [
        (
            namespace(i % sizes.namespaces),
            f"m{i}",
            {
                "text": f"{sentence(8)} ({i})",
                "category": rng.choice(CATEGORIES),
                # integers: DynamoDBStore cannot store floats (see the suite's notes)
                "score": rng.randrange(1000),
            },
        )
        for i in range(sizes.items)
    ]
    gets = [(ns, key) for ns, key, _ in (rng.choice(puts) for _ in range(sizes.gets))]
    searches = [
        (
            namespace(rng.randrange(sizes.namespaces)),
            {"category": rng.choice(CATEGORIES), "score": {"$gt": rng.randrange(600)}},
        )
        for _ in range(sizes.searches)
    ]
    queries = [sentence(3) for _ in range(sizes.semantic)]
    prefixes: list[tuple[str, ...]] = [
        ("users",) if n % 2 == 0 else ("users", f"u{rng.randrange(sizes.namespaces)}")
        for n in range(sizes.list_namespaces)
    ]
    plain_puts = [
        (ns, f"p{i}", value)
        for i, (ns, _, value) in enumerate(
            rng.choice(puts) for _ in range(sizes.calls("put (index=False)"))
        )
    ]
    return Calls(puts, gets, searches, queries, prefixes, plain_puts)


# --------------------------------------------------------------------------- results


@dataclass
class OpResult:
    """One operation kind for one contender: timings, requests, answers (or the failure)."""

    calls: int = 0
    ms: list[float] = field(default_factory=list)
    #: round trips over the whole phase (None: not counted, e.g. an in-process store)
    requests: int | None = None
    #: per call: the (namespace, key) ids returned, and their scores for a semantic search
    answers: list[list[str]] = field(default_factory=list)
    scores: list[list[float | None]] = field(default_factory=list)
    error: str | None = None

    @property
    def ms_median(self) -> float | None:
        return statistics.median(self.ms) if self.ms else None

    @property
    def requests_per_op(self) -> float | None:
        if self.requests is None or not self.calls or self.error:
            return None
        return self.requests / self.calls


@dataclass
class StoreResult:
    contender: str
    ops: dict[str, OpResult] = field(default_factory=dict)
    #: why this contender differs from the others (e.g. semantic search not available)
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> StoreResult:
        ops = {kind: OpResult(**op) for kind, op in data.get("ops", {}).items()}
        return cls(data["contender"], ops, list(data.get("notes", [])))


@dataclass
class OpenedStore:
    """A store ready for S1 and the probe its client reports round trips to.

    ``semantic``: the store was built with the index (a rival that cannot index on this
    server is opened without it and says why in ``notes``).
    """

    store: Any
    probe: Probe
    semantic: bool = True
    notes: list[str] = field(default_factory=list)


def _ident(item: Any) -> str:
    return "/".join(item.namespace) + "#" + str(item.key)


def _phase(
    result: StoreResult,
    kind: str,
    opened: OpenedStore,
    arguments: Sequence[Any],
    call: Callable[[Any], Any],
    answer: Callable[[Any], tuple[list[str], list[float | None]]] | None = None,
) -> None:
    op = OpResult()
    result.ops[kind] = op
    probe = opened.probe
    probe.take()
    try:
        for argument in arguments:
            started = time.perf_counter()
            out = call(argument)
            op.ms.append((time.perf_counter() - started) * 1000)
            op.calls += 1
            if answer is not None:
                ids, scores = answer(out)
                op.answers.append(ids)
                op.scores.append(scores)
    except Exception as exc:  # noqa: BLE001 - the report says how the store failed
        text = str(exc).splitlines()[0].split(", full error")[0][:160] if str(exc) else ""
        op.error = f"{type(exc).__name__}: {text}"
    if probe.counts_requests:
        op.requests = probe.take().total_requests


def measure_store(opened: OpenedStore, name: str, sizes: Sizes) -> StoreResult:
    """Run S1 on an opened, empty store; one phase per operation kind."""
    work = calls(sizes)
    store = opened.store
    result = StoreResult(name, notes=list(opened.notes))

    def ids(items: Sequence[Any]) -> tuple[list[str], list[float | None]]:
        return [_ident(i) for i in items], [getattr(i, "score", None) for i in items]

    def got(item: Any) -> tuple[list[str], list[float | None]]:
        return ([_ident(item)] if item is not None else []), []

    def listed(namespaces: Sequence[tuple[str, ...]]) -> tuple[list[str], list[float | None]]:
        return sorted("/".join(ns) for ns in namespaces), []

    _phase(result, "put", opened, work.puts, lambda a: store.put(*a))
    _phase(result, "get", opened, work.gets, lambda a: store.get(*a), got)
    _phase(
        result,
        "search (filter)",
        opened,
        work.searches,
        lambda a: store.search(a[0], filter=a[1], limit=TOP_K),
        ids,
    )
    if opened.semantic:
        _phase(
            result,
            "search (semantic)",
            opened,
            work.queries,
            lambda q: store.search(("users",), query=q, limit=TOP_K),
            ids,
        )
    _phase(
        result,
        "list_namespaces",
        opened,
        work.prefixes,
        lambda p: store.list_namespaces(prefix=p, limit=100),
        listed,
    )
    _phase(
        result,
        "put (index=False)",
        opened,
        work.plain_puts,
        lambda a: store.put(*a, index=False),
    )
    return result


def exact_scores(sizes: Sizes) -> list[dict[str, float]]:
    """Per semantic query of S1: every item's cosine similarity, in float64."""
    work = calls(sizes)
    ids = ["/".join(ns) + "#" + key for ns, key, _ in work.puts]
    vectors = embed([value["text"] for _, _, value in work.puts])
    out = []
    for query in embed(work.queries):
        out.append(
            {
                i: sum(a * b for a, b in zip(query, v, strict=True))
                for i, v in zip(ids, vectors, strict=True)
            }
        )
    return out


def same_top_k(ours: OpResult, reference: OpResult, sizes: Sizes) -> bool | None:
    """Whether every semantic top-10 equals the reference's, up to ties.

    Items of equal score (within SCORE_TOLERANCE, by the exact float64 cosine of
    :func:`exact_scores`) may trade places, including at the cut after rank 10; anything
    else must be the same hit at the same rank. ``None``: nothing to compare.
    """
    if ours.error or reference.error or not ours.answers:
        return None
    if len(ours.answers) != len(reference.answers):
        return False
    scores = exact_scores(sizes)
    for got, want, score_of in zip(ours.answers, reference.answers, scores, strict=False):
        if got == want:
            continue
        if len(got) != len(want) or len(set(got)) != len(got):
            return False
        for mine, theirs in zip(got, want, strict=True):
            if mine not in score_of or abs(score_of[mine] - score_of[theirs]) > SCORE_TOLERANCE:
                return False
    return True


# --------------------------------------------------------------------------- worker


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.store_workload")
    parser.add_argument("--factory", required=True, help="module:function -> ContextManager")
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--data", type=int, default=1, help="times S1's data (10: S10)")
    parser.add_argument("--contender", required=True)
    args = parser.parse_args(argv)
    module_name, _, function = args.factory.partition(":")
    factory: Callable[[], AbstractContextManager[OpenedStore]] = getattr(
        importlib.import_module(module_name), function
    )
    with factory() as opened:
        result = measure_store(opened, args.contender, Sizes.scaled(args.scale, args.data))
    print(RESULT_MARK + json.dumps(result.to_json()), flush=True)
    return 0


def parse_worker_output(stdout: str) -> Iterator[dict[str, Any]]:
    for line in reversed(stdout.splitlines()):
        if line.startswith(RESULT_MARK):
            yield json.loads(line[len(RESULT_MARK) :])
            return


if __name__ == "__main__":
    sys.exit(main())
