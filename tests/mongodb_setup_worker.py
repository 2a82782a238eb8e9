"""One worker process of tests/test_mongodb_setup.py's fleet: every MongoDB product's
``setup()`` on one database, with its own client, every command it sends recorded.

``python -m tests.mongodb_setup_worker URL DB PREFIX sync|async ROTATE OUT``: imports and
connects, prints ``ready``, waits for a line on stdin (the test's starting shot, so all
workers start at once), runs the setups (the product order rotated by ROTATE, so workers
also build on different collections at the same time) and writes to OUT, as JSON, each
command's name, collection, body size, start and end (wall clock, comparable across
processes of one machine) and whether it failed, and the indexes every collection had as
each setup() returned (read by a second client); the exit status is the setups' outcome.
"""

from __future__ import annotations

import asyncio
import json
import sys
import threading
import time
import traceback
from typing import Any

import pymongo
from pymongo import monitoring

from graphkeep.backends.mongodb import (
    AsyncMongoDBCache,
    AsyncMongoDBEventLog,
    AsyncMongoDBSaver,
    AsyncMongoDBStore,
    MongoDBCache,
    MongoDBEventLog,
    MongoDBSaver,
    MongoDBStore,
)
from graphkeep.backends.mongodb.effects import AsyncMongoDBEffects, MongoDBEffects

SYNC_PRODUCTS = (MongoDBSaver, MongoDBStore, MongoDBCache, MongoDBEventLog, MongoDBEffects)
ASYNC_PRODUCTS = (
    AsyncMongoDBSaver,
    AsyncMongoDBStore,
    AsyncMongoDBCache,
    AsyncMongoDBEventLog,
    AsyncMongoDBEffects,
)


class Timeline(monitoring.CommandListener):
    """Every command: name, collection, how many indexes a createIndexes names, start, end."""

    def __init__(self) -> None:
        self.commands: list[dict[str, Any]] = []
        self.open: dict[int, dict[str, Any]] = {}
        self.lock = threading.Lock()

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        body = event.command
        name = event.command_name
        entry = {
            "name": name,
            "collection": body.get(name) if isinstance(body.get(name), str) else None,
            "indexes": len(body.get("indexes", ())),
            "start": time.time(),
            "end": None,
            "failed": False,
        }
        with self.lock:
            self.open[event.request_id] = entry
            self.commands.append(entry)

    def _end(self, event: Any, failed: bool) -> None:
        with self.lock:
            entry = self.open.pop(event.request_id, None)
            if entry is not None:
                entry["end"] = time.time()
                entry["failed"] = failed

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        self._end(event, False)

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        self._end(event, True)


def rotated(products: tuple[type, ...], by: int) -> list[type]:
    k = by % len(products)
    return [*products[k:], *products[:k]]


#: the index names of every collection under the prefix as each setup() returned
Seen = list[tuple[str, dict[str, list[str]]]]


def indexes_now(db: Any, prefix: str) -> dict[str, list[str]]:
    """Index names per collection under ``prefix`` (read by a client of its own)."""
    names = [n for n in db.list_collection_names() if n.startswith(f"{prefix}_")]
    return {n: [ix["name"] for ix in db[n].list_indexes()] for n in names}


def run_sync(url: str, db: str, prefix: str, rotate: int, timeline: Timeline, seen: Seen) -> None:
    client: Any = pymongo.MongoClient(url, event_listeners=[timeline])
    look: Any = pymongo.MongoClient(url)
    client.admin.command("ping")
    print("ready", flush=True)
    sys.stdin.readline()
    with client, look:
        for cls in rotated(SYNC_PRODUCTS, rotate):
            cls(client, db_name=db, key_prefix=prefix).setup()
            seen.append((cls.__name__, indexes_now(look[db], prefix)))


async def run_async(
    url: str, db: str, prefix: str, rotate: int, timeline: Timeline, seen: Seen
) -> None:
    client: Any = pymongo.AsyncMongoClient(url, event_listeners=[timeline])
    look: Any = pymongo.MongoClient(url)
    await client.admin.command("ping")
    print("ready", flush=True)
    await asyncio.to_thread(sys.stdin.readline)
    try:
        for cls in rotated(ASYNC_PRODUCTS, rotate):
            product: Any = cls(client, db_name=db, key_prefix=prefix)
            await (product.asetup() if cls is AsyncMongoDBSaver else product.setup())
            seen.append((cls.__name__, indexes_now(look[db], prefix)))
    finally:
        await client.close()
        look.close()


def main(argv: list[str]) -> int:
    url, db, prefix, mode, rotate, out = argv
    timeline = Timeline()
    seen: Seen = []
    status = 0
    try:
        if mode == "sync":
            run_sync(url, db, prefix, int(rotate), timeline, seen)
        else:
            asyncio.run(run_async(url, db, prefix, int(rotate), timeline, seen))
    except Exception:  # noqa: BLE001 - the test reads the traceback from stderr
        traceback.print_exc()
        status = 1
    with open(out, "w") as f:
        json.dump({"commands": timeline.commands, "seen": seen}, f)
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
