"""A server process on a loopback port: started for a pytest session (dying with it) or for good
(``./dev services``), recognised by its pid file, probed until it answers, and stopped."""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from graphkeep.testing.errors import GraphkeepTestingError, PortInUse
from graphkeep.testing.probes import START_TIMEOUT, wait


@dataclass
class Server:
    """One server program on 127.0.0.1 ``port``, its output in ``home/logs/<name>.log`` and
    its pid in ``home/run/``. :meth:`up` is idempotent: a server the pid file names is ours and
    is kept; a port held by any other process is refused (:class:`PortInUse`). ``session``
    servers die with this process, even by kill -9 (Linux); the others outlive it."""

    name: str
    port: int
    command: list[str]
    ready: Callable[[], bool]
    home: Path
    session: bool = False
    #: its data directory, made before it starts
    data: Path | None = None
    #: how it is stopped: each signal, then as many seconds to wait; SIGKILL after the last
    stop_signals: tuple[tuple[int, float], ...] = ((signal.SIGTERM, 15.0),)
    #: environment variables the program gets unless this process's environment sets them
    defaults: dict[str, str] = field(default_factory=dict)
    process: subprocess.Popen[bytes] | None = field(default=None, init=False, repr=False)

    @property
    def log(self) -> Path:
        return self.home / "logs" / f"{self.name}.log"

    @property
    def pidfile(self) -> Path:
        # named after the first word of the name: the files ./dev's bash version wrote
        return self.home / "run" / f"{self.name.split('-')[0]}-{self.port}.pid"

    def pid(self) -> int | None:
        """Our server's pid while it runs: the one we started, else the pid file's when that
        process lives and its command line names the port (not a reused pid)."""
        if self.process is not None:
            return self.process.pid if self.process.poll() is None else None
        try:
            pid = int(self.pidfile.read_text().strip())
        except (OSError, ValueError):
            return None
        if not alive(pid) or not re.search(rf"\b{self.port}\b", command_line(pid)):
            return None
        return pid

    def up(self, timeout: float = START_TIMEOUT) -> bool:
        """Start the server, or keep ours that runs; return once it answers (True: started)."""
        running = self.pid()
        if running is not None:
            wait(
                f"{self.name} (pid {running}, running on port {self.port})",
                self.ready,
                timeout=timeout,
            )
            return False
        self.pidfile.unlink(missing_ok=True)
        if port_taken(self.port):
            holder = listener(self.port)
            raise PortInUse(
                f"port {self.port} (for {self.name}) is already in use by a process that is not"
                f" ours{f': {holder}' if holder else ''}"
            )
        self.spawn()
        try:
            wait(f"{self.name} ({self.command[0]})", self.ready, self.exited, timeout)
        except GraphkeepTestingError:
            self.down()
            raise
        return True

    def spawn(self) -> None:
        """Run the command in its own session, output appended to the log, pid recorded."""
        self.log.parent.mkdir(parents=True, exist_ok=True)
        self.pidfile.parent.mkdir(parents=True, exist_ok=True)
        if self.data is not None:
            self.data.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as log:
            stamp = datetime.now().astimezone().isoformat(timespec="seconds")
            log.write(f"\n==== {stamp} starting: {shlex.join(self.command)}\n".encode())
            log.flush()
            try:
                self.process = subprocess.Popen(
                    self.command,
                    cwd=self.home,
                    env={**self.defaults, **os.environ} if self.defaults else None,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,  # Ctrl-C reaches pytest or ./dev, not the server
                    preexec_fn=die_with_parent if self.session else None,
                )
            except OSError as exc:
                raise GraphkeepTestingError(
                    f"cannot start {self.name} with {self.command[0]}"
                    f" ({type(exc).__name__}: {exc.strerror or exc})"
                ) from exc
        self.pidfile.write_text(f"{self.process.pid}\n")

    def exited(self) -> str | None:
        """The log's tail once the process we started has exited, else None."""
        if self.process is None or self.process.poll() is None:
            return None
        return self.log.read_text(errors="replace")[-1500:]

    def down(self) -> bool:
        """Stop our server (True if one ran); a process that is not ours is left alone."""
        pid = self.pid()
        if pid is not None:
            for sig, patience in (*self.stop_signals, (signal.SIGKILL, 10.0)):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)
                deadline = time.monotonic() + patience
                while (gone := self.gone(pid)) is False and time.monotonic() < deadline:
                    time.sleep(0.1)
                if gone:
                    break
        self.pidfile.unlink(missing_ok=True)
        self.process = None
        return pid is not None

    def gone(self, pid: int) -> bool:
        if self.process is not None:
            return self.process.poll() is not None  # also reaps our child
        return not alive(pid)


def alive(pid: int) -> bool:
    """``pid`` runs (a zombie does not)."""
    if pid <= 0:  # os.kill would signal a process group
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # another user's
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def command_line(pid: int) -> str:
    try:
        return (
            Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        )
    except OSError:
        return ""


def port_taken(port: int) -> bool:
    """Something accepts connections on 127.0.0.1 ``port``."""
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    except OSError:
        return False
    return True


def listener(port: int) -> str:
    """``pid N (command line)`` of the process listening on ``port``, when /proc tells."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for fields in map(str.split, rows):  # local address, state 0A: LISTEN, inode
            if int(fields[1].rsplit(":", 1)[1], 16) == port and fields[3] == "0A":
                inodes.add(f"socket:[{fields[9]}]")
    if not inodes:
        return ""
    for fd_dir in Path("/proc").glob("[0-9]*/fd"):
        try:
            if any(os.readlink(fd) in inodes for fd in fd_dir.iterdir()):
                pid = int(fd_dir.parent.name)
                return f"pid {pid} ({command_line(pid)[:120].strip()})"
        except OSError:
            continue
    return ""


def die_with_parent() -> None:
    """In the child: be killed when the parent dies, even by kill -9 (Linux; elsewhere a no-op)."""
    if sys.platform.startswith("linux"):
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)
