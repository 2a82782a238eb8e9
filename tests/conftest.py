"""Shared fixtures: real servers only.

URLs come from REDIS_URL, REDIS_CLUSTER_URL, MONGODB_URI and DYNAMODB_ENDPOINT_URL, which
graphkeep.testing sets before this module is imported (pyproject's ``graphkeep_env``) to the
session's servers: ``--graphkeep-servers=env`` (what ``./dev test`` and ``.services/env``
select: the loopback servers of ``./dev services up``), ``local`` or ``containers``.
A server that does not answer fails the test with a hint; nothing is skipped.
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from graphkeep.errors import mask_url

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:16379/0")
REDIS_CLUSTER_URL = os.environ.get("REDIS_CLUSTER_URL", "redis+cluster://127.0.0.1:17001")
#: Redis with the Query Engine (./dev test starts it): the store's vector index path
REDIS_STACK_URL = os.environ.get("REDIS_STACK_URL", "redis://127.0.0.1:16380/0")

#: the ./dev service (`./dev services up postgres`); a server that does not answer fails
POSTGRES_URL = os.environ.get("GRAPHKEEP_POSTGRES_URL") or os.environ.get(
    "POSTGRES_URL", "postgresql://graphkeep:graphkeep@127.0.0.1:15432/graphkeep"
)


#: MongoDB server of the session's tests
MONGODB_URI = os.environ.get("MONGODB_URI", "mongodb://127.0.0.1:27117")

#: the key prefixes made since the running test module started
_MADE: list[str] = []


def unique_prefix(tag: str = "t") -> str:
    made = f"gk-{tag}-{uuid.uuid4().hex[:10]}"
    _MADE.append(made)
    return made


@pytest.fixture(scope="module", autouse=True)
def _drop_collections_of_the_module(request: pytest.FixtureRequest) -> Iterator[None]:
    """When a module with MongoDB tests ends, the collections its key prefixes named are
    dropped: a MongoDB server does not mind thousands of collections, FerretDB does (each
    request costs more with every collection of its database: a find by ``_id`` 17 ms at
    3,440 collections, 0.5 ms in a fresh one). At the module's end, as a module-scoped
    fixture may share a prefix between its tests; other processes' prefixes are not ours."""
    yield
    made = tuple(_MADE)
    _MADE.clear()
    module = request.module
    if not made or not any(
        item.get_closest_marker("mongodb") is not None and getattr(item, "module", None) is module
        for item in request.session.items
    ):
        return
    from conformance.cleanup import drop_prefixed
    from graphkeep.testing.rules import unchecked

    with unchecked():
        drop_prefixed(MONGODB_URI, made)


@pytest.fixture
def prefix() -> str:
    return unique_prefix()


@pytest.fixture
def thread_id() -> str:
    return f"thread-{uuid.uuid4().hex[:8]}"


#: the ``graphkeep.testing`` backends on graphkeep's Redis backend (a prefix of each name)
REDIS_FAMILY = ("redis", "valkey")

#: the pyproject marker of each ``graphkeep.testing`` backend, so that ``-m redis`` (the tox
#: envs) also selects the tests the plugin parametrizes with ``graphkeep_backend``
BACKEND_MARKERS = {
    "redis": "redis",
    "redis-cluster": "cluster",
    "mongodb": "mongodb",
    "dynamodb": "dynamodb",
    "valkey": "valkey",
    "valkey-cluster": "valkey_cluster",
}


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        callspec = getattr(item, "callspec", None)
        backend = callspec.params.get("graphkeep_backend") if callspec is not None else None
        if backend in BACKEND_MARKERS:
            item.add_marker(getattr(pytest.mark, BACKEND_MARKERS[backend]))


# -- LangGraph's PostgresSaver (test_health, test_check_foreign) ----------------------


@pytest.fixture
def mongo_url() -> Iterator[str]:
    """A fresh database for LangGraph's MongoDBSaver (tests/copy_savers.py), dropped afterwards."""
    name = f"gk_mdb_{uuid.uuid4().hex[:10]}"
    yield f"{MONGODB_URI.rstrip('/')}/{name}"
    from pymongo import MongoClient

    client: MongoClient[Any] = MongoClient(MONGODB_URI)
    try:
        client.drop_database(name)
    finally:
        client.close()


@pytest.fixture
def postgres_url() -> Iterator[str]:
    """A URL of the ./dev PostgreSQL whose ``search_path`` is a fresh schema, dropped after
    the test: PostgresSaver's tables (unqualified names) and graphkeep's queries land there."""
    import psycopg
    from psycopg import sql

    schema = f"gk_test_{uuid.uuid4().hex[:10]}"
    try:
        admin = psycopg.connect(POSTGRES_URL, autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as exc:
        pytest.fail(
            f"no PostgreSQL at {mask_url(POSTGRES_URL)} ({' '.join(str(exc).split())}):"
            " run ./dev services up postgres, or set POSTGRES_URL",
            pytrace=False,
        )
    with admin:
        admin.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
        try:
            joiner = "&" if "?" in POSTGRES_URL else "?"
            yield f"{POSTGRES_URL}{joiner}options=-csearch_path%3D{schema}"
        finally:
            admin.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))


def postgres_saver(url: str) -> Any:
    from langgraph.checkpoint.postgres import PostgresSaver

    return PostgresSaver.from_conn_string(url)


# -- the DynamoDB actions graphkeep sends, against the IAM policy it prints -------------


def pytest_configure(config: pytest.Config) -> None:
    from tests import dynamodb_actions

    dynamodb_actions.install()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    from tests import dynamodb_actions

    dynamodb_actions.CURRENT[0] = item.nodeid
    try:
        return (yield)
    finally:
        dynamodb_actions.CURRENT[0] = "<no test>"


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Fail the session when graphkeep sent a DynamoDB action the printed policy lacks."""
    from graphkeep.backends.dynamodb.iam import iam_policy, policy_actions
    from tests import dynamodb_actions

    allowed = policy_actions(iam_policy("graphkeep"))
    missing = {a: t for a, t in dynamodb_actions.RECORDED.items() if a not in allowed}
    if missing:
        lines = [f"  dynamodb:{a} (first sent by {t})" for a, t in sorted(missing.items())]
        print(
            "\ngraphkeep sent DynamoDB actions the IAM policy of --print-iam-policy lacks"
            " (src/graphkeep/backends/dynamodb/iam.py):\n" + "\n".join(lines),
            file=sys.stderr,
        )
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
