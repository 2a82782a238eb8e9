"""``--graphkeep-servers=local``: the session's servers as processes on loopback (redis-server,
mongod or FerretDB, moto_server), their command lines, and stopping them when the session ends
or pytest dies."""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from graphkeep.testing.addresses import dynamodb_url, free_ports, mongodb_url, redis_url
from graphkeep.testing.aws import set_placeholder_credentials
from graphkeep.testing.cluster import form_cluster
from graphkeep.testing.errors import GraphkeepTestingError
from graphkeep.testing.probes import dynamo_ping, mongo_ping, redis_ping, wait

#: the variable that may name each backend's server program
SERVER_VARIABLES = {
    "redis": "GRAPHKEEP_REDIS_SERVER",
    "redis-cluster": "GRAPHKEEP_REDIS_SERVER",
    "mongodb": "GRAPHKEEP_MONGODB_SERVER",
    "dynamodb": "GRAPHKEEP_DYNAMODB_SERVER",
}


def redis_command(program: str, port: int, *extra: str) -> list[str]:
    """redis-server on 127.0.0.1:``port``, in the foreground, persisting nothing."""
    return [
        program,
        *("--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"),
        *("--cluster-config-file", f"nodes-{port}.conf", "--daemonize", "no", *extra),
    ]


def mongod_command(program: str, data: Path, port: int) -> list[str]:
    """mongod on 127.0.0.1:``port`` with its data in ``data``."""
    return [
        program,
        *("--port", str(port), "--bind_ip", "127.0.0.1"),
        *("--dbpath", str(data), "--quiet"),
    ]


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


@dataclass
class LocalServers:
    """One session's server processes, each in its own directory under one temporary
    directory; :meth:`close` stops them and removes it."""

    session: str
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    workdir: Path | None = None

    def start(self, backend: str) -> str:
        """Start ``backend``'s server (a Redis Cluster is three processes): its URL once it
        answers."""
        variable = SERVER_VARIABLES[backend]
        if backend == "dynamodb":
            return self._dynamodb(variable)
        names = ("redis-server",) if backend.startswith("redis") else ("mongod", "ferretdb")
        program = os.environ.get(variable) or next(filter(None, map(shutil.which, names)), None)
        if not program:
            raise GraphkeepTestingError(
                f"--graphkeep-servers=local needs {' or '.join(names)} on PATH (or {variable}"
                " naming it); or use --graphkeep-servers=containers"
            )
        if backend == "redis":
            port = free_ports(1)[0]
            url = redis_url("127.0.0.1", port)
            self._process("redis", redis_command(program, port), lambda: redis_ping(url))
            return url
        if backend == "redis-cluster":
            return self._cluster(program)
        return self._mongodb(program)

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

        wait(f"{name} ({command[0]})", ready, exited)

    def _cluster(self, program: str) -> str:
        ports = free_ports(3)
        for port in ports:
            self._process(
                f"redis-cluster-{port}",
                redis_command(program, port, "--cluster-enabled", "yes"),
                partial(redis_ping, redis_url("127.0.0.1", port)),
            )
        return form_cluster("Redis Cluster", ports)

    def _mongodb(self, program: str) -> str:
        port = free_ports(1)[0]
        data = self._work("mongodb-data")
        if Path(program).name.startswith("mongod"):
            command = mongod_command(program, data, port)
        else:
            command = ferretdb_command(program, data, port)
        url = mongodb_url("127.0.0.1", port)
        self._process("mongodb", command, lambda: mongo_ping(url))
        return url

    def _dynamodb(self, variable: str) -> str:
        configured = os.environ.get(variable)
        command = shlex.split(configured) if configured else [shutil.which("moto_server") or ""]
        if not command or not command[0]:
            raise GraphkeepTestingError(
                f"--graphkeep-servers=local needs moto_server on PATH (pip install"
                f" 'moto[server]') or {variable} naming a command that takes -H HOST -p PORT"
            )
        port = free_ports(1)[0]
        set_placeholder_credentials()
        url = dynamodb_url("127.0.0.1", port)
        self._process(
            "dynamodb", [*command, "-H", "127.0.0.1", "-p", str(port)], lambda: dynamo_ping(url)
        )
        return url

    def close(self) -> None:
        """Stop every process of this session and remove its directory (idempotent)."""
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


def _die_with_parent() -> None:
    """In the child: be killed when pytest dies, even by kill -9 (Linux; elsewhere a no-op)."""
    if sys.platform.startswith("linux"):
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)
