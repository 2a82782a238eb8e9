"""``graphkeep check``: fsck for threads (chains, values, orphans), read-only unless --repair.

The findings come from :mod:`graphkeep.checkpoint.check` (one ``inventory`` per thread over
the checkpoint port: keys and checkpoint summaries, never a payload; on LangGraph's SQLite and
Postgres savers the inventory is read with SQL, :mod:`graphkeep.cli.foreign_check`). Text:
one line per finding and the totals; ``--json`` for machines. Exit code 0 clean, 1 errors,
3 warnings only, 2 usage or an unreachable store (one line). ``--repair`` deletes orphans only
(writes under checkpoints that are not stored, values no checkpoint names), after printing its
plan; it needs ``--yes`` when stdin is not a terminal; it also re-arms expiry drift (records
whose expiry departs from their thread's) to the thread's expiry. See docs/check.md.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

from graphkeep.checkpoint.check import (
    THREAD_PAGE,
    CheckReport,
    Drift,
    Repair,
    ThreadCheck,
    check_threads,
    repair_thread,
    thread_page,
)
from graphkeep.checkpoint.deep import is_encrypted
from graphkeep.cli.arguments import Commands, add_thread_choice, positive
from graphkeep.cli.console import (
    EXIT_ERROR,
    EXIT_OK,
    EXIT_THRESHOLD,
    Progress,
    UsageError,
    interactive,
    parse_duration,
    print_json,
)
from graphkeep.cli.endpoints import Native, is_foreign, open_endpoint, refuse_rival
from graphkeep.cli.foreign_check import open_saver_source
from graphkeep.cli.health import Unreachable
from graphkeep.errors import StorageUnavailable
from graphkeep.moving.decode import AES_KEY_ENV

#: how long a thread must have been left alone before ``--repair`` touches it (default)
DEFAULT_GRACE = "10m"


def grace(text: str) -> float:
    """``--grace``: a duration (``10m``, ``0``)."""
    if text.strip() in ("0", "0s"):
        return 0.0
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def add_check_command(commands: Commands) -> None:
    p = commands.add(
        "check URL",
        cmd_check,
        "fsck for threads: parent chains, stored values, DeltaChannel seeds, orphaned writes"
        " and values, expiry drift; exit code 1 on errors, 3 on warnings only; --repair deletes"
        " orphans and re-arms drifting expiries",
        "  graphkeep check redis://localhost:6379/0 --all\n"
        "  graphkeep check mongodb://db/app --thread support-42 --thread support-43 --json\n"
        "  graphkeep check redis://localhost:6379/0 --all --after support-42  # resume\n"
        "  graphkeep check redis://localhost:6379/0 --all --repair --yes\n"
        "\n"
        "  LANGGRAPH_AES_KEY=... graphkeep check dynamodb://app --all --deep\n"
        "  graphkeep check redis://localhost:6379/0 --all --deep --serde myapp.state:serde\n"
        "  graphkeep check postgresql://user:pw@db/app --all   # LangGraph's PostgresSaver\n"
        "  graphkeep check sqlite:///checkpoints.db --all --deep  # LangGraph's SqliteSaver\n"
        "\n"
        "Reads each thread's keys and checkpoint summaries (one inventory: 1 request on Redis\n"
        "and MongoDB, 1 per 1 MB page on DynamoDB; 3 read-only SQL queries on Postgres, 2 on\n"
        "SQLite), never a value; --deep also reads every payload (one export of the thread)\n"
        "and decodes it. error: the state cannot be read as written; warning: wasted space, a\n"
        "hole in the history or expiry drift. --repair (graphkeep stores only) deletes orphans\n"
        "(never a checkpoint) and re-arms drifting expiries to the thread's, skips threads\n"
        "written within --grace, and checks the threads again after.\n",
    )
    add_thread_choice(p, "every thread, in id order", repeatable=True)
    p.add_argument("--checkpoint-ns", metavar="NS", help="only this namespace (default: all)")
    p.add_argument(
        "--after", metavar="THREAD", help="with --all: start after this thread (resume a check)"
    )
    p.add_argument("--page-size", type=positive, default=THREAD_PAGE, help="threads per store page")
    p.add_argument(
        "--deep",
        action="store_true",
        help="also decode every payload (one more read per thread): undecodable values,"
        " classes that do not import, plaintext in an encrypted deployment, list elements",
    )
    p.add_argument(
        "--serde",
        metavar="MODULE:ATTR",
        help="with --deep: the application's serializer (an object, or a callable making one);"
        f" default LangGraph's JsonPlusSerializer, encrypted when {AES_KEY_ENV} is set",
    )
    p.add_argument(
        "--repair",
        action="store_true",
        help="delete orphans, re-arm expiry drift (the plan first)",
    )
    p.add_argument("--yes", action="store_true", help="confirm --repair without a prompt")
    p.add_argument(
        "--grace",
        type=grace,
        default=parse_duration(DEFAULT_GRACE),
        metavar="DURATION",
        help=f"--repair skips threads written within it (default {DEFAULT_GRACE}; 0: none)",
    )


def deep_serde(spec: str | None) -> Any:
    """``--deep``'s serializer: ``--serde MODULE:ATTR`` (an object with ``loads_typed``, or a
    callable returning one), else LangGraph's ``JsonPlusSerializer``; wrapped in LangGraph's
    ``EncryptedSerializer`` (AES, the key from ``LANGGRAPH_AES_KEY``) when that is set and
    the serializer does not encrypt already."""
    if spec is None:
        from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

        serde: Any = JsonPlusSerializer()
    else:
        module, sep, attr = spec.partition(":") if ":" in spec else spec.rpartition(".")
        if not module or not attr:
            raise UsageError(f"--serde takes MODULE:ATTR (e.g. myapp.state:serde), got {spec!r}")
        try:
            serde = importlib.import_module(module)
            for part in attr.split("."):
                serde = getattr(serde, part)
        except (ImportError, AttributeError) as exc:
            raise UsageError(f"--serde {spec}: {exc}") from exc
        if not hasattr(serde, "loads_typed") and callable(serde):
            try:
                serde = serde()
            except Exception as exc:
                raise UsageError(f"--serde {spec}() failed: {exc}") from exc
        if not hasattr(serde, "loads_typed"):
            raise UsageError(f"--serde {spec} is not a serializer (it has no loads_typed)")
    if os.environ.get(AES_KEY_ENV) and not is_encrypted(serde):
        from langgraph.checkpoint.serde.encrypted import EncryptedSerializer

        try:
            serde = EncryptedSerializer.from_pycryptodome_aes(serde)
        except (ImportError, ValueError) as exc:
            raise UsageError(f"{AES_KEY_ENV} is not usable: {exc}") from exc
    return serde


def _location(finding: Any) -> str:
    parts = [f"thread {finding.thread_id}"]
    if finding.ns:
        parts.append(f"ns {finding.ns}")
    if finding.checkpoint_id:
        parts.append(f"checkpoint {finding.checkpoint_id}")
    if finding.channel:
        parts.append(f"channel {finding.channel}")
    return " ".join(parts)


def _summary(report: CheckReport) -> str:
    keys = ""
    if report.key_ids:  # --deep: when an old key can leave the ring (docs/security.md)
        keys = "records by key id: " + ", ".join(
            f"{k} {n}" for k, n in sorted(report.key_ids.items())
        )
        keys += "\n"
    return keys + (
        f"checked {report.threads} thread(s), {report.checkpoints} checkpoint(s):"
        f" {report.errors} error(s), {report.warnings} warning(s);"
        f" {report.requests} request(s), {report.seconds:.3f}s\n"
    )


def _code(report: CheckReport) -> int:
    if report.errors:
        return EXIT_ERROR
    return EXIT_THRESHOLD if report.warnings else EXIT_OK


def _confirm(plan: list[ThreadCheck], args: argparse.Namespace, err: TextIO) -> bool:
    if args.yes:
        return True
    stdin = sys.stdin
    if not interactive(stdin):
        raise UsageError(
            "--repair without a terminal needs --yes (nothing was deleted; the plan is above)"
        )
    records = sum(len(t.orphan_writes) + len(t.orphan_values) + len(t.orphan_chunks) for t in plan)
    units = sum(len(d.refs) for t in plan for d in t.drift)
    err.write(
        f"delete {records} orphaned record(s) and re-arm the expiry of {units} unit(s)"
        f" in {len(plan)} thread(s)? [y/N] "
    )
    err.flush()
    return stdin.readline().strip().lower() in ("y", "yes")


def _plan_json(plan: list[ThreadCheck]) -> list[dict[str, Any]]:
    return [
        {
            "thread_id": t.thread_id,
            "writes": [{"ns": ns, "checkpoint_id": cid} for ns, cid in t.orphan_writes],
            "values": [{"ns": ns, "channel": ch, "version": v} for ns, ch, v in t.orphan_values],
            "chunks": list(t.orphan_chunks),
            "rearm": [
                {"ns": d.ns, "units": len(d.refs), "at": d.at, "expires": _expires(d)}
                for d in t.drift
            ],
        }
        for t in plan
    ]


#: ``(cursor, after, page_size) -> (threads, next cursor, requests)``: one page of ``--all``
Pager = Callable[[Any, str | None, int], tuple[list[str], Any, int]]
#: ``threads -> report``: the check of these threads
Checker = Callable[[list[str]], CheckReport]


def _native(endpoint: Native, args: argparse.Namespace, serde: Any) -> tuple[Pager, Checker]:
    port = endpoint.saver.port

    def page(cursor: Any, after: str | None, page_size: int) -> tuple[list[str], Any, int]:
        found: tuple[list[str], Any, int] = endpoint.call(
            thread_page(port, cursor, after, page_size)
        )
        return found

    def check(threads: list[str]) -> CheckReport:
        report: CheckReport = endpoint.call(check_threads(port, threads, args.checkpoint_ns, serde))
        return report

    return page, check


def _run(
    page_of: Pager, check: Checker, threads: list[str] | None, args: argparse.Namespace, err: TextIO
) -> CheckReport:
    """The check of ``threads`` (``--thread``), or of every thread page by page (``--all``),
    one thread at a time under a progress bar (stderr, a terminal only)."""
    started = time.perf_counter()
    report = CheckReport()
    cursor: Any = None
    total = None if threads is None else len(threads)
    with Progress("check", total, stream=err, enabled=args.progress, unit="threads") as progress:
        try:
            while True:
                if threads is None:
                    listed, cursor, requests = page_of(cursor, args.after, args.page_size)
                    report.requests += requests
                else:
                    listed = threads
                for thread_id in listed:
                    _add(report, check([thread_id]))
                    progress.advance(1, thread_id)
                if threads is not None or cursor is None:
                    break
        except (KeyboardInterrupt, StorageUnavailable):
            if threads is None and report.last_thread is not None:
                progress.close()
                err.write(
                    f"graphkeep: checked through {report.last_thread}; resume with"
                    f" --after {report.last_thread}\n"
                )
            raise
    report.seconds = time.perf_counter() - started
    return report


def _add(report: CheckReport, part: CheckReport) -> None:
    """``part`` (the check of some threads) counted into ``report``."""
    report.findings.extend(part.findings)
    report.flagged.extend(part.flagged)
    report.threads += part.threads
    report.checkpoints += part.checkpoints
    report.requests += part.requests
    report.thread_requests = max(report.thread_requests, part.thread_requests)
    report.key_ids.update(part.key_ids)
    report.last_thread = part.last_thread or report.last_thread


def _write_findings(report: CheckReport, out: TextIO) -> None:
    for f in report.findings:
        out.write(f"{f.severity.upper()} {f.kind}: {_location(f)}: {f.detail}\n")


def cmd_check(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    refuse_rival(args.url, "check")
    if args.serde is not None and not args.deep:
        raise UsageError("--serde names the serializer of --deep; add --deep")
    serde = deep_serde(args.serde) if args.deep else None
    if args.after is not None and not args.all:
        raise UsageError("--after resumes an --all check; with --thread, name the threads")
    if args.yes and not args.repair:
        raise UsageError("--yes confirms --repair; there is nothing to confirm without it")
    if is_foreign(args.url):
        if args.repair:
            raise UsageError(
                "--repair does not write to LangGraph's SQLite or Postgres savers: graphkeep"
                " check only reads them (delete the orphans it lists with the saver's own SQL)"
            )
        try:
            with open_saver_source(args.url, args.key_prefix) as source:
                threads = None if args.all else list(dict.fromkeys(args.thread))

                def check(listed: list[str]) -> CheckReport:
                    return source.check_threads(listed, args.checkpoint_ns, serde)

                report = _run(source.page, check, threads, args, err)
        except StorageUnavailable as exc:
            raise Unreachable(" ".join(str(exc).split())) from exc
        return _report(source.label, report, args, out)
    try:
        with open_endpoint(args.url, key_prefix=args.key_prefix) as opened:
            if not isinstance(opened, Native):  # pragma: no cover - foreign URLs go above
                raise UsageError("graphkeep check reads graphkeep URLs only")
            page_of, check_native = _native(opened, args, serde)
            threads = (
                None
                if args.all
                else list(dict.fromkeys(opened.saver.check_thread_id(t) for t in args.thread))
            )
            report = _run(page_of, check_native, threads, args, err)
            ring = opened.saver.encryption if args.deep else None
            if ring is not None:  # every key of the ring counted, 0 too
                report.key_ids.update({k: 0 for k in ring.key_ids})
            plan = [
                t
                for t in report.flagged
                if t.orphan_writes or t.orphan_values or t.orphan_chunks or t.drift
            ]
            repairs: list[Repair] | None = None
            after: CheckReport | None = None
            if args.repair:
                if not args.json:
                    _write_findings(report, out)
                    out.write(_summary(report))
                    _write_plan(plan, out)
                else:
                    err.write(f"graphkeep: repair plan: {_plan_text(plan)}\n")
                if plan and _confirm(plan, args, err):
                    port = opened.saver.port
                    repairs = [
                        opened.call(repair_thread(port, t, args.grace, serde=serde)) for t in plan
                    ]
                    again = [t.thread_id for t in report.flagged]
                    after = opened.call(check_threads(port, again, args.checkpoint_ns, serde))
    except StorageUnavailable as exc:
        raise Unreachable(" ".join(str(exc).split())) from exc
    return _report(opened.label, report, args, out, plan, repairs, after)


def _report(
    label: str,
    report: CheckReport,
    args: argparse.Namespace,
    out: TextIO,
    plan: list[ThreadCheck] | None = None,
    repairs: list[Repair] | None = None,
    after: CheckReport | None = None,
) -> int:
    """Write the report (text or ``--json``, with the repair when there was one); the exit
    code."""
    plan = plan or []
    final = report if after is None else _merged(report, after)
    final.requests += sum(r.requests for r in repairs or [])
    if args.json:
        body: dict[str, Any] = {
            "url": label,
            **final.totals(),
            "findings": [f.as_json() for f in final.findings],
            "last_thread": report.last_thread,
            "scan": {
                "requests": report.requests,
                "thread_requests_max": report.thread_requests,
                "seconds": round(report.seconds, 4),
            },
        }
        if args.repair:
            body["repair"] = {
                "plan": _plan_json(plan),
                "done": repairs is not None,
                "skipped": [
                    {"thread_id": r.thread_id, "reason": r.skipped}
                    for r in repairs or []
                    if r.skipped
                ],
                "writes_deleted": sum(len(r.writes) for r in repairs or []),
                "values_deleted": sum(len(r.values) for r in repairs or []),
                "chunks_deleted": sum(len(r.chunks) for r in repairs or []),
                "rearmed": sum(r.rearmed for r in repairs or []),
                "before": report.totals(),
            }
        print_json(body, out)
    elif not args.repair:
        _write_findings(report, out)
        out.write(_summary(report))
    elif repairs is not None:
        for r in repairs:
            if r.skipped:
                out.write(f"skipped {r.thread_id}: {r.skipped}\n")
            if r.writes or r.values or r.chunks or r.rearmed:
                out.write(
                    f"repaired {r.thread_id}: deleted writes of {len(r.writes)} checkpoint(s),"
                    f" {len(r.values)} value(s), {len(r.chunks)} chunk(s); re-armed the expiry"
                    f" of {r.rearmed} unit(s)\n"
                )
        out.write("after the repair:\n")
        _write_findings(final, out)
        out.write(_summary(final))
    elif plan:
        out.write("nothing changed\n")
    return _code(final)


def _expires(drift: Drift) -> str:
    if drift.at is None:
        return "never"
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(round(drift.at)))


def _plan_text(plan: list[ThreadCheck]) -> str:
    writes = sum(len(t.orphan_writes) for t in plan)
    values = sum(len(t.orphan_values) for t in plan)
    chunks = sum(len(t.orphan_chunks) for t in plan)
    units = sum(len(d.refs) for t in plan for d in t.drift)
    return (
        f"delete writes of {writes} checkpoint(s) that are not stored, {values} value(s)"
        f" no checkpoint names and {chunks} chunk(s) of bytes no record names, re-arm the"
        f" expiry of {units} unit(s), in {len(plan)} thread(s)"
    )


def _write_plan(plan: list[ThreadCheck], out: TextIO) -> None:
    if not plan:
        out.write("repair: nothing to do (only orphans are deleted and expiry drift re-armed)\n")
        return
    out.write(f"repair plan: {_plan_text(plan)}\n")
    for t in plan:
        for ns, cid in t.orphan_writes:
            out.write(f"  - writes of {t.thread_id} ns {ns!r} checkpoint {cid}\n")
        for ns, ch, v in t.orphan_values:
            out.write(f"  - value of {t.thread_id} ns {ns!r} channel {ch} version {v}\n")
        if t.orphan_chunks:
            out.write(f"  - {len(t.orphan_chunks)} orphan chunk(s) of {t.thread_id}\n")
        for d in t.drift:
            where = "its keys" if d.ns is None else f"ns {d.ns!r}"
            out.write(
                f"  - expiry of {len(d.refs)} unit(s) of {t.thread_id} ({where}):"
                f" re-armed to {_expires(d)}\n"
            )


def _merged(before: CheckReport, after: CheckReport) -> CheckReport:
    """``before`` with the findings of the threads checked again replaced by ``after``'s."""
    again = {t.thread_id for t in after.flagged} | {t.thread_id for t in before.flagged}
    merged = CheckReport(
        threads=before.threads,
        checkpoints=before.checkpoints,
        last_thread=before.last_thread,
        requests=before.requests + after.requests,
        seconds=before.seconds + after.seconds,
    )
    merged.key_ids = before.key_ids
    merged.findings = [f for f in before.findings if f.thread_id not in again]
    merged.findings += after.findings
    merged.flagged = [t for t in before.flagged if t.thread_id not in again] + after.flagged
    return merged
