"""Commands that work thread by thread (copy, migrate, materialize, prune, hot warm): the
threads chosen, the progress bar over them, the threads not found and the exit code."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterable
from typing import TextIO, TypeVar

from graphkeep.cli.console import EXIT_ERROR, EXIT_NOT_FOUND, EXIT_OK, Progress
from graphkeep.cli.endpoints import Endpoint
from graphkeep.cli.threads import iter_threads

Result = TypeVar("Result")


def each_thread(
    verb: str,
    args: argparse.Namespace,
    endpoint: Endpoint,
    work: Callable[[str], Result | None],
    err: TextIO,
) -> tuple[list[Result], list[str]]:
    """``work`` on each thread ``--thread`` names (once each, in order) or, with ``--all``, on
    every thread of ``endpoint``, under a progress bar labelled ``verb``: what it returned,
    and the threads for which it returned None (not found)."""
    threads = list(dict.fromkeys(args.thread)) if args.thread else list(iter_threads(endpoint))
    results: list[Result] = []
    missing: list[str] = []
    with Progress(verb, len(threads), stream=err, enabled=args.progress) as progress:
        for thread_id in threads:
            progress.advance(0, detail=thread_id)
            result = work(thread_id)
            progress.advance(1, detail=thread_id)
            if result is None:
                missing.append(thread_id)
            else:
                results.append(result)
    return results, missing


def report_not_found(missing: Iterable[str], label: str, err: TextIO) -> None:
    for thread_id in missing:
        err.write(f"graphkeep: thread {thread_id!r} not found at {label}\n")


def batch_exit(*, failed: bool, missing: bool) -> int:
    """1 when a thread failed, else 4 when one was not found, else 0."""
    if failed:
        return EXIT_ERROR
    return EXIT_NOT_FOUND if missing else EXIT_OK
