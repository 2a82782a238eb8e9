"""`python -m conformance [--backend NAME ...]`: the conformance matrix of graphkeep's set-ups.

Exit code 0 when every selected set-up passes every official capability and spec case, else 1.
"""

from __future__ import annotations

import argparse
import sys
import time

from conformance.runner import SetupReport, render_matrix, render_problems, run_setup
from conformance.setups import all_setups, enabled_names, hot_setups, selected
from conformance.spec import GROUPS
from conformance.store import CAPABILITIES as STORE_CAPABILITIES
from conformance.store_runner import (
    StoreReport,
    render_store_matrix,
    render_store_problems,
    run_store_setup,
)


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
    parser.add_argument("-v", "--verbose", action="store_true", help="full tracebacks")
    return parser


_STARTED = time.monotonic()


def _progress(message: str) -> None:
    """One line per case as it starts, with the seconds since the run began."""
    print(f"  .. {time.monotonic() - _STARTED:7.1f}s {message}", file=sys.stderr, flush=True)


def _took(name: str, began: float) -> None:
    print(f"   {name}: {time.monotonic() - began:.0f}s", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        setups = selected(args.backend)
    except KeyError as exc:
        print(exc.args[0], file=sys.stderr)
        return 2
    progress = _progress if args.verbose else None
    reports: list[SetupReport] = []
    for setup in [] if args.store_only else setups:
        print(f"== {setup.name} ({setup.url})", file=sys.stderr, flush=True)
        began = time.monotonic()
        reports.append(
            run_setup(
                setup, groups=args.group, with_official=not args.no_official, progress=progress
            )
        )
        _took(setup.name, began)
    store_reports: list[StoreReport] = []
    for setup in [] if args.no_store else [s for s in setups if s.hot is None]:
        print(f"== {setup.name} store ({setup.url})", file=sys.stderr, flush=True)
        began = time.monotonic()
        store_reports.append(
            run_store_setup(setup, capabilities=args.capability, progress=progress)
        )
        _took(f"{setup.name} store", began)
    sections = [render_matrix(reports)] if reports else []
    sections += [render_store_matrix(store_reports)] if store_reports else []
    print("\n\n".join(sections))
    problems = "\n".join(
        p
        for p in (
            render_problems(reports, verbose=args.verbose),
            render_store_problems(store_reports, verbose=args.verbose),
        )
        if p
    )
    if problems:
        print("\n" + problems)
    ran = bool(reports or store_reports)
    passed = all(r.ok for r in reports) and all(r.ok for r in store_reports)
    return 0 if ran and passed else 1


if __name__ == "__main__":
    sys.exit(main())
