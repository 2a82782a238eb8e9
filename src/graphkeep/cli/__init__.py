"""The ``graphkeep`` command: inspect, dump for recovery, prune, copy between stores, migrate to a
schema version, stats, setup, watch a thread live and read a run's events.

``main(argv)`` is the console script (``graphkeep = "graphkeep.cli:main"``, also
``python -m graphkeep.cli``); it returns the exit code (0 ok, 1 error, 2 usage,
3 threshold crossed, 4 not found, 130 Ctrl-C). :func:`show_thread` prints ``graphkeep
history`` and ``graphkeep dump`` of one thread, for transcripts such as the demo.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import TextIO

from graphkeep.cli.app import main, run

__all__ = ["main", "run", "show_thread"]


def show_thread(
    url: str,
    thread_id: str,
    *,
    key_prefix: str | None = None,
    checkpoint_ns: str = "",
    channels: Sequence[str] | None = None,
    limit: int | None = 10,
    out: TextIO | None = None,
) -> int:
    """Print ``graphkeep history`` then ``graphkeep dump`` of ``thread_id`` to ``out``.

    Read-only; works for every URL the command accepts. ``channels`` defaults to
    every state channel of the latest checkpoint; ``limit`` caps the history rows.
    Errors are printed as the command prints them (one line, credentials masked)
    and the exit code is returned instead of raised: 0 ok, 1 error, 2 bad URL,
    4 unknown thread.
    """
    from graphkeep.cli.app import describe, exit_code
    from graphkeep.cli.endpoints import open_endpoint
    from graphkeep.cli.inspection import write_thread_report
    from graphkeep.moving.decode import inspection_serde

    stream = out if out is not None else sys.stdout
    try:
        with open_endpoint(url, key_prefix=key_prefix, serde=inspection_serde()) as endpoint:
            write_thread_report(
                endpoint,
                thread_id,
                stream,
                ns=checkpoint_ns,
                channels=channels,
                limit=limit,
                key_prefix=key_prefix,
            )
    except Exception as exc:
        stream.write(f"graphkeep: error: {describe(exc)}\n")
        return exit_code(exc)
    return 0
