"""``graphkeep materialize``: DeltaChannel threads made readable by LangGraph before 1.2.

Per thread, :func:`graphkeep.checkpoint.materialize.materialize` on the URL's saver (graphkeep's
or LangGraph's SQLite / Postgres saver): one new checkpoint per namespace whose DeltaChannels
hold their full value as a plain value, read back and compared (``verified``). Idempotent and
resumable: a thread already plain gets nothing, so an interrupted ``--all`` is finished by
running it again. With ``LANGGRAPH_AES_KEY`` set, values are read and written encrypted, as the
app does. ``--graph module:attr`` loads the app's compiled graph for its reducers; it is
loaded before the store is opened, so a graph that cannot be imported writes nothing.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TextIO

from graphkeep.cli.arguments import Commands, add_thread_choice, import_graph
from graphkeep.cli.batch import batch_exit, each_thread
from graphkeep.cli.console import UsageError, print_json
from graphkeep.cli.endpoints import open_endpoint
from graphkeep.moving.decode import app_serde

if TYPE_CHECKING:
    from graphkeep.checkpoint.materialize import MaterializeReport


def add_materialize_command(commands: Commands) -> None:
    p = commands.add(
        "materialize URL",
        cmd_materialize,
        "rollback for LangGraph < 1.2: write one checkpoint per thread and namespace whose"
        " DeltaChannels hold their full value as a plain value (history is kept)",
        "  graphkeep materialize redis://localhost:6379/0 --all --dry-run\n"
        "  graphkeep materialize redis://localhost:6379/0 --thread support-42 --json\n"
        "  graphkeep materialize postgresql://app@db/app --all --graph app.graph:graph\n"
        "\n"
        "Messages channels are reduced with add_messages; any other DeltaChannel needs the\n"
        "app's graph (--graph module:attr) for its reducer. Idempotent: a thread already\n"
        "plain is left alone, so re-run after an interruption. A thread a live run holds\n"
        "(graphkeep's lease) is skipped and reported; exit code 1 when one is not done.\n",
    )
    add_thread_choice(p, "every thread of the store")
    p.add_argument(
        "--channel", action="append", metavar="CHANNEL", help="only this DeltaChannel (repeatable)"
    )
    p.add_argument("--graph", metavar="MODULE:ATTR", help="the app's compiled graph (reducers)")
    p.add_argument("--dry-run", action="store_true", help="compute and report, write nothing")


def cmd_materialize(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    # LangGraph's runtime (its DeltaChannel and add_messages) is imported here, not with the
    # CLI: the other commands run where only langgraph-checkpoint is installed
    try:
        from graphkeep.checkpoint.materialize import (
            FAILED,
            LOCKED,
            NOT_FOUND,
            materialize,
        )
    except ImportError as exc:
        raise UsageError(
            "graphkeep materialize needs LangGraph 1.2 or later (the runtime that wrote the"
            f" DeltaChannels) in this environment: pip install 'langgraph>=1.2' ({exc})"
        ) from exc
    graph = load_graph(args.graph) if args.graph else None
    with open_endpoint(args.url, key_prefix=args.key_prefix, serde=app_serde()) as endpoint:
        label = endpoint.label

        def materialize_thread(thread_id: str) -> MaterializeReport:
            return materialize(
                endpoint.saver, thread_id, channels=args.channel, graph=graph, dry_run=args.dry_run
            )

        reports, _ = each_thread("materialize", args, endpoint, materialize_thread, err)
    failed = [r for r in reports if r.status in (FAILED, LOCKED) or r.verified is False]
    missing = [r for r in reports if r.status == NOT_FOUND]
    if args.json:
        print_json(
            {
                "source": label,
                "dry_run": args.dry_run,
                "threads": [r.as_json() for r in reports],
                "written": sum(r.written for r in reports),
                "ok": not failed and not missing,
            },
            out,
        )
    else:
        for r in reports:
            out.write(_line(r) + "\n")
        if not reports:
            out.write(f"no threads at {label}\n")
    return batch_exit(failed=bool(failed), missing=bool(missing))


def load_graph(spec: str) -> Any:
    """The compiled graph ``module:attr`` names
    (:func:`~graphkeep.cli.arguments.import_graph`): a ``StateGraph`` builder is compiled (it
    has ``channels`` too, but not its subgraphs' reducers: only a compiled graph has those)."""
    found = import_graph(spec)
    if hasattr(found, "compile") and not hasattr(found, "get_state"):
        found = found.compile()
    if not isinstance(getattr(found, "channels", None), Mapping):
        raise UsageError(
            f"--graph {spec} is a {type(found).__name__}, not a compiled LangGraph graph"
        )
    return found


def _line(report: MaterializeReport) -> str:
    from graphkeep.checkpoint.materialize import (
        ALREADY_PLAIN,
        LOCKED,
        MATERIALIZED,
        NOT_FOUND,
        WOULD_MATERIALIZE,
    )

    done = [n for n in report.namespaces if n.status in (MATERIALIZED, WOULD_MATERIALIZE)]
    channels = ", ".join(
        f"{(n.ns + ' ') if n.ns else ''}{ch} ({size if size is not None else '?'})"
        for n in done
        for ch, size in n.channels.items()
    )
    if report.status == MATERIALIZED:
        state = "verified" if report.verified else "VERIFY FAILED"
        return f"{report.thread_id}: {report.written} checkpoint(s) written: {channels}; {state}"
    if report.status == WOULD_MATERIALIZE:
        return f"{report.thread_id}: would write {len(done)} checkpoint(s): {channels}"
    if report.status == ALREADY_PLAIN:
        return f"{report.thread_id}: already plain, nothing written"
    if report.status == LOCKED:
        return f"{report.thread_id}: SKIPPED, locked by a live run ({report.reason})"
    if report.status == NOT_FOUND:
        return f"{report.thread_id}: not found"
    return f"{report.thread_id}: FAILED, nothing written: {report.reason}"
