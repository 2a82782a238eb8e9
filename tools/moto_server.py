"""Start ``moto_server`` (DynamoDB over HTTP) for the tests, without its leak and its race.

moto records every model object it ever creates in a class-level list for its
web dashboard and never frees them. A DynamoDB ``TransactWriteItems`` deep-copies
the table, so a long test run would keep gigabytes of dead copies alive (seen:
22 GB, then the kernel killed the server). The tests never use the dashboard,
so this launcher turns the tracking off.

moto's models are not thread-safe, but its server answers requests on threads:
that deep copy races any concurrent write to the table and fails with
``RuntimeError: dictionary changed size during iteration`` (HTTP 500, which
clients retry; DynamoDB has no such failure). The launcher runs one request at
a time, as one in-memory model needs.

``TransactWriteItems`` backs up the table once *per item* of the transaction
(the same table, unchanged in between), so a put of k items on a table of n
items costs k deep copies of n items. The launcher makes the backup once per
table per transaction (same rollback state); otherwise the server is unchanged:

    python tools/moto_server.py -H 127.0.0.1 -p 15000
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable, Iterable
from typing import Any

from moto.core import common_models


def _untracked_new(cls: type, *args: Any, **kwargs: Any) -> Any:
    return object.__new__(cls)


common_models.BaseModel.__new__ = staticmethod(_untracked_new)  # type: ignore[assignment]


class _TableBackups:
    """``copy`` for moto's DynamoDB models: inside a transaction, one backup per table."""

    def __init__(self) -> None:
        self.memo: dict[int, Any] | None = None

    def deepcopy(self, obj: Any, memo: Any = None) -> Any:
        if self.memo is None or type(obj).__name__ != "Table":
            return copy.deepcopy(obj, memo)
        if id(obj) not in self.memo:
            self.memo[id(obj)] = copy.deepcopy(obj)
        return self.memo[id(obj)]


def _backup_once() -> None:
    from moto.dynamodb import models

    backups = _TableBackups()
    models.copy = backups  # type: ignore[assignment]
    transact = models.DynamoDBBackend.transact_write_items

    def transact_write_items(self: Any, transact_items: Any) -> Any:
        backups.memo = {}
        try:
            return transact(self, transact_items)
        finally:
            backups.memo = None

    models.DynamoDBBackend.transact_write_items = transact_write_items  # type: ignore[method-assign]


_backup_once()


def serialised(app: Callable[..., Iterable[bytes]]) -> Callable[..., list[bytes]]:
    """The WSGI ``app``, answering one request at a time (body produced under the lock)."""
    lock = threading.Lock()

    def one_at_a_time(environ: Any, start_response: Any) -> list[bytes]:
        with lock:
            body = app(environ, start_response)
            try:
                return list(body)
            finally:
                close = getattr(body, "close", None)
                if close is not None:
                    close()

    return one_at_a_time


if __name__ == "__main__":
    import moto.server

    run_simple = moto.server.run_simple

    def run_serialised(host: str, port: int, app: Any, *args: Any, **kwargs: Any) -> None:
        run_simple(host, port, serialised(app), *args, **kwargs)

    moto.server.run_simple = run_serialised  # type: ignore[assignment]
    moto.server.main()
