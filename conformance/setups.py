"""Backend set-ups the matrix runs against, and which of them are enabled.

A set-up is a saver URL plus the pytest marker of the service it needs. URLs come from the
environment, defaulting to the project's local services (`./dev services up`).
`GRAPHKEEP_SETUPS` (comma list) overrides `DEFAULT_ENABLED`; the "reference" set-up is the
in-process reference saver used to validate the harness itself and is never enabled by default.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

REFERENCE_URL = "memory://"


@dataclass(frozen=True)
class Setup:
    name: str
    url: str
    marker: str | None


def _dynamodb_url() -> str:
    endpoint = os.environ.get("DYNAMODB_ENDPOINT_URL", "http://127.0.0.1:15000")
    return f"dynamodb://graphkeep_test?region=us-east-1&endpoint_url={endpoint}"


def all_setups() -> list[Setup]:
    """Every known set-up, URLs read from the environment now."""
    return [
        Setup("redis", os.environ.get("REDIS_URL", "redis://127.0.0.1:16379/0"), "redis"),
        Setup(
            "redis-cluster",
            os.environ.get("REDIS_CLUSTER_URL", "redis+cluster://127.0.0.1:17001"),
            "cluster",
        ),
        Setup(
            "mongodb",
            os.environ.get("MONGODB_URI", "mongodb://127.0.0.1:27117/graphkeep_test"),
            "mongodb",
        ),
        Setup("dynamodb", _dynamodb_url(), "dynamodb"),
        Setup("reference", REFERENCE_URL, None),
    ]


# Every backend set-up runs by default; GRAPHKEEP_SETUPS narrows it.
DEFAULT_ENABLED: tuple[str, ...] = ("redis", "redis-cluster", "mongodb", "dynamodb")


def enabled_names() -> list[str]:
    raw = os.environ.get("GRAPHKEEP_SETUPS", "")
    names = [n.strip() for n in raw.split(",") if n.strip()]
    return names or list(DEFAULT_ENABLED)


def by_name(name: str) -> Setup:
    for setup in all_setups():
        if setup.name == name:
            return setup
    known = ", ".join(s.name for s in all_setups())
    raise KeyError(f"unknown set-up {name!r}; known: {known}")


def selected(names: list[str] | None = None) -> list[Setup]:
    """The named set-ups (any known one), or the enabled ones when no names are given."""
    return [by_name(n) for n in (names or enabled_names())]


ENABLED: list[Setup] = selected()
