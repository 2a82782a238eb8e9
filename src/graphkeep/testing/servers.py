"""The session's servers: one per backend, started on first use by the mode's starter (``env``
URLs, ``local`` processes or ``containers``), each failure remembered, all removed at close."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Protocol
from uuid import uuid4

from graphkeep.testing.containers import ContainerServers
from graphkeep.testing.errors import GraphkeepTestingError
from graphkeep.testing.local import LocalServers

#: ``--graphkeep-servers=env``: the variable holding each backend's server URL
URL_VARIABLES = {
    "redis": "GRAPHKEEP_REDIS_URL",
    "redis-cluster": "GRAPHKEEP_REDIS_CLUSTER_URL",
    "mongodb": "GRAPHKEEP_MONGODB_URL",
    "dynamodb": "GRAPHKEEP_DYNAMODB_URL",
    "valkey": "GRAPHKEEP_VALKEY_URL",
    "valkey-cluster": "GRAPHKEEP_VALKEY_CLUSTER_URL",
}


class Starter(Protocol):
    """How one mode starts a backend's server (its base URL) and removes what it started."""

    def start(self, backend: str) -> str: ...

    def close(self) -> None: ...


@dataclass
class EnvServers:
    """``--graphkeep-servers=env``: the servers are the user's, named by :data:`URL_VARIABLES`."""

    session: str

    def start(self, backend: str) -> str:
        variable = URL_VARIABLES[backend]
        url = os.environ.get(variable, "").strip()
        if not url:
            raise GraphkeepTestingError(
                f"--graphkeep-servers=env and {variable} is not set: set it to your {backend}"
                f" server's URL, or leave {backend} out with --graphkeep-backends"
            )
        return url

    def close(self) -> None:
        """Nothing to remove: the servers are not the session's."""


STARTERS: dict[str, type[EnvServers] | type[LocalServers] | type[ContainerServers]] = {
    "env": EnvServers,
    "local": LocalServers,
    "containers": ContainerServers,
}


@dataclass
class Servers:
    """The session's server per backend: its base URL, started on first use."""

    mode: str
    session: str = field(default_factory=lambda: uuid4().hex[:12])
    urls: dict[str, str] = field(default_factory=dict)
    failures: dict[str, str] = field(default_factory=dict)
    starter: Starter = field(init=False)

    def __post_init__(self) -> None:
        self.starter = STARTERS[self.mode](self.session)

    def url(self, backend: str) -> str:
        if backend in self.failures:  # one clear failure, not one slow retry per test
            raise GraphkeepTestingError(self.failures[backend])
        if backend not in self.urls:
            try:
                self.urls[backend] = self.starter.start(backend)
            except GraphkeepTestingError as exc:
                self.failures[backend] = str(exc)
                raise
        return self.urls[backend]

    def close(self) -> None:
        """Remove every server this session started (idempotent)."""
        self.starter.close()
