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
  ``dynamodb``).

Options:

- ``--graphkeep-backends=redis,redis-cluster,mongodb,dynamodb`` (default: every backend
  whose extra is installed);
- ``--graphkeep-servers=env|containers`` (default ``$GRAPHKEEP_SERVERS`` or ``containers``):
  ``env`` takes the servers' URLs from ``GRAPHKEEP_REDIS_URL``, ``GRAPHKEEP_REDIS_CLUSTER_URL``,
  ``GRAPHKEEP_MONGODB_URL``, ``GRAPHKEEP_DYNAMODB_URL``; ``containers`` starts one container per
  backend per session with testcontainers, from ``GRAPHKEEP_REDIS_IMAGE`` (default
  :data:`DEFAULT_IMAGES`), ``GRAPHKEEP_MONGODB_IMAGE`` (a real ``mongod``) and
  ``GRAPHKEEP_DYNAMODB_IMAGE`` (moto; DynamoDB Local works too), and removes them at the end
  of the session, also after a failure or Ctrl-C.
"""

from __future__ import annotations

import atexit
import importlib.util
import os
import socket
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import closing
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode, urlsplit, urlunsplit
from uuid import uuid4

import pytest

import graphkeep
from graphkeep.errors import StorageUnavailable
from graphkeep.shared.keys import mask_url

BACKENDS = ("redis", "redis-cluster", "mongodb", "dynamodb")
#: the module each backend's extra installs: a backend is selected by default when it imports
DRIVERS = {"redis": "redis", "redis-cluster": "redis", "mongodb": "pymongo", "dynamodb": "boto3"}
URL_VARIABLES = {
    "redis": "GRAPHKEEP_REDIS_URL",
    "redis-cluster": "GRAPHKEEP_REDIS_CLUSTER_URL",
    "mongodb": "GRAPHKEEP_MONGODB_URL",
    "dynamodb": "GRAPHKEEP_DYNAMODB_URL",
}
IMAGE_VARIABLES = {
    "redis": "GRAPHKEEP_REDIS_IMAGE",
    "redis-cluster": "GRAPHKEEP_REDIS_IMAGE",
    "mongodb": "GRAPHKEEP_MONGODB_IMAGE",
    "dynamodb": "GRAPHKEEP_DYNAMODB_IMAGE",
}
DEFAULT_IMAGES = {
    "GRAPHKEEP_REDIS_IMAGE": "redis:7",
    "GRAPHKEEP_MONGODB_IMAGE": "mongo:7",
    "GRAPHKEEP_DYNAMODB_IMAGE": "motoserver/moto:5.2.5",
}
SERVER_MODES = ("env", "containers")
#: every container this plugin starts carries this label (and one naming its session)
LABEL = "dev.graphkeep.testing"
START_TIMEOUT = 90.0
REGION = "us-east-1"


class GraphkeepTestingError(Exception):
    """A set-up problem of the plugin (no engine, missing image or URL): one clear line."""


# --------------------------------------------------------------------------- options


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("graphkeep", "graphkeep backends for the graphkeep_* fixtures")
    group.addoption(
        "--graphkeep-backends",
        default=None,
        help="comma list of redis, redis-cluster, mongodb, dynamodb"
        " (default: every backend whose extra is installed)",
    )
    group.addoption(
        "--graphkeep-servers",
        default=None,
        choices=SERVER_MODES,
        help="env: URLs from GRAPHKEEP_*_URL; containers: one testcontainers container per"
        " backend per session (default: $GRAPHKEEP_SERVERS or containers)",
    )


def selected_backends(config: pytest.Config) -> list[str]:
    raw = config.getoption("graphkeep_backends")
    if raw is None:
        return [b for b in BACKENDS if importlib.util.find_spec(DRIVERS[b]) is not None]
    names = [n.strip() for n in str(raw).split(",") if n.strip()]
    unknown = [n for n in names if n not in BACKENDS]
    if unknown or not names:
        raise pytest.UsageError(
            f"--graphkeep-backends: unknown {', '.join(unknown) or '(empty list)'};"
            f" choose from {', '.join(BACKENDS)}"
        )
    return list(dict.fromkeys(names))


def server_mode(config: pytest.Config) -> str:
    mode = config.getoption("graphkeep_servers") or os.environ.get("GRAPHKEEP_SERVERS")
    mode = mode or "containers"
    if mode not in SERVER_MODES:
        raise pytest.UsageError(
            f"GRAPHKEEP_SERVERS={mode!r}: choose from {', '.join(SERVER_MODES)}"
        )
    return mode


def pytest_configure(config: pytest.Config) -> None:
    selected_backends(config)  # bad values: a usage error at the start, not per test
    server_mode(config)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "graphkeep_backend" in metafunc.fixturenames:
        names = selected_backends(metafunc.config)
        metafunc.parametrize("graphkeep_backend", names, ids=names, scope="session")


# --------------------------------------------------------------------------- servers


@dataclass
class Servers:
    """The session's server per backend: its base URL, started on first use."""

    mode: str
    session: str = field(default_factory=lambda: uuid4().hex[:12])
    urls: dict[str, str] = field(default_factory=dict)
    failures: dict[str, str] = field(default_factory=dict)
    containers: list[Any] = field(default_factory=list)

    def url(self, backend: str) -> str:
        if backend in self.failures:  # one clear failure, not one slow retry per test
            raise GraphkeepTestingError(self.failures[backend])
        if backend not in self.urls:
            try:
                self.urls[backend] = (
                    self._from_env(backend) if self.mode == "env" else self._start(backend)
                )
            except GraphkeepTestingError as exc:
                self.failures[backend] = str(exc)
                raise
        return self.urls[backend]

    @staticmethod
    def _from_env(backend: str) -> str:
        variable = URL_VARIABLES[backend]
        url = os.environ.get(variable, "").strip()
        if not url:
            raise GraphkeepTestingError(
                f"--graphkeep-servers=env and {variable} is not set: set it to your {backend}"
                f" server's URL, or leave {backend} out with --graphkeep-backends"
            )
        return url

    # -- containers ----------------------------------------------------------------

    def _start(self, backend: str) -> str:
        os.environ.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")
        os.environ.setdefault("TESTCONTAINERS_CONNECTION_MODE", "docker_host")
        client = _docker()
        variable = IMAGE_VARIABLES[backend]
        image = os.environ.get(variable) or DEFAULT_IMAGES[variable]
        _ensure_image(client, image, variable)
        start = {
            "redis": self._redis,
            "redis-cluster": self._redis_cluster,
            "mongodb": self._mongodb,
            "dynamodb": self._dynamodb,
        }[backend]
        return start(image)

    def _container(
        self,
        image: str,
        port: int | None = None,
        *,
        bind: tuple[int, ...] | list[int] = (),
        script: str | None = None,
    ) -> Any:
        from testcontainers.core.container import DockerContainer

        labels = {LABEL: "1", f"{LABEL}.session": self.session}
        if script is None:
            container = DockerContainer(image, labels=labels)
        else:
            command: Any = ["-c", script]  # docker's API takes a list; the stub says str
            container = DockerContainer(image, command=command, entrypoint="sh", labels=labels)
        if port is not None:
            container.with_exposed_ports(port)
        for host_port in bind:
            container.with_bind_ports(host_port, host_port)
        self.containers.append(container)
        container.start()
        return container

    def _single(
        self,
        what: str,
        image: str,
        port: int,
        url_of: Callable[[str, int], str],
        ready: Callable[[str], bool],
    ) -> str:
        """One container serving ``port``: its URL (from the mapped port) once ``ready``."""
        container = self._container(image, port)
        url = url_of(container.get_container_host_ip(), int(container.get_exposed_port(port)))
        _wait(f"{what} in {image}", container, lambda: ready(url))
        return url

    def _redis(self, image: str) -> str:
        return self._single(
            "Redis", image, 6379, lambda host, port: f"redis://{host}:{port}/0", _redis_ping
        )

    def _redis_cluster(self, image: str) -> str:
        # three nodes in one container on host ports bound 1:1, announced as 127.0.0.1, so the
        # cluster's own addresses are the ones this machine reaches them at
        ports = _free_ports(3)
        nodes = " ".join(f"127.0.0.1:{p}" for p in ports)
        servers = " & ".join(
            f"redis-server --port {p} --bind 0.0.0.0 --protected-mode no --cluster-enabled yes"
            f" --cluster-config-file /tmp/nodes-{p}.conf --cluster-announce-ip 127.0.0.1"
            f" --save '' --appendonly no"
            for p in ports
        )
        pings = " && ".join(f"until redis-cli -p {p} ping; do sleep 0.1; done" for p in ports)
        script = f"{servers} & {pings} && redis-cli --cluster create {nodes} --cluster-yes; wait"
        container = self._container(image, bind=ports, script=script)
        url = f"redis+cluster://127.0.0.1:{ports[0]}"
        _wait(f"Redis Cluster in {image}", container, lambda: _cluster_ok(ports[0]))
        return url

    def _mongodb(self, image: str) -> str:
        return self._single(
            "MongoDB", image, 27017, lambda host, port: f"mongodb://{host}:{port}/", _mongo_ping
        )

    def _dynamodb(self, image: str) -> str:
        # the session's own local endpoint accepts any credentials; boto3 insists on some
        os.environ.setdefault("AWS_ACCESS_KEY_ID", "graphkeep-testing")
        os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "graphkeep-testing")
        return self._single(
            "DynamoDB",
            image,
            8000 if "dynamodb-local" in image else 5000,
            lambda host, port: (
                f"dynamodb://graphkeep?region={REGION}&endpoint_url=http://{host}:{port}"
            ),
            _dynamo_ping,
        )

    def close(self) -> None:
        """Remove every container of this session (idempotent)."""
        while self.containers:
            container = self.containers.pop()
            try:
                container.stop()
            except Exception:  # noqa: BLE001 — already gone; the label sweep below still runs
                pass
        if self.mode == "containers" and self.urls:
            _remove_labelled(self.session)


def _docker() -> Any:
    try:
        import docker
        from testcontainers.core.container import DockerContainer  # noqa: F401
    except ImportError as exc:
        raise GraphkeepTestingError(
            f"--graphkeep-servers=containers needs testcontainers: pip install"
            f" 'graphkeep[testing]' ({exc})"
        ) from exc
    try:
        client = docker.from_env()
        client.ping()
    except Exception as exc:  # noqa: BLE001 — docker raises many kinds for "no engine"
        raise GraphkeepTestingError(
            "--graphkeep-servers=containers: no Docker engine answers (start one: `dockerd`,"
            " Docker Desktop, or `./dev containers up` in graphkeep's repository; or set"
            f" DOCKER_HOST), or use --graphkeep-servers=env ({type(exc).__name__})"
        ) from exc
    return client


def _ensure_image(client: Any, image: str, variable: str) -> None:
    import docker.errors

    try:
        client.images.get(image)
        return
    except docker.errors.ImageNotFound:
        pass
    try:
        client.images.pull(image)
    except Exception as exc:  # noqa: BLE001 — registry unreachable, unknown image, auth
        raise GraphkeepTestingError(
            f"image {image} is not on this Docker engine and cannot be pulled"
            f" ({type(exc).__name__}); set {variable} to an image you have (in graphkeep's"
            " repository `./dev containers up` builds local ones and writes their names to"
            " .services/containers.env)"
        ) from exc


def _remove_labelled(session: str) -> None:
    try:
        import docker

        client = docker.from_env()
        for container in client.containers.list(
            all=True, filters={"label": f"{LABEL}.session={session}"}
        ):
            container.remove(force=True)
    except Exception:  # noqa: BLE001 — best effort at exit; `docker ps -a --filter label=` shows leftovers
        pass


def _free_ports(count: int) -> list[int]:
    ports: list[int] = []
    while len(ports) < count:
        with closing(socket.socket()) as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        if port not in ports and port + 10000 < 65536:
            ports.append(port)
    return ports


def _wait(what: str, container: Any, ready: Callable[[], bool]) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        try:
            if ready():
                return
        except Exception:  # noqa: BLE001, S110 — not up yet
            pass
        container.get_wrapped_container().reload()
        if container.get_wrapped_container().status == "exited":
            logs = container.get_wrapped_container().logs(tail=20).decode(errors="replace")
            raise GraphkeepTestingError(f"{what} exited at start:\n{logs}")
        time.sleep(0.25)
    raise GraphkeepTestingError(f"{what} did not answer within {START_TIMEOUT:.0f}s")


def _redis_ping(url: str) -> bool:
    import redis

    with redis.Redis.from_url(url, socket_timeout=2) as client:
        return bool(client.ping())


def _cluster_ok(port: int) -> bool:
    import redis

    with redis.Redis(host="127.0.0.1", port=port, socket_timeout=2) as client:
        info = client.execute_command("CLUSTER", "INFO")
    text = info.decode() if isinstance(info, bytes) else str(info)
    return "cluster_state:ok" in text


def _mongo_ping(url: str) -> bool:
    import pymongo

    client: Any = pymongo.MongoClient(url, serverSelectionTimeoutMS=2000)
    with client:
        client.admin.command("ping")
    return True


def _dynamo_ping(url: str) -> bool:
    from graphkeep.backends.dynamodb import parse_url

    _dynamo_client(parse_url(url)[1].get("endpoint_url")).list_tables(Limit=1)
    return True


def _dynamo_client(endpoint: str | None) -> Any:
    import boto3

    credentials = {
        "aws_access_key_id": os.environ.get("AWS_ACCESS_KEY_ID", "graphkeep-testing"),
        "aws_secret_access_key": os.environ.get("AWS_SECRET_ACCESS_KEY", "graphkeep-testing"),
    }
    return boto3.client("dynamodb", region_name=REGION, endpoint_url=endpoint, **credentials)


@pytest.fixture(scope="session")
def graphkeep_servers(request: pytest.FixtureRequest) -> Iterator[Servers]:
    """The session's servers (started lazily, one per backend; removed at the end)."""
    servers = Servers(server_mode(request.config))
    atexit.register(servers.close)  # also after Ctrl-C or a crash of the session
    try:
        yield servers
    finally:
        servers.close()


# --------------------------------------------------------------------------- per test


def _isolated(backend: str, base: str, tag: str) -> tuple[str, Callable[[], None]]:
    """A URL on ``base`` private to one test, and how to remove its data afterwards."""
    name = f"gk_{tag}"
    parts = urlsplit(base)
    if backend in ("redis", "redis-cluster"):
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
    client = _dynamo_client(kwargs.get("endpoint_url"))
    try:
        client.delete_table(TableName=name)
    except client.exceptions.ResourceNotFoundException:
        pass


@pytest.fixture
def graphkeep_url(graphkeep_backend: str, graphkeep_servers: Servers) -> Iterator[str]:
    """A URL of ``graphkeep_backend``'s server private to this test (removed after it)."""
    try:
        base = graphkeep_servers.url(graphkeep_backend)
    except GraphkeepTestingError as exc:
        pytest.fail(str(exc), pytrace=False)
    url, drop = _isolated(graphkeep_backend, base, uuid4().hex[:12])
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
    with graphkeep.connect(graphkeep_url) as saver:
        yield saver


@pytest.fixture
def graphkeep_store(graphkeep_url: str) -> Iterator[Any]:
    """A ready sync LangGraph store on the test's own data."""
    with graphkeep.connect_store(graphkeep_url) as store:
        yield store


try:  # the async fixtures need pytest-asyncio (in graphkeep[testing])
    import pytest_asyncio
except ImportError:  # pragma: no cover — then only the sync fixtures exist
    pass
else:

    @pytest_asyncio.fixture
    async def graphkeep_asaver(graphkeep_url: str) -> AsyncIterator[Any]:
        """A ready async checkpoint saver on the test's own data."""
        async with graphkeep.aconnect(graphkeep_url) as saver:
            yield saver

    @pytest_asyncio.fixture
    async def graphkeep_astore(graphkeep_url: str) -> AsyncIterator[Any]:
        """A ready async LangGraph store on the test's own data."""
        async with graphkeep.aconnect_store(graphkeep_url) as store:
            yield store
