"""The backends the demo runs on: their URLs (from the environment), whether their server
answers, and which of them ``--backend`` picks."""

from __future__ import annotations

import importlib
import os
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, urlsplit

from graphkeep.errors import mask_url

KEY_PREFIX = "graphkeep-demo"
DYNAMODB_TABLE = "graphkeep_demo"


def redis_url() -> str:
    return os.environ.get("REDIS_URL", "redis://127.0.0.1:16379/0")


def mongodb_url() -> str:
    return os.environ.get("MONGODB_URI", "mongodb://127.0.0.1:27117")


def local_aws_credentials(url: str) -> None:
    """Dummy credentials for a loopback DynamoDB endpoint (moto) when none are configured."""
    endpoints = parse_qs(urlsplit(url).query).get("endpoint_url") or [""]
    host = urlsplit(endpoints[0]).hostname or ""
    configured = os.environ.get("AWS_ACCESS_KEY_ID") or os.environ.get("AWS_PROFILE")
    if host in ("127.0.0.1", "localhost", "::1") and not configured:
        os.environ["AWS_ACCESS_KEY_ID"] = "test"
        os.environ["AWS_SECRET_ACCESS_KEY"] = "test"


def dynamodb_url() -> str:
    endpoint = os.environ.get("DYNAMODB_ENDPOINT_URL", "http://127.0.0.1:15000")
    region = os.environ.get("AWS_DEFAULT_REGION", "us-east-1")
    return f"dynamodb://{DYNAMODB_TABLE}?region={region}&endpoint_url={endpoint}"


@dataclass(frozen=True)
class Backend:
    name: str
    url: Callable[[], str]

    @property
    def registered(self) -> bool:
        scheme = self.url().split("://", 1)[0].lower()
        backends: Mapping[str, Any] = importlib.import_module("graphkeep.connect").BACKENDS
        return scheme in backends

    def inspect_hint(self, url: str, thread_id: str) -> str | None:
        if self.name != "redis":
            return None
        parts = urlsplit(url)
        pattern = f"'{KEY_PREFIX}:*{{{thread_id}}}*'"
        if parts.scheme.endswith("+cluster"):
            seed = f"{parts.hostname or '127.0.0.1'}:{parts.port or 6379}"
            return f"redis-cli --cluster call {seed} KEYS {pattern}"
        if parts.scheme == "unix":
            return f"redis-cli -s {parts.path} --scan --pattern {pattern}"
        db = parts.path.strip("/") or "0"
        where = f"-h {parts.hostname or '127.0.0.1'} -p {parts.port or 6379} -n {db}"
        return f"redis-cli {where} --scan --pattern {pattern}"


BACKEND_LIST: tuple[Backend, ...] = (
    Backend("redis", redis_url),
    Backend("mongodb", mongodb_url),
    Backend("dynamodb", dynamodb_url),
)
BACKEND_NAMES = tuple(b.name for b in BACKEND_LIST)


def server_answers(url: str, timeout: float = 1.0) -> bool:
    """A cheap reachability probe (TCP connect) that never waits for a driver's timeouts."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme == "unix":
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        target: Any = parts.path
    else:
        if scheme == "dynamodb":
            endpoints = parse_qs(parts.query).get("endpoint_url")
            if not endpoints:
                return True  # real AWS: nothing local to probe
            parts = urlsplit(endpoints[0])
        if scheme.endswith("+srv"):
            return True  # resolved by the driver through DNS
        host = (parts.hostname or "127.0.0.1").split(",")[0]
        default_port = {"http": 80, "https": 443, "mongodb": 27017}.get(parts.scheme, 6379)
        try:
            port = parts.port or default_port
        except ValueError:  # several mongodb hosts: probe the first one
            port = int(parts.netloc.split(",")[0].rsplit(":", 1)[-1])
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        target = (host, port)
    sock.settimeout(timeout)
    try:
        sock.connect(target)
    except OSError:
        return False
    finally:
        sock.close()
    return True


def pick_backends(choice: str | None) -> tuple[list[Backend], list[str], list[str]]:
    """(backends to run, skip notes, errors) for ``--backend``."""
    run: list[Backend] = []
    notes: list[str] = []
    errors: list[str] = []
    wanted = (
        BACKEND_LIST if choice in (None, "all") else [b for b in BACKEND_LIST if b.name == choice]
    )
    for backend in wanted:
        url = backend.url()
        scheme = url.split("://", 1)[0]
        if not backend.registered:
            message = f"{backend.name}: backend not available yet ({scheme}:// is not registered)"
            (errors if choice == backend.name else notes).append(message)
        elif not server_answers(url):
            message = f"{backend.name}: no server answers at {mask_url(url)}"
            (notes if choice is None else errors).append(message)
        else:
            run.append(backend)
    return run, notes, errors
