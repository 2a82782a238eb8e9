"""A watcher or an event-log writer in its own process (the parent test kills it with -9).

    python -m tests.scenarios.live_worker watch URL PREFIX THREAD [--after ID] [--timeout S]
    python -m tests.scenarios.live_worker write URL PREFIX RUN --events N

- ``watch``: ``saver.watch`` (``--mode sync``, a saver from ``graphkeep.connect``) or
  ``saver.awatch`` (``--mode async``, from ``graphkeep.aconnect``) on THREAD's root namespace;
  one JSON line ``{"ns", "id", "thread"}`` per checkpoint, flushed as it arrives. Ends after
  ``--timeout`` seconds without a checkpoint.
- ``write``: appends N events ``{"i": n}`` to RUN (``append_many``, batches of 10), prints
  their ids as one JSON line, then stays alive sending a heartbeat every 0.2 s and never
  closes the run — until the parent kills it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

import graphkeep

REPO = Path(__file__).resolve().parents[2]
#: the writer's lifetime if nobody kills it (a leaked process must not live forever)
WRITER_LIFETIME_S = 300.0


def command(job: str, url: str, prefix: str, target: str, *options: str) -> list[str]:
    """The command line of a job (run it with cwd=REPO)."""
    return [sys.executable, "-m", "tests.scenarios.live_worker", job, url, prefix, target, *options]


def _say(line: dict[str, Any] | list[Any]) -> None:
    sys.stdout.write(json.dumps(line) + "\n")
    sys.stdout.flush()


def _line(item: Any) -> dict[str, Any]:
    conf = item.config["configurable"]
    return {"ns": conf["checkpoint_ns"], "id": conf["checkpoint_id"], "thread": conf["thread_id"]}


def watch_sync(args: argparse.Namespace) -> None:
    with graphkeep.connect(args.url, key_prefix=args.prefix) as saver:
        for item in saver.watch(args.target, after=args.after, timeout=args.timeout):
            _say(_line(item))


async def watch_async(args: argparse.Namespace) -> None:
    async with graphkeep.aconnect(args.url, key_prefix=args.prefix) as saver:
        async for item in saver.awatch(args.target, after=args.after, timeout=args.timeout):
            _say(_line(item))


def _batches(count: int) -> list[list[dict[str, int]]]:
    events = [{"i": n} for n in range(count)]
    return [events[at : at + 10] for at in range(0, count, 10)]


def write_sync(args: argparse.Namespace) -> None:
    with graphkeep.connect_events(args.url, key_prefix=args.prefix) as log:
        ids = [i for batch in _batches(args.events) for i in log.append_many(args.target, batch)]
        _say(ids)
        deadline = time.monotonic() + WRITER_LIFETIME_S
        while time.monotonic() < deadline:
            log.heartbeat(args.target)
            time.sleep(0.2)


async def write_async(args: argparse.Namespace) -> None:
    async with graphkeep.aconnect_events(args.url, key_prefix=args.prefix) as log:
        ids = []
        for batch in _batches(args.events):
            ids += await log.append_many(args.target, batch)
        _say(ids)
        deadline = time.monotonic() + WRITER_LIFETIME_S
        while time.monotonic() < deadline:
            await log.heartbeat(args.target)
            await asyncio.sleep(0.2)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="live_worker")
    parser.add_argument("job", choices=["watch", "write"])
    parser.add_argument("url")
    parser.add_argument("prefix")
    parser.add_argument("target", help="the thread id (watch) or the run id (write)")
    parser.add_argument("--mode", choices=["sync", "async"], default="sync")
    parser.add_argument("--after", default=None)
    parser.add_argument("--timeout", type=float, default=None)
    parser.add_argument("--events", type=int, default=10)
    args = parser.parse_args(argv)
    if args.job == "watch":
        if args.mode == "sync":
            watch_sync(args)
        else:
            asyncio.run(watch_async(args))
    elif args.mode == "sync":
        write_sync(args)
    else:
        asyncio.run(write_async(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
