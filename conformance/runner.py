"""Runs the matrix: for each set-up, the official suite and every spec case; renders the table.

A failing or crashing case never stops the run: it is recorded with its traceback.
A set-up whose package does not exist yet is "skip"; one whose server is down is "down" and
fails. Both count as not passing (missing capabilities).
"""

from __future__ import annotations

import reprlib
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from conformance.factory import (
    Api,
    BackendNotReady,
    Connector,
    Mode,
    SaverFactory,
    ServiceUnavailable,
    connector_for,
    ensure_reachable,
)
from conformance.official import CAPABILITIES, CapabilityOutcome, run_official
from conformance.rules import checked, owned
from conformance.rules import report as rules_report
from conformance.setups import Setup
from conformance.spec import GROUPS, Case, runs
from graphkeep.testing.rules.checks import Checks

Progress = Callable[[str], None]
SPEC_DIR = Path(__file__).resolve().parent / "spec"


@dataclass
class CaseOutcome:
    group: str
    name: str
    mode: Mode
    error: str | None = None
    locals: str = ""

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def label(self) -> str:
        return f"{self.group}.{self.name}[{self.mode}]"


@dataclass
class SetupReport:
    setup: Setup
    groups: list[str]
    with_official: bool = True
    skipped: str | None = None
    unavailable: str | None = None
    official: dict[str, CapabilityOutcome] = field(default_factory=dict)
    spec: list[CaseOutcome] = field(default_factory=list)
    #: requests of the row's rules refused outside any case (its set-up)
    refused: str | None = None

    @property
    def ok(self) -> bool:
        if self.skipped or self.unavailable or self.refused:
            return False
        official_ok = not self.with_official or (
            len(self.official) == len(CAPABILITIES) and all(o.ok for o in self.official.values())
        )
        return official_ok and all(case.ok for case in self.spec)

    def official_cell(self, capability: str) -> str:
        blocked = self._blocked_cell()
        if blocked:
            return blocked
        outcome = self.official.get(capability)
        return outcome.cell() if outcome else "-"

    def spec_cell(self, group: str) -> str:
        blocked = self._blocked_cell()
        if blocked:
            return blocked
        outcomes = [c for c in self.spec if c.group == group]
        return f"{sum(c.ok for c in outcomes)}/{len(outcomes)}" if outcomes else "-"

    def _blocked_cell(self) -> str | None:
        return "skip" if self.skipped else "down" if self.unavailable else None


def _failing_locals(exc: BaseException) -> str:
    """Locals of the innermost spec frame: bare asserts outside pytest have no message."""
    frame = None
    tb = exc.__traceback__
    while tb is not None:
        if SPEC_DIR in Path(tb.tb_frame.f_code.co_filename).parents:
            frame = tb.tb_frame
        tb = tb.tb_next
    if frame is None:
        return ""
    shown = [
        f"  {name} = {reprlib.repr(value)}"
        for name, value in frame.f_locals.items()
        if not isinstance(value, (Api, SaverFactory)) and not callable(value)
    ]
    return "locals at the failing line:\n" + "\n".join(shown) if shown else ""


def run_case(
    case: Case, mode: Mode, setup: Setup, connector: Connector, checks: Checks | None = None
) -> CaseOutcome:
    """One spec case in one mode with a fresh key prefix; exceptions become the outcome, and
    so do the requests it sent that the row's rules refuse (``checks``)."""
    outcome = CaseOutcome(case.group, case.name, mode)
    with owned(checks, f"{setup.name}: {outcome.label}") as refused:
        try:
            case(SaverFactory(setup, connector, mode))
        except Exception as exc:
            outcome.error = traceback.format_exc()
            outcome.locals = _failing_locals(exc)
    if refused:
        outcome.error = (outcome.error or "") + rules_report(refused)
    return outcome


def run_setup(
    setup: Setup,
    *,
    groups: list[str] | None = None,
    with_official: bool = True,
    progress: Progress | None = None,
) -> SetupReport:
    report = SetupReport(setup, groups or list(GROUPS), with_official)
    try:
        connector = connector_for(setup)
        ensure_reachable(setup)
    except BackendNotReady as exc:
        report.skipped = str(exc)
        return report
    except ServiceUnavailable as exc:
        report.unavailable = str(exc)
        return report
    with checked(setup) as checks:
        if with_official:
            _say(progress, f"{setup.name}: official suite")
            report.official = run_official(setup, connector, checks)
        for case, mode in runs(report.groups):
            _say(progress, f"{setup.name}: {case.group}.{case.name}[{mode}]")
            report.spec.append(run_case(case, mode, setup, connector, checks))
        left = checks.outside() if checks is not None else []
        report.refused = rules_report(left) if left else None
    return report


def _say(progress: Progress | None, message: str) -> None:
    if progress is not None:
        progress(message)


def render_matrix(reports: list[SetupReport]) -> str:
    """A markdown table: one row per set-up, official capabilities then spec groups."""
    groups = reports[0].groups if reports else list(GROUPS)
    official = list(CAPABILITIES) if any(r.with_official for r in reports) else []
    header = ["setup", *official, *groups, "result"]
    rows = [
        [
            r.setup.name,
            *(r.official_cell(c) for c in official),
            *(r.spec_cell(g) for g in groups),
            "PASS" if r.ok else "FAIL",
        ]
        for r in reports
    ]
    widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header))]

    def line(cells: list[str]) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"

    separator = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return "\n".join([line(header), separator, *(line(row) for row in rows)])


def _indent(lines: list[str]) -> str:
    return "\n".join("    " + line for line in lines)


def _case_summary(case: CaseOutcome, verbose: bool) -> str:
    trace = (case.error or "").rstrip().splitlines()
    details = case.locals.splitlines()
    if not verbose:
        trace, details = trace[-4:], details[:12]
    return _indent(trace + details)


def render_problems(reports: list[SetupReport], *, verbose: bool = False) -> str:
    """Skips, unreachable services, failed official tests and failed spec cases."""
    out: list[str] = []
    for report in reports:
        name = report.setup.name
        if report.skipped:
            out.append(f"[{name}] skipped: {report.skipped}")
        if report.unavailable:
            out.append(f"[{name}] FAILED: {report.unavailable}")
        if report.refused:
            out.append(f"[{name}] outside any case: {report.refused}")
        for outcome in report.official.values():
            for failure in outcome.failures:
                text = failure if verbose else failure.strip().splitlines()[0][:300]
                out.append(f"[{name}] official {outcome.name}: {text}")
        for case in report.spec:
            if case.error:
                out.append(f"[{name}] spec {case.label} failed:\n{_case_summary(case, verbose)}")
    return "\n".join(out)
