"""Readiness of the session's servers: waiting until a probe answers (failing at once when the
server has exited), and one probe per backend."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from graphkeep.testing.aws import dynamodb_client
from graphkeep.testing.errors import GraphkeepTestingError

START_TIMEOUT = 90.0


def not_exited() -> str | None:
    """The ``exited`` of a server that cannot be watched: never known to have exited."""
    return None


def wait(
    what: str,
    ready: Callable[[], bool],
    exited: Callable[[], str | None] = not_exited,
    timeout: float = START_TIMEOUT,
) -> None:
    """Until ``ready()`` answers; fail at once with ``exited()``'s log when the server is gone."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if ready():
                return
        except Exception:  # noqa: BLE001, S110 — not up yet
            pass
        log = exited()
        if log is not None:
            raise GraphkeepTestingError(f"{what} exited at start:\n{log}")
        time.sleep(0.1)
    raise GraphkeepTestingError(f"{what} did not answer within {timeout:.0f}s")


def redis_ping(url: str) -> bool:
    import redis

    with redis.Redis.from_url(url, socket_timeout=2) as client:
        return bool(client.ping())


def cluster_info(port: int) -> dict[str, str]:
    """``CLUSTER INFO`` of the node on 127.0.0.1 ``port``."""
    import redis

    with redis.Redis(host="127.0.0.1", port=port, socket_timeout=2) as client:
        info = client.execute_command("CLUSTER", "INFO")
    text = info.decode() if isinstance(info, bytes) else str(info)
    return dict(line.split(":", 1) for line in text.split() if ":" in line)


def cluster_ok(port: int) -> bool:
    """The cluster node on 127.0.0.1 ``port`` reports ``cluster_state:ok``."""
    return cluster_info(port).get("cluster_state") == "ok"


def mongo_ping(url: str) -> bool:
    import pymongo

    client: Any = pymongo.MongoClient(url, serverSelectionTimeoutMS=2000)
    with client:
        client.admin.command("ping")
    return True


def dynamo_ping(url: str) -> bool:
    from graphkeep.backends.dynamodb import parse_url

    dynamodb_client(parse_url(url)[1].get("endpoint_url")).list_tables(Limit=1)
    return True
