"""The official stores of other packages on this session's servers, for the tests that copy
from them (tests/test_store_copy_rivals.py) and read through to them
(tests/test_store_fallback_rivals.py): each rival in its own key prefix, collection, index
prefix or table, dropped after the test. Plain helpers, no fixtures (each test module makes
its own from these: a fixture imported into a module is redefined by ruff's rule)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import pytest
from langgraph.store.base import BaseStore

from conformance.setups import all_setups
from graphkeep.cli.endpoints import open_store

from .conftest import unique_prefix

Key = tuple[tuple[str, ...], str]

#: namespaces of several depths, unicode and nested values (no floats: DynamoDBStore's
#: serializer refuses them; no "." or ":" in labels: RedisStore and DynamoDBStore join with them)
ITEMS: list[tuple[tuple[str, ...], str, dict[str, Any]]] = [
    (("users", "alice"), "prefs", {"food": "pizza", "n": 3, "tags": ["a", "b"]}),
    (("users", "alice", "memories"), "m1", {"text": "likes hiking", "n": 1, "ok": True}),
    (("users", "bob"), "prefs", {"food": "sushi", "n": 5, "nested": {"x": [1, {"z": "ß"}]}}),
    (("team", "notes"), "n 1", {"text": "ünïcødé ✓ 日本語", "n": None}),
]


@dataclass
class Rival:
    name: str
    url: str

    def open(self, index: dict[str, Any] | None = None) -> AbstractContextManager[BaseStore]:
        return open_store(self.url, setup=True, index=index)


def redis_stack_url() -> str:
    return os.environ.get("REDIS_STACK_URL", "redis://127.0.0.1:6379/0")


@contextmanager
def open_rival(name: str) -> Iterator[Rival]:
    tag = unique_prefix("rival").replace("-", "_")
    if name == "redis":
        host = redis_stack_url().split("://", 1)[1]
        yield Rival(name, f"langgraph-redis://{host}?store_prefix={tag}&vector_prefix={tag}_v")
        from redis import Redis

        with Redis.from_url(redis_stack_url()) as client:
            for index in (tag, f"{tag}_v"):
                try:
                    client.execute_command("FT.DROPINDEX", index, "DD")
                except Exception:  # noqa: S110 - never created (no index configured)
                    pass
    elif name == "mongodb":
        host = os.environ.get("MONGODB_URI", "mongodb://127.0.0.1:27017").split("://", 1)[1]
        yield Rival(name, f"langgraph-mongodb://{host.rstrip('/')}/gk_rivals?collection_name={tag}")
        from pymongo import MongoClient

        with MongoClient(os.environ.get("MONGODB_URI")) as client:
            client["gk_rivals"].drop_collection(tag)
    else:
        endpoint = os.environ.get("DYNAMODB_ENDPOINT_URL", "http://127.0.0.1:8000")
        region = os.environ.get("AWS_DEFAULT_REGION", "us-east-1")
        yield Rival(name, f"langgraph-dynamodb://{tag}?region={region}&endpoint_url={endpoint}")
        import boto3

        try:
            boto3.client("dynamodb", region_name=region, endpoint_url=endpoint).delete_table(
                TableName=tag
            )
        except Exception:  # noqa: S110 - a test that never created it
            pass


RIVALS = [
    pytest.param("redis", marks=[pytest.mark.redis, pytest.mark.redis_stack]),
    pytest.param("mongodb", marks=pytest.mark.mongodb),
    pytest.param("dynamodb", marks=pytest.mark.dynamodb),
]


def graphkeep_backends() -> list[Any]:
    params = []
    for setup in all_setups():
        if setup.name == "reference":
            continue
        marks = [getattr(pytest.mark, setup.marker)] if setup.marker else []
        params.append(pytest.param(setup.url, id=setup.name, marks=marks))
    return params


def seed(store: BaseStore, items: list[Any]) -> None:
    for ns, key, value in items:
        store.put(ns, key, value)


def times(store: BaseStore, items: list[Any]) -> dict[Key, tuple[datetime, datetime]]:
    """Each item's (created_at, updated_at), as ``search`` returns them."""
    kind = type(store).__name__
    found: dict[Key, tuple[datetime, datetime]] = {}
    for ns, key, _ in items:
        hits = store.search(() if kind == "MongoDBStore" else ns, limit=1000, refresh_ttl=False)
        for h in hits:
            if (tuple(h.namespace), h.key) == (ns, key):
                found[(ns, key)] = (_utc(h.created_at), _utc(h.updated_at))
    return found


def _utc(moment: datetime) -> datetime:
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)
