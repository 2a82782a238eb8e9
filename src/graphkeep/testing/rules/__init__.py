"""``--graphkeep-rules``: the rules of managed services, enforced on every request a session's
graphkeep clients send (docs/testing.md, "Service rules").

Each rules set is data (:mod:`~graphkeep.testing.rules.redis_data`,
:mod:`~graphkeep.testing.rules.mongodb_data`), checked where the request goes on the wire:
redis-py's command packing (:mod:`~graphkeep.testing.rules.redis_hook`) with the server's
MONITOR stream for what runs inside scripts (:mod:`~graphkeep.testing.rules.redis_monitor`),
and PyMongo's command monitoring (:mod:`~graphkeep.testing.rules.mongodb_check`). A request
the service refuses is a :class:`Violation`, recorded for the test that was running when it
was sent (:class:`Recorder`); :mod:`~graphkeep.testing.rules.plugin` fails that test.
"""

from __future__ import annotations

import contextvars
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import pytest

#: every rules set and the family of clients it checks
RULE_SETS = {
    "elasticache-serverless": "redis",
    "azure-redis-oss": "redis",
    "documentdb": "mongodb",
    "cosmos-mongodb-vcore": "mongodb",
    "cosmos-mongodb-ru": "mongodb",
}
FAMILY_NAMES = {"redis": "Redis", "mongodb": "MongoDB"}
ENV_VARIABLE = "GRAPHKEEP_RULES"

#: set by :func:`unchecked` for the requests made in its block (this thread or task)
UNCHECKED: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "graphkeep_unchecked", default=False
)


@contextmanager
def unchecked() -> Iterator[None]:
    """Requests sent inside the block (by this thread, or this task and the tasks it starts)
    are not checked: for a test's own set-up or clean-up on purpose outside a service's rules
    (a legacy index an upgrade test plants, a many-key ``DEL``, ``CONFIG RESETSTAT``), never
    for graphkeep's own requests under test."""
    token = UNCHECKED.set(True)
    try:
        yield
    finally:
        UNCHECKED.reset(token)


def backend_family(backend: str) -> str | None:
    """The rules family of a ``graphkeep.testing`` backend (``redis*``/``valkey*``: Redis)."""
    if backend.startswith(("redis", "valkey")):
        return "redis"
    if backend.startswith("mongodb"):
        return "mongodb"
    return None


def parse_rule_sets(raw: str | None) -> list[str]:
    """The rules sets of ``--graphkeep-rules`` (else ``$GRAPHKEEP_RULES``); a usage error names
    the known ones when a name is not one of them."""
    if raw is None:
        raw = os.environ.get(ENV_VARIABLE)
    if raw is None or not raw.strip():
        return []
    names = [n.strip() for n in raw.split(",") if n.strip()]
    unknown = [n for n in names if n not in RULE_SETS]
    if unknown:
        raise pytest.UsageError(
            f"--graphkeep-rules: unknown {', '.join(unknown)}; choose from {', '.join(RULE_SETS)}"
        )
    return list(dict.fromkeys(names))


@dataclass(frozen=True)
class Violation:
    """A request a service refuses: which rule, the request abbreviated (command and key or
    collection names, never a stored value) and the service's page that says so."""

    rule_set: str
    rule: str
    request: str
    detail: str
    url: str

    def __str__(self) -> str:
        return f"[{self.rule_set}] {self.rule}: {self.request} — {self.detail} (see {self.url})"


@dataclass
class Recorder:
    """The violations of a session, per test: ``owner`` is the node id of the running test
    (set from its setup to the end of its teardown), ``None`` outside any test."""

    owner: str | None = None
    found: dict[str | None, list[Violation]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    checked: set[str] = field(default_factory=set)

    def record(self, violation: Violation, owner: object = ...) -> None:
        with self.lock:
            key = self.owner if owner is ... else owner
            found = self.found.setdefault(key, [])  # type: ignore[arg-type]
            if violation not in found:  # one line per distinct request, not per repeat
                found.append(violation)

    def saw(self, family: str) -> None:
        """A request of ``family`` was checked (the session uses that family)."""
        self.checked.add(family)

    def take(self, owner: str | None) -> list[Violation]:
        with self.lock:
            return self.found.pop(owner, [])


def abbreviate(name: str, limit: int = 60) -> str:
    """A key or collection name for a message, cut to ``limit`` characters."""
    return name if len(name) <= limit else name[: limit - 1] + "…"
