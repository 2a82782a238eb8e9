"""``graphkeep rekey``'s cost per backend (issue 47): records rotated per second.

After the encryption rows (:func:`bench.lockstep.encryption_rows`), the suite's
:data:`~bench.suites.ENCRYPTED` contender writes a few W50 threads under its ring's current
key; the ring then makes its next key current — what a deploy with the new key first in
``GRAPHKEEP_KEYS`` does — and :func:`graphkeep.checkpoint.rekey.rekey_thread` rewrites each
thread as ``graphkeep rekey --all`` does (its lease, the records opened and sealed again in
place, read back). The row: threads, records rewritten, seconds, records/s and ms per
thread; the target only checks that no record is left under the old key (the figure itself
depends on the machine).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

from bench.workloads import Opened, Workload, human_message
from graphkeep.checkpoint.rekey import rekey_thread
from graphkeep.encryption import KeyRing

#: the W50 threads written, then rotated (the quick bench: the same, with its fewer turns)
THREADS = 4


def rekey_rows(
    name: str,
    open_sealed: Callable[[Workload], AbstractContextManager[Opened]],
    work: Workload,
    turns: int,
) -> tuple[list[str], list[tuple[str, bool]]]:
    """The report's section and its target: ``THREADS`` threads of ``turns`` turns of
    ``work`` written by ``open_sealed``'s saver (opened with ``encryption=`` a ring of two
    keys, the first current), then rotated to the ring's next key."""
    with open_sealed(work) as opened:
        saver: Any = opened.saver
        ring: KeyRing = saver.encryption
        old = ring.current
        after = [k for k in ring.key_ids if k != old]
        if not after:
            raise ValueError(f"{name}'s ring holds one key: nothing to rotate to")
        app = work.build(saver)
        threads = [f"rekey-{uuid.uuid4().hex[:12]}" for _ in range(THREADS)]
        for thread_id in threads:
            config: Any = {"configurable": {"thread_id": thread_id}}
            for turn in range(1, turns + 1):
                app.invoke({"messages": [human_message(turn)]}, config)
        ring.current = after[0]  # the new key first, the old one still in the ring
        try:
            started = time.perf_counter()
            done = [saver.drive(rekey_thread(saver, t)) for t in threads]
            seconds = time.perf_counter() - started
        finally:
            ring.current = old
    records = sum(d.rewritten for d in done)
    left = sum(by_key.get(old, 0) for d in done for by_key in d.after.values())
    rate = records / seconds if seconds > 0 else float("nan")
    lines = [
        "",
        "### Rekey cost (graphkeep rekey, W50 threads)",
        "",
        f"{name}'s {THREADS} W50 threads of {turns} turns written under one key, then"
        " `rekey_thread` per thread (what `graphkeep rekey --all` runs: the thread's lease,"
        " every checkpoint, metadata, channel value, list element, manifest and pending write"
        " opened and sealed again under the new key in place, read back), one after the other;"
        " records = records rewritten.",
        "",
        "| saver | threads | records | seconds | records/s | ms/thread |",
        "|---|---|---|---|---|---|",
        f"| {name} | {THREADS} | {records} | {seconds:.3f} | {rate:.0f} |"
        f" {seconds * 1000 / THREADS:.1f} |",
    ]
    targets = [
        (
            f"rekey: every record of the {THREADS} threads rewritten under the new key"
            f" ({records} records, {left} left under the old one)",
            records > 0 and left == 0 and all(d.written for d in done),
        )
    ]
    return lines, targets
