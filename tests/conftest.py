"""Shared fixtures: real servers only.

URLs come from REDIS_URL, REDIS_CLUSTER_URL, MONGODB_URI and DYNAMODB_ENDPOINT_URL, which
graphkeep.testing sets before this module is imported (pyproject's ``graphkeep_env``) to the
session's servers: ``--graphkeep-servers=env`` (what ``./dev test`` and ``.services/env``
select: the loopback servers of ``./dev services up``), ``local`` or ``containers``.
A server that does not answer fails the test with a hint; nothing is skipped.
"""

from __future__ import annotations

import os
import uuid

import pytest

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:16379/0")
REDIS_CLUSTER_URL = os.environ.get("REDIS_CLUSTER_URL", "redis+cluster://127.0.0.1:17001")
#: Redis with the Query Engine (./dev test starts it): the store's vector index path
REDIS_STACK_URL = os.environ.get("REDIS_STACK_URL", "redis://127.0.0.1:16380/0")


def unique_prefix(tag: str = "t") -> str:
    return f"gk-{tag}-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def prefix() -> str:
    return unique_prefix()


@pytest.fixture
def thread_id() -> str:
    return f"thread-{uuid.uuid4().hex[:8]}"


#: the pyproject marker of each ``graphkeep.testing`` backend, so that ``-m redis`` (the tox
#: envs) also selects the tests the plugin parametrizes with ``graphkeep_backend``
BACKEND_MARKERS = {
    "redis": "redis",
    "redis-cluster": "cluster",
    "mongodb": "mongodb",
    "dynamodb": "dynamodb",
}


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        callspec = getattr(item, "callspec", None)
        backend = callspec.params.get("graphkeep_backend") if callspec is not None else None
        if backend in BACKEND_MARKERS:
            item.add_marker(getattr(pytest.mark, BACKEND_MARKERS[backend]))
