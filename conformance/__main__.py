"""`python -m conformance [--backend NAME ...]`: the conformance matrix of graphkeep's set-ups.

Exit code 0 when every selected set-up passes every official capability and spec case, else 1.

Rows may be shared out between processes: each `--queue DIR` process claims the next row no
other has claimed (the slowest first) and keeps its result in DIR; `--report DIR` then prints
the one matrix of them all. `./dev test` runs a `--queue` process in each of its two lanes as
that lane's tests end, so the lane done first is not idle while the other runs every row.
"""

from __future__ import annotations

import argparse
import os
import pickle
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from conformance.cleanup import drop_made
from conformance.rules import row_rules
from conformance.runner import SetupReport, render_matrix, render_problems, run_setup
from conformance.setups import Setup, all_setups, enabled_names, hot_setups, selected
from conformance.spec import GROUPS
from conformance.store import CAPABILITIES as STORE_CAPABILITIES
from conformance.store_runner import (
    StoreReport,
    render_store_matrix,
    render_store_problems,
    run_store_setup,
)
from graphkeep.testing.rules import ENV_VARIABLE, parse_rule_sets


def _parser() -> argparse.ArgumentParser:
    known = ", ".join(s.name for s in [*all_setups(), *hot_setups()])
    parser = argparse.ArgumentParser(prog="python -m conformance", description=__doc__)
    parser.add_argument(
        "--backend",
        action="append",
        metavar="NAME",
        help=f"set-up to run (repeatable; known: {known}); default: GRAPHKEEP_SETUPS or "
        f"{','.join(enabled_names())}",
    )
    parser.add_argument(
        "--group", action="append", choices=GROUPS, help="spec group to run (repeatable)"
    )
    parser.add_argument("--no-official", action="store_true", help="skip the official suite")
    parser.add_argument(
        "--capability",
        action="append",
        choices=STORE_CAPABILITIES,
        help="store capability to run (repeatable)",
    )
    parser.add_argument("--no-store", action="store_true", help="skip the STORE section")
    parser.add_argument("--store-only", action="store_true", help="only the STORE section")
    parser.add_argument(
        "--queue",
        metavar="DIR",
        type=Path,
        help="run only the rows no other --queue DIR process has claimed, slowest first, and "
        "keep their results in DIR (see --report)",
    )
    parser.add_argument(
        "--report",
        metavar="DIR",
        type=Path,
        help="print the matrix of the rows --queue DIR processes ran; exit 1 unless every "
        "selected row ran and passed",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="full tracebacks")
    return parser


_STARTED = time.monotonic()


def _progress(message: str) -> None:
    """One line per case as it starts, with the seconds since the run began."""
    print(f"  .. {time.monotonic() - _STARTED:7.1f}s {message}", file=sys.stderr, flush=True)


def _took(name: str, began: float) -> None:
    print(f"   {name}: {time.monotonic() - began:.0f}s", file=sys.stderr, flush=True)


#: the rows of a queue, slowest first (seconds in a `./dev test` run beside the other tests):
#: dynamodb store 391, dynamodb+hot 98, dynamodb 84, mongodb store 80, redis-cluster store 68,
#: redis store 57, mongodb+hot 56, mongodb 50, redis-cluster 11, redis 5; others after them.
#: The valkey rows take what their redis twins take (side by side on a loaded machine: valkey
#: 10, valkey-cluster 27, valkey store 89, valkey-cluster store 153 against redis 31,
#: redis-cluster 66, redis store 88, redis-cluster store 161): each follows its twin
_SLOWEST_FIRST = [
    "dynamodb store",
    "dynamodb+hot",
    "dynamodb",
    "mongodb store",
    "redis-cluster store",
    "valkey-cluster store",
    "redis store",
    "valkey store",
    "mongodb+hot",
    "mongodb",
    "redis-cluster",
    "valkey-cluster",
    "redis",
    "valkey",
]

Report = SetupReport | StoreReport


@dataclass(frozen=True)
class _Row:
    """One row of the matrix: a set-up's checkpoint row or its store row."""

    setup: Setup
    store: bool

    @property
    def name(self) -> str:
        return f"{self.setup.name} store" if self.store else self.setup.name

    @property
    def file(self) -> str:
        return self.name.replace(" ", "-").replace("+", "-plus-")


def _rows(args: argparse.Namespace, setups: list[Setup]) -> list[_Row]:
    """The selected rows in the matrix's order: checkpoint rows, then store rows."""
    rows = [] if args.store_only else [_Row(s, store=False) for s in setups]
    if not args.no_store:
        rows += [_Row(s, store=True) for s in setups if s.hot is None]
    return rows


def _run(row: _Row, args: argparse.Namespace, progress: Callable[[str], None] | None) -> Report:
    rules = f", rules {', '.join(row_rules(row.setup))}" if row_rules(row.setup) else ""
    print(f"== {row.name} ({row.setup.url}{rules})", file=sys.stderr, flush=True)
    began = time.monotonic()
    report: Report
    if row.store:
        report = run_store_setup(row.setup, capabilities=args.capability, progress=progress)
    else:
        report = run_setup(
            row.setup, groups=args.group, with_official=not args.no_official, progress=progress
        )
    drop_made(row.setup.url)  # the row's collections on a MongoDB server (conformance/cleanup.py)
    _took(row.name, began)
    return report


def _claim(queue: Path, row: _Row) -> bool:
    """True for the one process whose mkdir of the row's claim succeeds."""
    try:
        (queue / f"{row.file}.claimed").mkdir()
    except FileExistsError:
        return False
    return True


def _work(
    queue: Path, rows: list[_Row], args: argparse.Namespace, progress: Callable[[str], None] | None
) -> None:
    """Run the rows of the queue nobody has claimed, slowest first; keep each result."""
    queue.mkdir(parents=True, exist_ok=True)
    rank = {name: i for i, name in enumerate(_SLOWEST_FIRST)}
    for row in sorted(rows, key=lambda r: rank.get(r.name, len(rank))):
        if _claim(queue, row):
            report = _run(row, args, progress)
            kept = queue / f"{row.file}.tmp"
            kept.write_bytes(pickle.dumps(report))
            os.replace(kept, queue / f"{row.file}.report")


def _render(reports: list[Report], missing: list[str], verbose: bool) -> int:
    """Print the matrices and the problems; 0 when every row ran and passed."""
    checkpoints = [r for r in reports if isinstance(r, SetupReport)]
    stores = [r for r in reports if isinstance(r, StoreReport)]
    sections = [render_matrix(checkpoints)] if checkpoints else []
    sections += [render_store_matrix(stores)] if stores else []
    print("\n\n".join(sections))
    problems = "\n".join(
        p
        for p in (
            render_problems(checkpoints, verbose=verbose),
            render_store_problems(stores, verbose=verbose),
            "\n".join(f"[{name}] did not finish (its --queue process stopped)" for name in missing),
        )
        if p
    )
    if problems:
        print("\n" + problems)
    passed = all(r.ok for r in reports) and not missing
    return 0 if reports and passed else 1


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        setups = selected(args.backend)
    except KeyError as exc:
        print(exc.args[0], file=sys.stderr)
        return 2
    try:  # each row runs under its set-up's rules and these (conformance/rules.py)
        parse_rule_sets(None)
    except pytest.UsageError as exc:
        print(f"${ENV_VARIABLE}: {exc}", file=sys.stderr)
        return 2
    progress = _progress if args.verbose else None
    rows = _rows(args, setups)
    if args.queue is not None:
        _work(args.queue, rows, args, progress)
        return 0
    if args.report is not None:
        reports: list[Report] = []
        missing: list[str] = []
        for row in rows:
            kept = args.report / f"{row.file}.report"
            if kept.exists():
                reports.append(pickle.loads(kept.read_bytes()))
            else:
                missing.append(row.name)
        return _render(reports, missing, args.verbose)
    return _render([_run(row, args, progress) for row in rows], [], args.verbose)


if __name__ == "__main__":
    sys.exit(main())
