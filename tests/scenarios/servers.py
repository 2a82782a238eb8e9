"""Servers of a test's own: private servers for the restart tests, a lossy proxy, web apps.

The shared servers of ``./dev services up`` are used by everyone working on the project and
are never stopped by a test. A restart test starts one of these instead, stops it (a signal to
our own child process), and starts it again on the same port and data directory.
:class:`LossyProxy` sits in front of a (shared) server and loses one reply on request.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO, Any, ClassVar, TypeVar

import pytest

from graphkeep.testing import ferretdb_command
from graphkeep.testing.addresses import free_ports

REPO = Path(__file__).resolve().parents[2]
START_TIMEOUT = 60.0
SERVICES_HINT = "run ./dev services up (it installs the server binaries)"


def free_port() -> int:
    """A port below the kernel's ephemeral range (``graphkeep.testing.addresses``): a port
    bound with ``bind(0)`` and let go can be handed to another process's outgoing connection
    before the test's server binds it (CI: "Address already in use")."""
    return free_ports(1)[0]


@dataclass
class AppProcess:
    """A web app a test runs in a subprocess of its own: where it answers, its process, its
    log (``run_app`` starts one)."""

    backend: str
    base: str
    process: subprocess.Popen[bytes]
    log: Path

    def log_tail(self, lines: int = 80) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError as exc:
            return f"(no server log: {exc})"


App = TypeVar("App", bound=AppProcess)


@contextlib.contextmanager
def run_app(
    kind: type[App],
    backend: str,
    base: str,
    command: list[str],
    env: dict[str, str],
    log: Path,
    health: str,
    timeout: float = 30.0,
) -> Iterator[App]:
    """Start ``command`` (cwd: the repository; output to ``log``), wait until ``GET
    base + health`` answers JSON with ``"ok": true``, yield it, stop it."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("wb") as out:
        process = subprocess.Popen(command, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
    app = kind(backend, base, process, log)
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and process.poll() is None:
            try:
                with urllib.request.urlopen(base + health, timeout=5) as response:
                    if json.loads(response.read()).get("ok"):
                        break
            except (OSError, urllib.error.URLError, ValueError):
                time.sleep(0.1)
        else:
            pytest.fail(
                f"`{' '.join(command[1:])}` did not come up on {base}"
                f" ({backend}):\n{app.log_tail()}",
                pytrace=False,
            )
        yield app
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


class PrivateServer(ABC):
    """One server process of ours; ``start`` / ``stop`` / ``start`` keeps port and data."""

    kind: ClassVar[str]
    #: whether acknowledged data survives a stop/start
    persists: ClassVar[bool] = True

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    @abstractmethod
    def url(self) -> str:
        """A graphkeep URL for this server."""

    @abstractmethod
    def command(self) -> list[str]: ...

    @abstractmethod
    def ping(self) -> bool:
        """True once the server answers its own protocol."""

    @property
    def log_path(self) -> Path:
        return self.workdir / f"{self.kind}.log"

    def start(self) -> None:
        command = self.command()
        needed = [command[0], *(c for c in command[1:2] if c.endswith(".py"))]
        missing = [c for c in needed if not (shutil.which(c) or Path(c).is_file())]
        if missing:
            pytest.fail(f"{self.kind}: {', '.join(missing)} not found; {SERVICES_HINT}", False)
        self._log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            command, stdout=self._log, stderr=subprocess.STDOUT, cwd=self.workdir
        )
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                break
            if self.ping():
                return
            time.sleep(0.05)
        self.close()
        tail = self.log_path.read_text(errors="replace")[-2000:]
        pytest.fail(f"private {self.kind} on port {self.port} did not come up:\n{tail}")

    def stop(self, sig: int = signal.SIGTERM) -> None:
        """Send ``sig`` to our server process and wait until it is gone."""
        assert self.process is not None, "not started"
        self.process.send_signal(sig)
        self.process.wait(timeout=60)
        self.process = None
        if self._log is not None:
            self._log.close()
            self._log = None

    def close(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=60)
        self.process = None
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> PrivateServer:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class RedisServer(PrivateServer):
    """redis-server with the AOF fsynced on every write (``appendfsync always``)."""

    kind = "redis"

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def command(self) -> list[str]:
        return [
            shutil.which("redis-server") or "redis-server",
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--dir", str(self.workdir),
            "--appendonly", "yes",
            "--appendfsync", "always",
            "--save", "",
            "--daemonize", "no",
        ]  # fmt: skip

    def ping(self) -> bool:
        import redis

        client = redis.Redis(port=self.port, socket_connect_timeout=0.5)
        try:
            return bool(client.ping())
        except redis.RedisError:
            return False
        finally:
            client.close()


class FerretDBServer(PrivateServer):
    """FerretDB (the binary ./dev builds) on its own SQLite directory."""

    kind = "ferretdb"

    @property
    def url(self) -> str:
        return f"mongodb://127.0.0.1:{self.port}/graphkeep_scen"

    def command(self) -> list[str]:
        data = self.workdir / "data"
        data.mkdir(exist_ok=True)
        return ferretdb_command(str(REPO / ".services" / "bin" / "ferretdb"), data, self.port)

    def ping(self) -> bool:
        import pymongo
        from pymongo.errors import PyMongoError

        client: Any = pymongo.MongoClient(port=self.port, serverSelectionTimeoutMS=500)
        try:
            client.admin.command("ping")
            return True
        except PyMongoError:
            return False
        finally:
            client.close()


class MotoServer(PrivateServer):
    """moto_server: DynamoDB in memory only, so a restart loses everything."""

    kind = "moto"
    persists = False

    @property
    def url(self) -> str:
        endpoint = f"http://127.0.0.1:{self.port}"
        return f"dynamodb://graphkeep_scen?region=us-east-1&endpoint_url={endpoint}"

    def command(self) -> list[str]:
        # the launcher ./dev uses: moto without its dashboard's object tracking (memory leak)
        launcher = str(REPO / "tools" / "moto_server.py")
        return [sys.executable, launcher, "-H", "127.0.0.1", "-p", str(self.port)]

    def ping(self) -> bool:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{self.port}/", timeout=0.5).close()
        except urllib.error.HTTPError:
            return True  # it answered
        except OSError:
            return False
        return True


class LossyProxy:
    """A TCP proxy in front of one server that can lose one reply.

    After :meth:`lose_reply_to` (pattern), the first request containing ``pattern`` still reaches
    the server, but its reply never reaches the client: the proxy drops that connection instead,
    as a network failure between "server did it" and "client heard it" would. Everything else
    is passed through unchanged.
    """

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.listener.getsockname()[1])
        self.lost = 0
        self._pattern: bytes | None = None
        self._guard = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def lose_reply_to(self, pattern: bytes) -> None:
        with self._guard:
            self._pattern = pattern

    def close(self) -> None:
        self.listener.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.upstream)
            muted = threading.Event()
            threading.Thread(
                target=self._requests, args=(client, server, muted), daemon=True
            ).start()
            threading.Thread(
                target=self._replies, args=(server, client, muted), daemon=True
            ).start()

    def _requests(
        self, client: socket.socket, server: socket.socket, muted: threading.Event
    ) -> None:
        try:
            while chunk := client.recv(65536):
                with self._guard:
                    if self._pattern is not None and self._pattern in chunk:
                        self._pattern = None
                        muted.set()  # before the server can answer
                server.sendall(chunk)
        except OSError:
            pass
        finally:
            _close(server)

    def _replies(
        self, server: socket.socket, client: socket.socket, muted: threading.Event
    ) -> None:
        try:
            while chunk := server.recv(65536):
                if muted.is_set():
                    self.lost += 1
                    break
                client.sendall(chunk)
        except OSError:
            pass
        finally:
            _close(client)
            _close(server)


def _close(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()
