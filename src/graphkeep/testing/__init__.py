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
- ``--graphkeep-servers=env|local|containers`` (default ``$GRAPHKEEP_SERVERS`` or
  ``containers``): ``env`` takes the servers' URLs from ``GRAPHKEEP_REDIS_URL``,
  ``GRAPHKEEP_REDIS_CLUSTER_URL``, ``GRAPHKEEP_MONGODB_URL``, ``GRAPHKEEP_DYNAMODB_URL``;
  ``local`` starts server processes on loopback (``redis-server``; ``mongod``, else FerretDB's
  ``ferretdb``; ``moto_server``; each overridable with ``GRAPHKEEP_REDIS_SERVER``,
  ``GRAPHKEEP_MONGODB_SERVER``, ``GRAPHKEEP_DYNAMODB_SERVER``); ``containers`` starts one
  container per backend with testcontainers, from ``GRAPHKEEP_REDIS_IMAGE`` (default
  :data:`DEFAULT_IMAGES`), ``GRAPHKEEP_MONGODB_IMAGE`` (a real ``mongod``) and
  ``GRAPHKEEP_DYNAMODB_IMAGE`` (moto; DynamoDB Local works too). Servers start on first use,
  one per backend per session, and are removed at its end, also after a failure or Ctrl-C.

An application that reads its own variables at import (``REDIS_URL = os.environ[...]``) gets
the session's servers through the ini option ``graphkeep_env``, one ``VARIABLE=backend`` per
line (``VARIABLE=backend:param`` takes one query parameter of the URL, e.g.
``DYNAMODB_ENDPOINT_URL=dynamodb:endpoint_url``): the named backends' servers are then started
before any conftest is imported and each variable is set to its server's URL.
"""

from __future__ import annotations

import atexit
import importlib.util
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit, urlunsplit
from uuid import uuid4

import pytest

import graphkeep
from graphkeep.errors import StorageUnavailable, mask_url

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
SERVER_MODES = ("env", "local", "containers")
#: ``--graphkeep-servers=local``: the variable that may name each backend's server program
SERVER_VARIABLES = {
    "redis": "GRAPHKEEP_REDIS_SERVER",
    "redis-cluster": "GRAPHKEEP_REDIS_SERVER",
    "mongodb": "GRAPHKEEP_MONGODB_SERVER",
    "dynamodb": "GRAPHKEEP_DYNAMODB_SERVER",
}
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
        help="env: URLs from GRAPHKEEP_*_URL; local: server processes on loopback; containers:"
        " testcontainers; one server per backend per session (default: $GRAPHKEEP_SERVERS or"
        " containers)",
    )
    parser.addini(
        "graphkeep_env",
        type="linelist",
        default=[],
        help="VARIABLE=backend[:param] per line: start those servers before conftests are"
        " imported and set VARIABLE to the server's URL (or to that query parameter of it)",
    )


def _option(config: pytest.Config, dest: str) -> Any:
    """A command-line option's value, also before the command line is fully parsed."""
    value = getattr(config.option, dest, None)
    if value is None:
        value = getattr(getattr(config, "known_args_namespace", None), dest, None)
    return value


def selected_backends(config: pytest.Config) -> list[str]:
    raw = _option(config, "graphkeep_backends")
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
    mode = _option(config, "graphkeep_servers") or os.environ.get("GRAPHKEEP_SERVERS")
    mode = mode or "containers"
    if mode not in SERVER_MODES:
        raise pytest.UsageError(
            f"GRAPHKEEP_SERVERS={mode!r}: choose from {', '.join(SERVER_MODES)}"
        )
    return mode


def pytest_configure(config: pytest.Config) -> None:
    selected_backends(config)  # bad values: a usage error at the start, not per test
    server_mode(config)


_SERVERS = pytest.StashKey["Servers"]()


def session_servers(config: pytest.Config) -> Servers:
    """The session's :class:`Servers` (one per pytest run, closed when it ends)."""
    servers = config.stash.get(_SERVERS, None)
    if servers is None:
        servers = config.stash[_SERVERS] = Servers(server_mode(config))
        atexit.register(servers.close)  # also after Ctrl-C or a crash of the session
    return servers


def exports(config: pytest.Config) -> dict[str, tuple[str, str | None]]:
    """``graphkeep_env`` as ``{variable: (backend, query parameter or None)}``."""
    found: dict[str, tuple[str, str | None]] = {}
    for line in config.getini("graphkeep_env"):
        variable, sep, target = str(line).partition("=")
        backend, _, param = target.strip().partition(":")
        if not sep or not variable.strip() or backend not in BACKENDS:
            raise pytest.UsageError(
                f"graphkeep_env: {line!r} is not VARIABLE=backend[:param] with a backend of"
                f" {', '.join(BACKENDS)}"
            )
        found[variable.strip()] = (backend, param.strip() or None)
    return found


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config) -> None:
    """Start the servers ``graphkeep_env`` names and export their URLs, before any conftest."""
    wanted = exports(early_config)
    if not wanted:
        return
    backends = selected_backends(early_config)
    servers = session_servers(early_config)
    for variable, (backend, param) in wanted.items():
        if backend not in backends:
            continue
        try:
            url = servers.url(backend)
        except GraphkeepTestingError as exc:
            raise pytest.UsageError(f"graphkeep_env {variable}: {exc}") from exc
        os.environ[variable] = _query_param(url, param) if param else url


def _query_param(url: str, param: str) -> str:
    values = parse_qs(urlsplit(url).query).get(param)
    if not values:
        raise pytest.UsageError(f"graphkeep_env: {mask_url(url)} has no {param!r} parameter")
    return values[0]


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


# --------------------------------------------------------------------------- servers


@dataclass
class Servers:
    """The session's server per backend: its base URL, started on first use."""

    mode: str
    session: str = field(default_factory=lambda: uuid4().hex[:12])
    urls: dict[str, str] = field(default_factory=dict)
    failures: dict[str, str] = field(default_factory=dict)
    containers: list[Any] = field(default_factory=list)
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    workdir: Path | None = None

    def url(self, backend: str) -> str:
        if backend in self.failures:  # one clear failure, not one slow retry per test
            raise GraphkeepTestingError(self.failures[backend])
        if backend not in self.urls:
            try:
                start = {"env": self._from_env, "local": self._local, "containers": self._start}
                self.urls[backend] = start[self.mode](backend)
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

    # -- local processes -----------------------------------------------------------

    def _local(self, backend: str) -> str:
        variable = SERVER_VARIABLES[backend]
        if backend == "dynamodb":
            return self._local_dynamodb(variable)
        names = ("redis-server",) if backend.startswith("redis") else ("mongod", "ferretdb")
        program = os.environ.get(variable) or next(filter(None, map(shutil.which, names)), None)
        if not program:
            raise GraphkeepTestingError(
                f"--graphkeep-servers=local needs {' or '.join(names)} on PATH (or {variable}"
                " naming it); or use --graphkeep-servers=containers"
            )
        if backend == "redis":
            port = _free_ports(1)[0]
            self._process("redis", _redis_command(program, port), lambda: _redis_ping(_r(port)))
            return _r(port)
        if backend == "redis-cluster":
            return self._local_cluster(program)
        return self._local_mongodb(program)

    def _work(self, name: str) -> Path:
        if self.workdir is None:
            self.workdir = Path(tempfile.mkdtemp(prefix=f"graphkeep-{self.session}-"))
        path = self.workdir / name
        path.mkdir(parents=True, exist_ok=True)
        return path

    def _process(self, name: str, command: list[str], ready: Callable[[], bool]) -> None:
        """Run ``command`` in its own directory until the session ends; wait until ``ready``."""
        work = self._work(name)
        with (work / "server.log").open("ab") as log:
            try:
                process = subprocess.Popen(
                    command,
                    cwd=work,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,  # Ctrl-C reaches pytest, which then stops it
                    preexec_fn=_die_with_parent,
                )
            except OSError as exc:
                raise GraphkeepTestingError(
                    f"--graphkeep-servers=local cannot start {name} with {command[0]}"
                    f" ({type(exc).__name__}: {exc.strerror or exc})"
                ) from exc
        self.processes.append(process)

        def exited() -> str | None:
            if process.poll() is None:
                return None
            return (work / "server.log").read_text(errors="replace")[-1500:]

        _wait(f"{name} ({command[0]})", ready, exited)

    def _local_cluster(self, program: str) -> str:
        ports = _free_ports(3)
        for port in ports:
            self._process(
                f"redis-cluster-{port}",
                _redis_command(program, port, "--cluster-enabled", "yes"),
                lambda port=port: _redis_ping(_r(port)),  # type: ignore[misc]
            )
        return _form_cluster("Redis Cluster", ports)

    def _local_mongodb(self, program: str) -> str:
        port = _free_ports(1)[0]
        data = self._work("mongodb-data")
        if Path(program).name.startswith("mongod"):
            command = [program, "--port", str(port), "--bind_ip", "127.0.0.1"]
            command += ["--dbpath", str(data), "--quiet"]
        else:
            command = ferretdb_command(program, data, port)
        url = f"mongodb://127.0.0.1:{port}/"
        self._process("mongodb", command, lambda: _mongo_ping(url))
        return url

    def _local_dynamodb(self, variable: str) -> str:
        configured = os.environ.get(variable)
        command = shlex.split(configured) if configured else [shutil.which("moto_server") or ""]
        if not command or not command[0]:
            raise GraphkeepTestingError(
                f"--graphkeep-servers=local needs moto_server on PATH (pip install"
                f" 'moto[server]') or {variable} naming a command that takes -H HOST -p PORT"
            )
        port = _free_ports(1)[0]
        _dynamo_credentials()
        url = f"dynamodb://graphkeep?region={REGION}&endpoint_url=http://127.0.0.1:{port}"
        self._process(
            "dynamodb", [*command, "-H", "127.0.0.1", "-p", str(port)], lambda: _dynamo_ping(url)
        )
        return url

    # -- containers ----------------------------------------------------------------

    def _start(self, backend: str) -> str:
        os.environ.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")
        os.environ.setdefault("TESTCONTAINERS_CONNECTION_MODE", "docker_host")
        client = _docker()
        if not self.urls:
            _remove_orphans(client)
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

        labels = {
            LABEL: "1",
            f"{LABEL}.session": self.session,
            f"{LABEL}.host": socket.gethostname(),
            f"{LABEL}.pid": str(os.getpid()),
        }
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
        _wait(f"{what} in {image}", lambda: ready(url), _exited(container))
        return url

    def _redis(self, image: str) -> str:
        return self._single(
            "Redis", image, 6379, lambda host, port: f"redis://{host}:{port}/0", _redis_ping
        )

    def _redis_cluster(self, image: str) -> str:
        # three nodes in one container on host ports bound 1:1, announced as 127.0.0.1, so the
        # cluster's own addresses are the ones this machine reaches them at
        ports = _free_ports(3)
        servers = " & ".join(
            f"redis-server --port {p} --bind 0.0.0.0 --protected-mode no --cluster-enabled yes"
            f" --cluster-config-file /tmp/nodes-{p}.conf --cluster-announce-ip 127.0.0.1"
            f" --save '' --appendonly no"
            for p in ports
        )
        container = self._container(image, bind=ports, script=f"{servers} & wait")
        return _form_cluster(f"Redis Cluster in {image}", ports, _exited(container))

    def _mongodb(self, image: str) -> str:
        return self._single(
            "MongoDB", image, 27017, lambda host, port: f"mongodb://{host}:{port}/", _mongo_ping
        )

    def _dynamodb(self, image: str) -> str:
        _dynamo_credentials()
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
        while self.processes:
            process = self.processes.pop()
            if process.poll() is None:
                process.terminate()
                try:
                    process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir = None


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


def _remove_orphans(client: Any) -> None:
    """Remove what an earlier session on this host left when it was killed (kill -9: no exit)."""
    host = socket.gethostname()
    for container in client.containers.list(all=True, filters={"label": f"{LABEL}.host={host}"}):
        pid = int(container.labels.get(f"{LABEL}.pid", "0") or 0)
        try:
            if pid > 0:
                os.kill(pid, 0)
                continue  # that session is still running
        except ProcessLookupError:
            pass
        except PermissionError:
            continue  # alive, someone else's
        container.remove(force=True)


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


def ferretdb_command(program: str, data: Path, port: int) -> list[str]:
    """FerretDB on SQLite in ``data`` on 127.0.0.1:``port``, as graphkeep's ./dev runs it:
    a write transaction takes SQLite's lock when it begins and writers queue for it up to
    60 s, so concurrent writers wait instead of failing with SQLITE_BUSY."""
    query = "_txlock=immediate&_pragma=busy_timeout(60000)"
    return [
        program,
        "--handler=sqlite",
        f"--sqlite-url=file:{data}/?{query}",
        f"--state-dir={data}",
        f"--listen-addr=127.0.0.1:{port}",
        "--debug-addr=-",
        "--telemetry=disable",
        "--log-level=warn",
    ]


def _r(port: int) -> str:
    return f"redis://127.0.0.1:{port}/0"


def _redis_command(program: str, port: int, *extra: str) -> list[str]:
    return [
        program,
        *("--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"),
        *("--cluster-config-file", f"nodes-{port}.conf", "--daemonize", "no", *extra),
    ]


def _form_cluster(
    what: str, ports: list[int], exited: Callable[[], str | None] = lambda: None
) -> str:
    """Empty cluster-enabled nodes on 127.0.0.1 ``ports`` (local processes, or one container
    with its ports bound 1:1) made one cluster: slots split evenly, every node meets the first.
    """
    import redis

    _wait(f"{what} nodes", lambda: all(_redis_ping(_r(port)) for port in ports), exited)
    share = 16384 // len(ports)
    for i, port in enumerate(ports):
        last = 16384 if i == len(ports) - 1 else (i + 1) * share
        with redis.Redis(host="127.0.0.1", port=port) as node:
            node.execute_command("CLUSTER", "ADDSLOTS", *range(i * share, last))
            if i:
                node.execute_command("CLUSTER", "MEET", "127.0.0.1", ports[0])
    _wait(what, lambda: _cluster_ok(ports[0]), exited)
    return f"redis+cluster://127.0.0.1:{ports[0]}"


def _die_with_parent() -> None:
    """In the child: be killed when pytest dies, even by kill -9 (Linux; elsewhere a no-op)."""
    if sys.platform.startswith("linux"):
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)


def _dynamo_credentials() -> None:
    # the session's own endpoint accepts any credentials; boto3 insists on some
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "graphkeep-testing")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "graphkeep-testing")


def _free_ports(count: int) -> list[int]:
    ports: list[int] = []
    while len(ports) < count:
        with closing(socket.socket()) as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        if port not in ports and port + 10000 < 65536:
            ports.append(port)
    return ports


def _wait(
    what: str, ready: Callable[[], bool], exited: Callable[[], str | None] = lambda: None
) -> None:
    """Until ``ready()`` answers; fail at once with ``exited()``'s log when the server is gone."""
    deadline = time.monotonic() + START_TIMEOUT
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
    raise GraphkeepTestingError(f"{what} did not answer within {START_TIMEOUT:.0f}s")


def _exited(container: Any) -> Callable[[], str | None]:
    """The container's last log lines once it has exited, else None."""

    def check() -> str | None:
        wrapped = container.get_wrapped_container()
        wrapped.reload()
        if wrapped.status != "exited":
            return None
        return str(wrapped.logs(tail=20).decode(errors="replace"))

    return check


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
def graphkeep_servers(request: pytest.FixtureRequest) -> Servers:
    """The session's servers (started on first use, one per backend; removed at the end)."""
    return session_servers(request.config)


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
