"""Start ``moto_server`` (DynamoDB over HTTP) for the tests, without its leak.

moto records every model object it ever creates in a class-level list for its
web dashboard and never frees them. A DynamoDB ``TransactWriteItems`` deep-copies
the table, so a long test run would keep gigabytes of dead copies alive (seen:
22 GB, then the kernel killed the server). The tests never use the dashboard,
so this launcher turns the tracking off and runs the unchanged server:

    python tools/moto_server.py -H 127.0.0.1 -p 15000
"""

from __future__ import annotations

from typing import Any

from moto.core import common_models


def _untracked_new(cls: type, *args: Any, **kwargs: Any) -> Any:
    return object.__new__(cls)


common_models.BaseModel.__new__ = staticmethod(_untracked_new)  # type: ignore[assignment]

if __name__ == "__main__":
    from moto.server import main

    main()
