"""Effects suite: what the effect ledger costs per call, on every backend, in one run.

Per backend (Redis, Redis Cluster, MongoDB, DynamoDB; the scratch spaces of the live suite),
one sync ledger (``graphkeep.connect_effects``) and a function returning a small dict:

- **bare call**: the function called directly (the floor);
- **first call**: ``ledger.run(new_key, fn)`` — claim, run, record: median ms per call and
  store requests per call (a wrapped executor counts them: one per Redis script or command,
  MongoDB command, DynamoDB API call);
- **replay**: the same key again — the claim returns the recorded result: median ms and
  requests per call;
- **overhead**: first call minus bare call, the ledger's price for an effect that happens
  once.

The ledger's target (issue 26): one atomic request per transition — 2 requests for a first
call (claim, record), 1 for a replay. Run it with ``./dev bench --suite effects`` or
``python -m bench.suites.effects`` (``--quick``: fewer calls).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from bench import render
from bench.live_workload import Requests
from bench.render import number, section, table, target_lines, versions
from bench.suites import Options, Skip, Suite
from bench.suites.live import BACKENDS, open_backend

FULL_TURNS = 50  # Options.turns of a full run: calls scale by turns / 50 (--quick: 0.2)
FULL_CALLS = 200
RESULT = {"ticket": 5521, "status": "open", "title": "parcel lost"}


@dataclass
class Column:
    """One backend's figures (None where it could not run, with the reason in errors)."""

    backend: str
    where: str = ""
    calls: int = 0
    bare_us: float | None = None
    first_ms: float | None = None
    first_requests: float | None = None
    replay_ms: float | None = None
    replay_requests: float | None = None
    errors: list[str] = field(default_factory=list)

    @property
    def overhead_ms(self) -> float | None:
        if self.first_ms is None or self.bare_us is None:
            return None
        return self.first_ms - self.bare_us / 1000


def _effect() -> dict[str, Any]:
    return dict(RESULT)


def _timed(call: Callable[[], Any]) -> float:
    started = time.perf_counter()
    call()
    return time.perf_counter() - started


def measure_backend(name: str, options: Options, calls: int) -> Column:
    import graphkeep

    column = Column(name, calls=calls)
    try:
        backend = open_backend(name, options)
        column.where = backend.where
        prefix = f"{backend.key_prefix}-fx-{uuid.uuid4().hex[:6]}"
        with graphkeep.connect_effects(backend.url, key_prefix=prefix) as ledger:
            requests = Requests().wrap(ledger)
            column.bare_us = statistics.median(_timed(_effect) for _ in range(calls)) * 1e6
            keys = [f"order-{i}" for i in range(calls)]
            ledger.run("warm-up", _effect)
            before = requests.count
            firsts = [_timed(partial(ledger.run, k, _effect)) for k in keys]
            column.first_requests = (requests.count - before) / calls
            before = requests.count
            replays = [_timed(partial(ledger.run, k, _effect)) for k in keys]
            column.replay_requests = (requests.count - before) / calls
            column.first_ms = statistics.median(firsts) * 1000
            column.replay_ms = statistics.median(replays) * 1000
            ledger.clear()
    except Exception as exc:  # noqa: BLE001 - a backend that cannot run says why
        column.errors.append(f"{type(exc).__name__}: {exc}")
    return column


def targets(columns: Sequence[Column]) -> list[tuple[str, bool]]:
    measured = [c for c in columns if c.first_requests is not None]
    return [
        (
            "one atomic request per transition: 2 requests for a first call, 1 for a replay,"
            " on every backend",
            bool(measured)
            and all(c.first_requests == 2 and c.replay_requests == 1 for c in measured),
        )
    ]


def markdown(columns: Sequence[Column], where: str) -> str:
    lines = [
        "# graphkeep bench: the effect ledger",
        "",
        f"Where: {where}. Versions: {versions(['graphkeep', 'langgraph'])}.",
        f"Calls per backend: {columns[0].calls if columns else 0} (median per call).",
        "",
    ]
    lines += table(
        [
            "backend",
            "bare call (µs)",
            "first call (ms)",
            "requests / first call",
            "replay (ms)",
            "requests / replay",
            "overhead per effect (ms)",
        ],
        [
            [
                c.backend,
                number(c.bare_us, 2),
                number(c.first_ms, 2),
                number(c.first_requests, 1),
                number(c.replay_ms, 2),
                number(c.replay_requests, 1),
                number(c.overhead_ms, 2),
            ]
            for c in columns
        ],
        "lrrrrrr",
    )
    lines += target_lines(targets(columns))
    lines += section("Notes", [f"{c.backend}: {e}" for c in columns for e in c.errors])
    return "\n".join(lines) + "\n"


def run(
    options: Options, out: Path, chart_too: bool, only: Sequence[str] | None = None
) -> list[Column]:
    """Every backend (``only``: these), report to stdout and ``<out>/effects.md``."""
    calls = max(10, round(FULL_CALLS * min(options.turns / FULL_TURNS, 1.0)))
    chosen = [b for b in BACKENDS if only is None or b in only]
    columns = [measure_backend(name, options, calls) for name in chosen]
    where = "; ".join(f"{c.backend}: {c.where}" for c in columns if c.where)
    render.publish(markdown(columns, where or "no backend reachable"), out, "effects")
    return columns


def unavailable() -> Skip | None:
    return None  # every backend that cannot run says why in the report's notes


SUITE = Suite(
    name="effects",
    title="the effect ledger",
    stored_label="n/a",
    request_label="requests run by the ledger's executor",
    unavailable=unavailable,
    contenders=lambda options: [],
    default_rounds=1,
    run=lambda options, out, chart_too: run(options, out, chart_too),
)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.suites.effects")
    parser.add_argument("--quick", action="store_true", help="a fifth of the calls")
    parser.add_argument("--only", default=None, help=f"comma list of: {', '.join(BACKENDS)}")
    parser.add_argument("--out", default=".bench", help="report directory (default .bench)")
    args = parser.parse_args(argv)
    options = Options(turns=10 if args.quick else FULL_TURNS)
    only = args.only.split(",") if args.only else None
    columns = run(options, Path(args.out), False, only)
    return 0 if all(not c.errors for c in columns) else 1


if __name__ == "__main__":
    sys.exit(main())
