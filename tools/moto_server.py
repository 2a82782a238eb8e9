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
a time, as one in-memory model needs; otherwise the server is unchanged:

    python tools/moto_server.py -H 127.0.0.1 -p 15000
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any

from moto.core import common_models


def _untracked_new(cls: type, *args: Any, **kwargs: Any) -> Any:
    return object.__new__(cls)


common_models.BaseModel.__new__ = staticmethod(_untracked_new)  # type: ignore[assignment]



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
