"""What a ``graphkeep health`` scan costs: requests and seconds per 1,000 threads.

    python tools/health_cost.py URL [--threads 1000] [--checkpoints 3] [--idle]

Writes ``--threads`` threads of ``--checkpoints`` checkpoints each (plus one pending write
on every thread's newest checkpoint, an interrupt on every tenth; ``--idle``: made two
hours ago, outside the scan's one-hour window) under a fresh key prefix (Redis) or into
the URL's database / table as given (use a fresh one), runs the scan three times through
``graphkeep.checkpoint.health.fleet_health`` (on a ``postgresql://`` URL: LangGraph's
PostgresSaver, set up first, and the CLI's ``postgres_health``) and prints the best run,
then deletes the threads. Figures in docs/health.md come from this script.
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.base.id import uuid6

import graphkeep
from graphkeep.checkpoint.health import FleetHealth, HealthWindow, fleet_health, id_at
from graphkeep.cli.endpoints import open_endpoint
from graphkeep.cli.foreign import POSTGRES_SCHEMES, Foreign
from graphkeep.cli.health import postgres_health

WINDOW = HealthWindow(3600, 1000, 600)


def checkpoint_id(age: float) -> str:
    """A uuid6 id made ``age`` seconds ago (now: LangGraph's own)."""
    if not age:
        return str(uuid6())
    return id_at(time.time() - age)[:-12] + uuid.uuid4().hex[:12]


def populate(saver: Any, threads: int, checkpoints: int, age: float = 0.0) -> list[str]:
    ids = [f"cost-{uuid.uuid4().hex[:8]}-{i}" for i in range(threads)]
    for n, thread_id in enumerate(ids):
        parent: str | None = None
        for step in range(checkpoints):
            checkpoint = empty_checkpoint()
            checkpoint["id"] = checkpoint_id(age)
            conf: dict[str, Any] = {"thread_id": thread_id, "checkpoint_ns": ""}
            if parent:
                conf["checkpoint_id"] = parent
            config = saver.put(
                {"configurable": conf},
                checkpoint,
                {"source": "loop", "step": step, "parents": {}},
                {},
            )
            parent = checkpoint["id"]
        channel = "__interrupt__" if n % 10 == 0 else "messages"
        saver.put_writes(config, [(channel, "x")], task_id=f"task-{n}")
    return ids


@contextmanager
def opened(url: str) -> Iterator[tuple[Any, Callable[[], FleetHealth]]]:
    """The saver at ``url`` and its scan."""
    if url.split("://", 1)[0].lower() in POSTGRES_SCHEMES:
        with open_endpoint(url, setup=True) as endpoint:
            assert isinstance(endpoint, Foreign)
            found = endpoint
            yield found.saver, lambda: postgres_health(found, WINDOW, time.time())
        return
    with graphkeep.connect(url) as saver:
        yield saver, lambda: fleet_health(saver, WINDOW)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url")
    parser.add_argument("--threads", type=int, default=1000)
    parser.add_argument("--checkpoints", type=int, default=3)
    parser.add_argument("--idle", action="store_true", help="threads idle for two hours")
    args = parser.parse_args()
    url = args.url
    if url.startswith("redis"):
        url += ("&" if "?" in url else "?") + f"key_prefix=cost{uuid.uuid4().hex[:6]}"
    with opened(url) as (saver, scan):
        started = time.perf_counter()
        ids = populate(saver, args.threads, args.checkpoints, 7200.0 if args.idle else 0.0)
        made = time.perf_counter() - started
        try:
            runs = [scan() for _ in range(3)]
            best = min(runs, key=lambda h: h.seconds)
            per = 1000 / best.threads_stored
            print(
                f"{url.split('://', 1)[0]}: {best.threads_stored} threads"
                f" ({'idle' if args.idle else 'active'}, {best.threads_active} active,"
                f" {args.checkpoints} checkpoints each, written in {made:.1f}s):"
                f" {best.requests} requests, {best.seconds:.3f}s;"
                f" per 1,000 threads {best.requests * per:.0f} requests,"
                f" {best.seconds * per:.3f}s; interrupted {best.threads_interrupted},"
                f" bytes {best.storage_bytes}"
            )
        finally:
            saver.delete_thread(ids[0])
            for thread_id in ids[1:]:
                saver.delete_thread(thread_id)
    return 0


if __name__ == "__main__":
    sys.exit(main())
