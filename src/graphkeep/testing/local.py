"""The backends' servers as processes on loopback (redis-server, a 3-node Redis Cluster, the
same two of valkey-server, mongod or FerretDB, moto_server): their command lines and files, for
``--graphkeep-servers=local`` (a session's, on free ports in a temporary directory) and for
``./dev services`` (fixed ports, files under .services/)."""

from __future__ import annotations

import os
import shlex
import shutil
import tempfile
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from graphkeep.testing.addresses import (
    dynamodb_url,
    free_ports,
    mongodb_url,
    redis_cluster_url,
    redis_url,
)
from graphkeep.testing.aws import set_placeholder_credentials
from graphkeep.testing.cluster import form_cluster
from graphkeep.testing.errors import GraphkeepTestingError
from graphkeep.testing.probes import dynamo_ping, mongo_ping, redis_ping
from graphkeep.testing.processes import Server

#: the variable that may name each backend's server program
SERVER_VARIABLES = {
    "redis": "GRAPHKEEP_REDIS_SERVER",
    "redis-cluster": "GRAPHKEEP_REDIS_SERVER",
    "mongodb": "GRAPHKEEP_MONGODB_SERVER",
    "dynamodb": "GRAPHKEEP_DYNAMODB_SERVER",
    "valkey": "GRAPHKEEP_VALKEY_SERVER",
    "valkey-cluster": "GRAPHKEEP_VALKEY_SERVER",
}
#: the Redis family's backends: single servers and 3-node clusters, and their server programs
SINGLE_SERVERS = ("redis", "valkey")
CLUSTER_SERVERS = ("redis-cluster", "valkey-cluster")
PROGRAMS = {"redis": "redis-server", "valkey": "valkey-server"}
CLUSTER_NODE = ("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf")


def redis_command(program: str, port: int, data: Path, *extra: str, durable: bool) -> list[str]:
    """redis-server on 127.0.0.1:``port`` in the foreground, its files in ``data``; ``durable``:
    with an append-only file, so its data (and a cluster node's) survives a restart."""
    return [
        program,
        *("--port", str(port), "--bind", "127.0.0.1", "--dir", str(data), "--save", ""),
        *("--appendonly", "yes" if durable else "no", "--daemonize", "no", *extra),
    ]


def mongod_command(program: str, data: Path, port: int) -> list[str]:
    """mongod on 127.0.0.1:``port`` with its data in ``data``."""
    return [
        program,
        *("--port", str(port), "--bind_ip", "127.0.0.1"),
        *("--dbpath", str(data), "--quiet"),
    ]


def ferretdb_command(program: str, data: Path, port: int) -> list[str]:
    """FerretDB on SQLite in ``data`` on 127.0.0.1:``port``: a write transaction takes SQLite's
    lock when it begins and writers queue for it up to 60 s, so concurrent writers wait instead
    of failing with SQLITE_BUSY; no fsync per commit (a killed server loses nothing, a crashed
    machine would: a test server's choice; the MongoDB tests' concurrent runs take 1.6x as long
    with it)."""
    query = "_txlock=immediate&_pragma=busy_timeout(60000)&_pragma=synchronous(off)"
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


#: FerretDB's Go runtime: no collection by heap growth (``GOGC=off``), a soft limit of 1 GiB
#: instead (``GOMEMLIMIT``), so its garbage collector runs when the heap nears 1 GiB rather than
#: each time it doubles. A filtered find decodes every document of its collection (FerretDB's
#: SQLite pushes down only a find by ``_id``) into short-lived garbage, and collecting it was a
#: fifth of FerretDB's CPU; the MongoDB tests' heaviest files cost FerretDB 36 % less CPU so
#: (129 s -> 83 s, peak 1.1 GB resident). Values in the environment of the process that starts
#: the server win (a smaller machine may set a lower ``GOMEMLIMIT``).
FERRETDB_ENVIRONMENT = {"GOGC": "off", "GOMEMLIMIT": "1GiB"}


def backend_servers(
    backend: str, program: list[str], ports: list[int], home: Path, *, session: bool
) -> tuple[str, list[Server]]:
    """The URL of ``backend``'s server on 127.0.0.1 ``ports`` (the cluster's three nodes: one
    each) and its processes, their files under ``home`` (``redis/``, ``cluster/<port>/``,
    ``valkey/``, ``valkey-cluster/<port>/``, ``ferretdb/`` or ``mongodb/``, ``logs/``,
    ``run/``). ``session``: the pytest session's, dying with it and persisting nothing; else
    long-lived (``./dev services``). Valkey's servers take redis-server's options."""
    port, durable = ports[0], not session
    if backend in SINGLE_SERVERS:
        url = redis_url("127.0.0.1", port)
        data = home / backend
        command = redis_command(program[0], port, data, durable=durable)
        return url, [Server(backend, port, command, partial(redis_ping, url), home, session, data)]
    if backend in CLUSTER_SERVERS:
        # the files ./dev's Redis Cluster always had: cluster-<port> (logs), cluster/<port>/
        directory = "cluster" if backend == "redis-cluster" else backend
        nodes = [
            Server(
                f"{directory}-{p}",
                p,
                redis_command(program[0], p, data, *CLUSTER_NODE, durable=durable),
                partial(redis_ping, redis_url("127.0.0.1", p)),
                home,
                session,
                data,
            )
            for p, data in ((p, home / directory / str(p)) for p in ports)
        ]
        return redis_cluster_url(port), nodes
    if backend == "mongodb":
        url = mongodb_url("127.0.0.1", port)
        mongod = Path(program[0]).name.startswith("mongod")
        data = home / ("mongodb" if mongod else "ferretdb")
        command = (mongod_command if mongod else ferretdb_command)(program[0], data, port)
        defaults = {} if mongod else FERRETDB_ENVIRONMENT
        ping = partial(mongo_ping, url)
        return url, [Server("mongodb", port, command, ping, home, session, data, defaults=defaults)]
    url = dynamodb_url("127.0.0.1", port)
    command = [*program, "-H", "127.0.0.1", "-p", str(port)]
    return url, [Server("dynamodb", port, command, partial(dynamo_ping, url), home, session)]


@dataclass
class LocalServers:
    """One session's server processes, their files under one temporary directory;
    :meth:`close` stops them and removes it."""

    session: str
    servers: list[Server] = field(default_factory=list)
    workdir: Path | None = None

    def start(self, backend: str) -> str:
        """Start ``backend``'s server (a Redis Cluster is three processes): its URL once it
        answers."""
        if self.workdir is None:
            self.workdir = Path(tempfile.mkdtemp(prefix=f"graphkeep-{self.session}-"))
        ports = free_ports(3 if backend in CLUSTER_SERVERS else 1)
        url, servers = backend_servers(
            backend, self.program(backend), ports, self.workdir, session=True
        )
        self.servers += servers
        try:
            for server in servers:
                server.up()
            if backend in CLUSTER_SERVERS:
                form_cluster(
                    "Redis Cluster" if backend == "redis-cluster" else "Valkey Cluster", ports
                )
        except GraphkeepTestingError as exc:
            raise GraphkeepTestingError(f"--graphkeep-servers=local {exc}") from None
        return url

    def program(self, backend: str) -> list[str]:
        """The server program (moto: a command) from the backend's variable, else from PATH."""
        variable = SERVER_VARIABLES[backend]
        configured = os.environ.get(variable, "").strip()
        if backend == "dynamodb":
            set_placeholder_credentials()
            command = shlex.split(configured) or [shutil.which("moto_server") or ""]
            if not command[0]:
                raise GraphkeepTestingError(
                    f"--graphkeep-servers=local needs moto_server on PATH (pip install"
                    f" 'moto[server]') or {variable} naming a command that takes -H HOST -p PORT"
                )
            return command
        family = backend.removesuffix("-cluster")
        names = (PROGRAMS[family],) if family in PROGRAMS else ("mongod", "ferretdb")
        program = configured or next(filter(None, map(shutil.which, names)), None)
        if not program:
            raise GraphkeepTestingError(
                f"--graphkeep-servers=local needs {' or '.join(names)} on PATH (or {variable}"
                " naming it); or use --graphkeep-servers=containers"
            )
        return [program]

    def close(self) -> None:
        """Stop every process of this session and remove its directory (idempotent)."""
        while self.servers:
            self.servers.pop().down()
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir = None
