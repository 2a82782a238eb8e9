"""Per-test isolation: a URL on the session's server private to one test (its own Redis or
Valkey key prefix, MongoDB database or DynamoDB table) and how to remove that data after it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import urlencode, urlsplit, urlunsplit

from graphkeep.testing.aws import dynamodb_client


def isolated(backend: str, base: str, tag: str) -> tuple[str, Callable[[], None]]:
    """A URL on ``base`` private to one test, and how to remove its data afterwards."""
    name = f"gk_{tag}"
    parts = urlsplit(base)
    if backend in ("redis", "redis-cluster", "valkey", "valkey-cluster"):
        query = "&".join(q for q in (parts.query, urlencode({"key_prefix": name})) if q)
        return urlunsplit(parts._replace(query=query)), lambda: _drop_redis_keys(base, name)
    if backend == "mongodb":
        return urlunsplit(parts._replace(path=f"/{name}")), lambda: _drop_database(base, name)
    query = parts.query
    return (
        urlunsplit(parts._replace(netloc=name, query=query)),
        lambda: _drop_table(base, name),
    )


def _drop_redis_keys(base: str, prefix: str) -> None:
    from graphkeep.backends.redis import sync_client

    client = sync_client(base)
    try:
        for key in client.scan_iter(match=f"{prefix}*", count=1000):
            client.delete(key)
        for key in client.scan_iter(match=f"*{{{prefix}*", count=1000):
            client.delete(key)
    finally:
        client.close()


def _drop_database(base: str, name: str) -> None:
    import pymongo

    client: Any = pymongo.MongoClient(base, serverSelectionTimeoutMS=5000)
    with client:
        client.drop_database(name)


def _drop_table(base: str, name: str) -> None:
    from graphkeep.backends.dynamodb import parse_url

    _, kwargs = parse_url(base)
    client = dynamodb_client(kwargs.get("endpoint_url"))
    try:
        client.delete_table(TableName=name)
    except client.exceptions.ResourceNotFoundException:
        pass
