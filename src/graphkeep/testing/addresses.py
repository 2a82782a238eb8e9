"""Where the session's servers listen: free loopback ports to start them on, and each backend's
URL for a server at a host and port (the same form for local processes and containers)."""

from __future__ import annotations

import random
import socket
from contextlib import closing
from pathlib import Path

from graphkeep.testing.aws import REGION

EPHEMERAL = Path("/proc/sys/net/ipv4/ip_local_port_range")
BUS_OFFSET = 10000  # a cluster node's bus port is its port + 10000


def free_ports(count: int) -> list[int]:
    """``count`` distinct free TCP ports on 127.0.0.1, each with its cluster bus port (the port
    + 10000) free too.

    Where the kernel tells its ephemeral range, both lie below it: a port handed out by
    ``bind(0)`` is one the kernel may give the next outgoing connection (another test's client,
    a driver's pool) before the server binds it, and the server then fails with "Address already
    in use"."""
    low = ephemeral_start()
    if low is None or low - BUS_OFFSET <= FIRST_FREE:
        return kernel_ports(count)
    ports: list[int] = []
    while len(ports) < count:
        port = random.randrange(FIRST_FREE, low - BUS_OFFSET)
        if port not in ports and bindable(port) and bindable(port + BUS_OFFSET):
            ports.append(port)
    return ports


# above the ports ./dev's services default to (15000-19090, cluster bus ports 27001-27103)
FIRST_FREE = 20000


def ephemeral_start() -> int | None:
    """The first port of the kernel's ephemeral range (Linux), else None."""
    try:
        return int(EPHEMERAL.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def bindable(port: int) -> bool:
    """Nothing holds 127.0.0.1 ``port`` now."""
    with closing(socket.socket()) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def kernel_ports(count: int) -> list[int]:
    """``count`` ports the kernel hands out (where its ephemeral range is unknown)."""
    ports: list[int] = []
    while len(ports) < count:
        with closing(socket.socket()) as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        if port not in ports and port + BUS_OFFSET < 65536:
            ports.append(port)
    return ports


def redis_url(host: str, port: int) -> str:
    return f"redis://{host}:{port}/0"


def redis_cluster_url(port: int) -> str:
    """The cluster whose first node is on 127.0.0.1 ``port``."""
    return f"redis+cluster://127.0.0.1:{port}"


def mongodb_url(host: str, port: int) -> str:
    return f"mongodb://{host}:{port}/"


def dynamodb_url(host: str, port: int) -> str:
    return f"dynamodb://graphkeep?region={REGION}&endpoint_url=http://{host}:{port}"
