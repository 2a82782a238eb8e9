"""The STORE section of the matrix: every set-up x store capability, sync and async.

Mirrors `runner.py` for savers: a failing case never stops the run, a backend without a store
module is "skip", a server that does not answer is "down"; a capability a backend does not
offer yet counts its cases as skipped, shown as "skip" in its cell (and fails the row); a
capability a set-up does not offer by design (`NotOffered`: the reference set-up has no
`watch` and no event log) is "n/a" and passes.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from itertools import groupby

from conformance.factory import BackendNotReady, Mode, ServiceUnavailable, ensure_reachable
from conformance.rules import checked, owned
from conformance.rules import report as rules_report
from conformance.setups import Setup
from conformance.store import (
    CAPABILITIES,
    NotOffered,
    StoreCase,
    StoreFactory,
    runs,
    store_connector_for,
)
from conformance.store.api import StoreConnector
from graphkeep.testing.rules.checks import Checks

Progress = Callable[[str], None]

#: capabilities whose cases mostly sleep through expiries (ttl: ~28 s a row one after another,
#: ~5 s side by side): on a row without service rules they run side by side, each under its
#: own key prefix (a sync case on its pool thread, an async one on its own loop), so their
#: sleeps overlap instead of adding up. A row with rules runs them one at a time: its checks
#: give each request sent to the one running case (:meth:`Checks.owned`; a Redis MONITOR line
#: cannot say which of two cases sent it)
SIDE_BY_SIDE = frozenset({"ttl"})


@dataclass
class StoreCaseOutcome:
    capability: str
    name: str
    mode: Mode
    error: str | None = None
    skipped: str | None = None
    #: the set-up does not offer this capability by design
    not_applicable: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.skipped is None

    @property
    def label(self) -> str:
        return f"{self.capability}.{self.name}[{self.mode}]"


@dataclass
class StoreReport:
    setup: Setup
    capabilities: list[str]
    skipped: str | None = None
    unavailable: str | None = None
    cases: list[StoreCaseOutcome] = field(default_factory=list)
    #: requests of the row's rules refused outside any case
    refused: str | None = None

    @property
    def ok(self) -> bool:
        blocked = self.skipped or self.unavailable or self.refused
        return not blocked and all(c.ok for c in self.cases)

    def cell(self, capability: str) -> str:
        if self.skipped or self.unavailable:
            return "skip" if self.skipped else "down"
        outcomes = [c for c in self.cases if c.capability == capability]
        if outcomes and all(c.not_applicable for c in outcomes):
            return "n/a"
        if outcomes and all(c.skipped for c in outcomes):
            return "skip"
        return f"{sum(c.ok for c in outcomes)}/{len(outcomes)}" if outcomes else "-"


def run_store_case(
    case: StoreCase,
    mode: Mode,
    setup: Setup,
    connector: StoreConnector,
    checks: Checks | None = None,
) -> StoreCaseOutcome:
    """One case in one mode with a fresh key prefix, then its cleanup; the requests of both
    that the row's rules refuse (``checks``) fail the case."""
    outcome = StoreCaseOutcome(case.capability, case.name, mode)
    factory = StoreFactory(setup, connector, mode)
    with owned(checks, f"{setup.name} store: {outcome.label}") as refused:
        try:
            case(factory)
        except NotOffered as exc:
            outcome.not_applicable = str(exc)
        except BackendNotReady as exc:
            outcome.skipped = str(exc)
        except Exception:
            outcome.error = traceback.format_exc()
        try:
            factory.purge()
        except Exception:
            outcome.error = (outcome.error or "") + "cleanup failed:\n" + traceback.format_exc()
    if refused:
        outcome.error = (outcome.error or "") + rules_report(refused)
    return outcome


def run_store_setup(
    setup: Setup, *, capabilities: list[str] | None = None, progress: Progress | None = None
) -> StoreReport:
    report = StoreReport(setup, capabilities or list(CAPABILITIES))
    try:
        connector = store_connector_for(setup)
        ensure_reachable(setup)
    except BackendNotReady as exc:
        report.skipped = str(exc)
        return report
    except ServiceUnavailable as exc:
        report.unavailable = str(exc)
        return report
    with checked(setup) as checks:

        def started(case: StoreCase, mode: Mode) -> None:
            if progress is not None:
                progress(f"{setup.name}: store {case.capability}.{case.name}[{mode}]")

        for capability, group in groupby(runs(report.capabilities), lambda run: run[0].capability):
            pairs = list(group)
            if checks is None and capability in SIDE_BY_SIDE and len(pairs) > 1:
                with ThreadPoolExecutor(max_workers=len(pairs)) as pool:
                    futures = []
                    for case, mode in pairs:
                        started(case, mode)
                        futures.append(pool.submit(run_store_case, case, mode, setup, connector))
                    report.cases += [future.result() for future in futures]
                continue
            for case, mode in pairs:
                started(case, mode)
                report.cases.append(run_store_case(case, mode, setup, connector, checks))
        left = checks.outside() if checks is not None else []
        report.refused = rules_report(left) if left else None
    return report


def render_store_matrix(reports: list[StoreReport]) -> str:
    """STORE: one row per set-up, one column per capability (sync + async cases)."""
    capabilities = reports[0].capabilities if reports else list(CAPABILITIES)
    header = ["store", *capabilities, "result"]
    rows = [
        [r.setup.name, *(r.cell(c) for c in capabilities), "PASS" if r.ok else "FAIL"]
        for r in reports
    ]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]

    def line(cells: list[str]) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"

    separator = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return "\n".join(["STORE", line(header), separator, *(line(row) for row in rows)])


def render_store_problems(reports: list[StoreReport], *, verbose: bool = False) -> str:
    out: list[str] = []
    for report in reports:
        name = report.setup.name
        if report.skipped:
            out.append(f"[{name}] store skipped: {report.skipped}")
        if report.unavailable:
            out.append(f"[{name}] store FAILED: {report.unavailable}")
        if report.refused:
            out.append(f"[{name}] store, outside any case: {report.refused}")
        for case in report.cases:
            if case.skipped:
                out.append(f"[{name}] store {case.label} skipped: {case.skipped}")
            if case.error:
                trace = case.error.rstrip().splitlines()
                shown = trace if verbose else trace[-6:]
                out.append(
                    f"[{name}] store {case.label} failed:\n" + "\n".join("    " + t for t in shown)
                )
    return "\n".join(out)
