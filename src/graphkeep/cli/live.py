"""Live commands: ``watch`` (a thread's checkpoints as they land) and ``events`` (a run's log).

``graphkeep watch URL THREAD`` follows :meth:`graphkeep.checkpoint.saver.SaverBase.watch`:
every checkpoint committed to the thread after the call (or after ``--after ID``, so a
restarted watcher that passes the last id it printed misses nothing), one line each with
its id, step, source and the channels whose version changed from its parent's. The parent's
versions are the previous checkpoint printed when it is the parent (the usual case); else
(the first line, a fork) the parent is read once; a parent that is no longer stored
(pruned) shows ``?``, as ``graphkeep history`` does.

``graphkeep events URL RUN_ID`` prints the run's stored events (``id<TAB>json``) from the
start or after ``--after ID``; ``--follow`` then keeps printing live events until the
run's close event. Both print one line per item and flush it at once (pipe-friendly);
``--json`` prints one JSON object per line instead. Ctrl-C ends either quietly (exit 130).

Exit codes: 0 done (``watch --timeout`` elapsed, or the run's close event printed), 2 bad
URL / id / flag, 4 unknown run, 1 anything else (server unreachable, a followed run whose
writer went silent past ``stale_after``, events dropped by retention after ``--after``).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any, TextIO

from graphkeep.cli.arguments import Commands, add_namespace_choice, seconds
from graphkeep.cli.console import EXIT_OK, NotFound, UsageError, iso, safe_url
from graphkeep.cli.endpoints import open_endpoint, open_events, require_graphkeep
from graphkeep.cli.foreign import Foreign
from graphkeep.cli.threads import checkpoint_ts
from graphkeep.errors import UnknownRun
from graphkeep.moving.decode import inspection_serde, to_json

#: exit code of a command ended by Ctrl-C (128 + SIGINT), printed nothing
EXIT_INTERRUPTED = 130


def add_live_commands(commands: Commands) -> None:
    """Register ``watch`` and ``events`` on the ``graphkeep`` sub-parsers."""
    p = commands.add(
        "watch URL THREAD",
        cmd_watch,
        "print a thread's checkpoints as they are committed (by any process): id, step,"
        " source, changed channels",
        "  graphkeep watch redis://localhost:6379/0 support-42\n"
        "  graphkeep watch redis://localhost:6379/0 support-42 --after 1f0c... --json\n"
        "  graphkeep watch mongodb://db/app support-42 --all-ns --timeout 10m\n"
        "\n"
        "Starts with checkpoints committed after the call, or every one after --after ID\n"
        "first (pass the last id printed to resume without a gap). Redis reads the\n"
        "thread's stream (XREAD BLOCK); MongoDB and DynamoDB poll, backing off when idle.\n"
        "Ends after --timeout without a new checkpoint (default: never; Ctrl-C).\n",
    )
    p.add_argument("--after", metavar="ID", help="first print every checkpoint after this one")
    add_namespace_choice(p)
    p.add_argument(
        "--timeout",
        type=seconds,
        metavar="S",
        help="stop after S seconds without a new checkpoint (5, 90s, 10m; default: never)",
    )

    p = commands.add(
        "events URL RUN_ID",
        cmd_events,
        "print a run's events from its event log (graphkeep.connect_events):"
        " id<TAB>json, one per line",
        "  graphkeep events redis://localhost:6379/0 run-7\n"
        "  graphkeep events redis://localhost:6379/0 run-7 --after 1764571123456-0 --follow\n"
        "  graphkeep events 'dynamodb://app?region=eu-west-1' run-7 --follow --json\n"
        "\n"
        "Without --follow prints what is stored and exits; with --follow goes on with live\n"
        "events until the run's close event. --after ID (an id printed before, or an SSE\n"
        "Last-Event-ID) starts after that event. Exit 4 for a run with no events.\n",
    )
    p.add_argument("--after", metavar="ID", help="start after this event id")
    p.add_argument(
        "--follow", "-f", action="store_true", help="keep printing live events until the close"
    )


def _line(out: TextIO, text: str) -> None:
    out.write(text + "\n")
    out.flush()


def _compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


# -- watch -----------------------------------------------------------------------------


class Changes:
    """Which channels a checkpoint changed, from the versions of the checkpoints printed."""

    def __init__(self, parent_versions: Callable[[str, str], dict[str, Any] | None]) -> None:
        self._parent_versions = parent_versions
        #: (ns, checkpoint id) -> channel versions, of the last checkpoint seen per namespace
        self._last: dict[str, tuple[str, dict[str, Any]]] = {}

    def changed(
        self, ns: str, checkpoint_id: str, parent_id: str | None, versions: dict[str, Any] | None
    ) -> list[str] | None:
        """Sorted channels whose version differs from the parent's; None when unknown."""
        if versions is None:
            return None
        last = self._last.get(ns)
        self._last[ns] = (checkpoint_id, versions)
        if parent_id is None:
            return sorted(versions)
        if last is not None and last[0] == parent_id:
            parent = last[1]
        else:
            found = self._parent_versions(ns, parent_id)
            if found is None:
                return None  # the parent is not stored (pruned): unknown
            parent = found
        return sorted(ch for ch, v in versions.items() if parent.get(ch) != v)


def _versions(checkpoint: Any) -> dict[str, Any] | None:
    if isinstance(checkpoint, dict):
        return dict(checkpoint.get("channel_versions") or {})
    return None  # encrypted without LANGGRAPH_AES_KEY


def watch_row(thread_id: str, tup: Any, changes: Changes) -> dict[str, Any]:
    """One watched ``CheckpointTuple`` as the command prints it (``history``'s keys)."""
    conf = tup.config["configurable"]
    ns = str(conf.get("checkpoint_ns", ""))
    checkpoint_id = str(conf["checkpoint_id"])
    parent = (tup.parent_config or {}).get("configurable", {}).get("checkpoint_id") or None
    meta = tup.metadata if isinstance(tup.metadata, dict) else {}
    return {
        "thread_id": thread_id,
        "checkpoint_ns": ns,
        "checkpoint_id": checkpoint_id,
        "parent_checkpoint_id": parent,
        "step": to_json(meta.get("step")),
        "source": to_json(meta.get("source")),
        "ts": iso(checkpoint_ts(tup.checkpoint, checkpoint_id)),
        "channels_changed": changes.changed(ns, checkpoint_id, parent, _versions(tup.checkpoint)),
    }


def watch_text(row: dict[str, Any], *, show_ns: bool) -> str:
    changed = row["channels_changed"]
    cells = [row["checkpoint_id"]]
    if show_ns:
        cells.append("ns=" + (row["checkpoint_ns"] or '""'))
    cells += [
        f"step={'-' if row['step'] is None else row['step']}",
        f"source={row['source'] or '-'}",
        f"changed={'?' if changed is None else (','.join(changed) or '-')}",
    ]
    return "  ".join(cells)


def cmd_watch(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    require_graphkeep(args.url, "watch")
    ns = None if args.all_ns else args.ns
    try:
        with open_endpoint(
            args.url, key_prefix=args.key_prefix, serde=inspection_serde()
        ) as endpoint:
            if isinstance(endpoint, Foreign):  # pragma: no cover - refused above
                raise UsageError("graphkeep watch needs a graphkeep URL")
            saver = endpoint.saver

            def parent_versions(ns_of: str, parent_id: str) -> dict[str, Any] | None:
                found = saver.get_tuple(
                    {
                        "configurable": {
                            "thread_id": args.thread,
                            "checkpoint_ns": ns_of,
                            "checkpoint_id": parent_id,
                        }
                    }
                )
                return None if found is None else _versions(found.checkpoint)

            changes = Changes(parent_versions)
            watched = saver.watch(
                args.thread, after=args.after, checkpoint_ns=ns, timeout=args.timeout
            )
            for tup in watched:
                row = watch_row(args.thread, tup, changes)
                _line(out, _compact(row) if args.json else watch_text(row, show_ns=ns is None))
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    return EXIT_OK


# -- events ----------------------------------------------------------------------------


def cmd_events(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    try:
        with open_events(args.url, args.key_prefix) as log:
            try:
                for event_id, event in log.read(args.run_id, after=args.after, follow=args.follow):
                    if args.json:
                        _line(out, _compact({"id": event_id, "event": event}))
                    else:
                        _line(out, f"{event_id}\t{_compact(event)}")
            except UnknownRun as exc:
                raise NotFound(f"{exc} at {safe_url(args.url)}") from exc
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    return EXIT_OK
