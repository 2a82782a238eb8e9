"""``graphkeep health URL --fallback SOURCE``: how far a live switch has got — the threads of
SOURCE (the saver the app read through to with ``fallback=``) that URL has not settled yet
(:mod:`graphkeep.moving.fallback`): not moved by a first use nor by ``graphkeep copy``'s
last pass, nor deleted since. Zero means the fallback is no longer needed."""

from __future__ import annotations

import argparse
from contextlib import ExitStack
from typing import Any

from graphkeep.cli.custom import open_side
from graphkeep.cli.endpoints import Native
from graphkeep.cli.threads import iter_threads
from graphkeep.moving.decode import LosslessSerde

#: the unmoved thread ids a report lists (the count is exact)
SHOWN = 20


def add_fallback_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--fallback",
        metavar="SOURCE",
        help="the saver a live switch reads through to (fallback=): count its threads"
        " URL has not moved yet",
    )


def unmoved_report(args: argparse.Namespace) -> dict[str, Any] | None:
    """``{"source", "threads", "unmoved", "unmoved_ids"}`` (None without ``--fallback``)."""
    if args.fallback is None:
        return None
    with ExitStack() as sides:
        dst = sides.enter_context(open_side(args.url, None, key_prefix=args.key_prefix))
        if not isinstance(dst, Native):
            return None  # read_health has refused it already for a graphkeep-only report
        src = sides.enter_context(open_side(args.fallback, None, serde=LosslessSerde(strict=False)))
        threads = list(iter_threads(src))
        left = [t for t in threads if not dst.call(dst.saver.port.is_settled(t))]
        label = src.label
    return {
        "source": label,
        "threads": len(threads),
        "unmoved": len(left),
        "unmoved_ids": left[:SHOWN],
    }


def unmoved_text(report: dict[str, Any]) -> str:
    lines = [
        f"fallback: {report['unmoved']} of {report['threads']} thread(s) of {report['source']}"
        " not moved yet\n"
    ]
    lines += [f"unmoved: {t}\n" for t in report["unmoved_ids"]]
    return "".join(lines)


def unmoved_prometheus(report: dict[str, Any], backend: str) -> str:
    return (
        "# HELP graphkeep_fallback_threads_unmoved threads of the fallback not moved yet\n"
        "# TYPE graphkeep_fallback_threads_unmoved gauge\n"
        f'graphkeep_fallback_threads_unmoved{{backend="{backend}"}} {report["unmoved"]}\n'
    )
