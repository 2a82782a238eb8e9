"""Where the session's servers listen: free loopback ports to start them on, and each backend's
URL for a server at a host and port (the same form for local processes and containers)."""

from __future__ import annotations

import socket
from contextlib import closing

from graphkeep.testing.aws import REGION


def free_ports(count: int) -> list[int]:
    """``count`` distinct free TCP ports on 127.0.0.1 (each leaves room for its cluster bus port,
    the port + 10000)."""
    ports: list[int] = []
    while len(ports) < count:
        with closing(socket.socket()) as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        if port not in ports and port + 10000 < 65536:
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
