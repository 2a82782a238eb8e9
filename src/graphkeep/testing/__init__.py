"""``graphkeep.testing``: test your own graphs on every graphkeep backend, from pytest.

Registered as a pytest plugin (entry point ``pytest11``) when graphkeep is installed, also
loadable with ``-p graphkeep.testing``. Every test that uses one of its fixtures runs once
per selected backend (the test id names it), each on its own isolated data::

    def test_my_graph(graphkeep_saver):
        graph = builder.compile(checkpointer=graphkeep_saver)
        ...

Fixtures (prefixed, so they never clash with a project's own ``checkpointer`` fixtures):

- ``graphkeep_url`` — a URL for ``graphkeep.connect`` and friends, private to the test: a
  fresh ``key_prefix`` (Redis, in the URL's query), database (MongoDB) or table (DynamoDB),
  removed after the test;
- ``graphkeep_saver`` / ``graphkeep_asaver`` — a ready sync / async checkpoint saver on it;
- ``graphkeep_store`` / ``graphkeep_astore`` — a ready sync / async LangGraph store on it;
- ``graphkeep_backend`` — the backend's name (``redis``, ``redis-cluster``, ``mongodb``,
  ``dynamodb``, ``valkey``, ``valkey-cluster``).

Options:

- ``--graphkeep-backends=redis,redis-cluster,mongodb,dynamodb`` (default: each of these four
  whose extra is installed); ``valkey`` and ``valkey-cluster`` (Valkey 8: a server and a 3-node
  cluster, on the Redis backend) are opt-in: named here, or by a ``graphkeep_env`` line;
- ``--graphkeep-rules=elasticache-serverless,…`` (default ``$GRAPHKEEP_RULES``): every
  request the session's clients send must follow those managed services' rules
  (:mod:`graphkeep.testing.rules`); a refused request fails the test that sent it;
- ``--graphkeep-servers=env|local|containers`` (default ``$GRAPHKEEP_SERVERS`` or
  ``containers``): ``env`` takes the servers' URLs from ``GRAPHKEEP_REDIS_URL``,
  ``GRAPHKEEP_REDIS_CLUSTER_URL``, ``GRAPHKEEP_MONGODB_URL``, ``GRAPHKEEP_DYNAMODB_URL``,
  ``GRAPHKEEP_VALKEY_URL``, ``GRAPHKEEP_VALKEY_CLUSTER_URL``; ``local`` starts server
  processes on loopback (``redis-server``; ``mongod``, else FerretDB's ``ferretdb``;
  ``moto_server``; ``valkey-server``; each overridable with ``GRAPHKEEP_REDIS_SERVER``,
  ``GRAPHKEEP_MONGODB_SERVER``, ``GRAPHKEEP_DYNAMODB_SERVER``, ``GRAPHKEEP_VALKEY_SERVER``);
  ``containers`` starts one container per backend with testcontainers, from
  ``GRAPHKEEP_REDIS_IMAGE`` (default :data:`DEFAULT_IMAGES`), ``GRAPHKEEP_MONGODB_IMAGE`` (a
  real ``mongod``), ``GRAPHKEEP_DYNAMODB_IMAGE`` (moto; DynamoDB Local works too) and
  ``GRAPHKEEP_VALKEY_IMAGE`` (``valkey/valkey:8``). Servers start on first use,
  one per backend per session, and are removed at its end, also after a failure or Ctrl-C.

An application that reads its own variables at import (``REDIS_URL = os.environ[...]``) gets
the session's servers through the ini option ``graphkeep_env``, one ``VARIABLE=backend`` per
line (``VARIABLE=backend:param`` takes one query parameter of the URL, e.g.
``DYNAMODB_ENDPOINT_URL=dynamodb:endpoint_url``): the named backends' servers are then started
before any conftest is imported and each variable is set to its server's URL (an opt-in
backend's too, unless ``--graphkeep-backends`` leaves it out).

This module is the plugin pytest loads: its hooks and fixtures. The servers are started by
:mod:`graphkeep.testing.servers` (with :mod:`~graphkeep.testing.local`, whose server processes,
:mod:`~graphkeep.testing.processes`, also run graphkeep's own ``./dev services``, and
:mod:`~graphkeep.testing.containers`), each test's private data is
:mod:`graphkeep.testing.isolation`'s (docs/architecture.md).
"""

from __future__ import annotations

import atexit
import os
from collections.abc import AsyncIterator, Iterator
from typing import Any
from uuid import uuid4

import pytest

from graphkeep.connect import aconnect, aconnect_store, connect, connect_store
from graphkeep.errors import StorageUnavailable, mask_url
from graphkeep.testing.aws import REGION
from graphkeep.testing.containers import DEFAULT_IMAGES, IMAGE_VARIABLES, LABEL
from graphkeep.testing.errors import GraphkeepTestingError
from graphkeep.testing.isolation import isolated
from graphkeep.testing.local import SERVER_VARIABLES, ferretdb_command
from graphkeep.testing.options import (
    BACKENDS,
    DRIVERS,
    SERVER_MODES,
    exports,
    query_param,
    selected_backends,
    server_mode,
)
from graphkeep.testing.probes import START_TIMEOUT
from graphkeep.testing.rules import plugin as rules_plugin
from graphkeep.testing.servers import URL_VARIABLES, Servers

__all__ = [
    "BACKENDS",
    "DEFAULT_IMAGES",
    "DRIVERS",
    "IMAGE_VARIABLES",
    "LABEL",
    "REGION",
    "SERVER_MODES",
    "SERVER_VARIABLES",
    "START_TIMEOUT",
    "URL_VARIABLES",
    "GraphkeepTestingError",
    "Servers",
    "exports",
    "ferretdb_command",
    "selected_backends",
    "server_mode",
    "session_servers",
]


# --------------------------------------------------------------------------- hooks


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("graphkeep", "graphkeep backends for the graphkeep_* fixtures")
    group.addoption(
        "--graphkeep-backends",
        default=None,
        help="comma list of redis, redis-cluster, mongodb, dynamodb, valkey, valkey-cluster"
        " (default: the first four whose extra is installed)",
    )
    group.addoption(
        "--graphkeep-servers",
        default=None,
        choices=SERVER_MODES,
        help="env: URLs from GRAPHKEEP_*_URL; local: server processes on loopback; containers:"
        " testcontainers; one server per backend per session (default: $GRAPHKEEP_SERVERS or"
        " containers)",
    )
    rules_plugin.addoption(group)
    parser.addini(
        "graphkeep_env",
        type="linelist",
        default=[],
        help="VARIABLE=backend[:param] per line: start those servers before conftests are"
        " imported and set VARIABLE to the server's URL (or to that query parameter of it)",
    )


def pytest_configure(config: pytest.Config) -> None:
    selected_backends(config)  # bad values: a usage error at the start, not per test
    server_mode(config)
    rules_plugin.configure(config)  # --graphkeep-rules: every request checked (rules/)


_SERVERS = pytest.StashKey[Servers]()


def session_servers(config: pytest.Config) -> Servers:
    """The session's :class:`Servers` (one per pytest run, closed when it ends)."""
    servers = config.stash.get(_SERVERS, None)
    if servers is None:
        servers = config.stash[_SERVERS] = Servers(server_mode(config))
        atexit.register(servers.close)  # also after Ctrl-C or a crash of the session
    return servers


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config) -> None:
    """Start the servers ``graphkeep_env`` names and export their URLs, before any conftest."""
    wanted = exports(early_config)
    if not wanted:
        return
    backends = selected_backends(early_config, opt_in=True)
    servers = session_servers(early_config)
    for variable, (backend, param) in wanted.items():
        if backend not in backends:
            continue
        try:
            url = servers.url(backend)
        except GraphkeepTestingError as exc:
            raise pytest.UsageError(f"graphkeep_env {variable}: {exc}") from exc
        os.environ[variable] = query_param(url, param) if param else url


def _servers_line(config: pytest.Config) -> str:
    servers = config.stash.get(_SERVERS, None)
    used = ", ".join(f"{b} {mask_url(u)}" for b, u in (servers.urls if servers else {}).items())
    return f"graphkeep: servers={server_mode(config)}" + (f"; {used}" if used else "")


def pytest_report_header(config: pytest.Config) -> str:
    return _servers_line(config)


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    if config.stash.get(_SERVERS, None) is not None:
        terminalreporter.write_line(_servers_line(config))


def pytest_unconfigure(config: pytest.Config) -> None:
    servers = config.stash.get(_SERVERS, None)
    if servers is not None:
        servers.close()


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "graphkeep_backend" in metafunc.fixturenames:
        names = selected_backends(metafunc.config)
        metafunc.parametrize("graphkeep_backend", names, ids=names, scope="session")


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="session")
def graphkeep_servers(request: pytest.FixtureRequest) -> Servers:
    """The session's servers (started on first use, one per backend; removed at the end)."""
    return session_servers(request.config)


@pytest.fixture
def graphkeep_url(graphkeep_backend: str, graphkeep_servers: Servers) -> Iterator[str]:
    """A URL of ``graphkeep_backend``'s server private to this test (removed after it)."""
    try:
        base = graphkeep_servers.url(graphkeep_backend)
    except GraphkeepTestingError as exc:
        pytest.fail(str(exc), pytrace=False)
    url, drop = isolated(graphkeep_backend, base, uuid4().hex[:12])
    yield url
    try:
        drop()
    except Exception as exc:  # noqa: BLE001 — the server went away: say so, not a driver trace
        raise StorageUnavailable(
            f"{graphkeep_backend}: could not remove the test's data at {mask_url(url)}"
            f" ({type(exc).__name__}: {exc})"
        ) from exc


@pytest.fixture
def graphkeep_saver(graphkeep_url: str) -> Iterator[Any]:
    """A ready sync checkpoint saver on the test's own data."""
    with connect(graphkeep_url) as saver:
        yield saver


@pytest.fixture
def graphkeep_store(graphkeep_url: str) -> Iterator[Any]:
    """A ready sync LangGraph store on the test's own data."""
    with connect_store(graphkeep_url) as store:
        yield store


try:  # the async fixtures need pytest-asyncio (in graphkeep[testing])
    import pytest_asyncio
except ImportError:  # pragma: no cover — then only the sync fixtures exist
    pass
else:

    @pytest_asyncio.fixture
    async def graphkeep_asaver(graphkeep_url: str) -> AsyncIterator[Any]:
        """A ready async checkpoint saver on the test's own data."""
        async with aconnect(graphkeep_url) as saver:
            yield saver

    @pytest_asyncio.fixture
    async def graphkeep_astore(graphkeep_url: str) -> AsyncIterator[Any]:
        """A ready async LangGraph store on the test's own data."""
        async with aconnect_store(graphkeep_url) as store:
            yield store
