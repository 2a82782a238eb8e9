"""The checkers of some rules sets, installed together, and what they found per owner.

Shared by the pytest plugin (:mod:`~graphkeep.testing.rules.plugin`: one :class:`Checks` for the
session, the owner is the running test) and by the conformance matrix, which runs its cases
outside pytest (a :class:`Checks` per row of the matrix, the owner is the running case).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from types import TracebackType
from typing import Any

from graphkeep.testing.rules import RULE_SETS, Recorder, Violation


def report(violations: list[Violation]) -> str:
    """One line per rule and request (the first detail, and how many more were like it)."""
    groups: dict[tuple[str, ...], list[Violation]] = {}
    for v in violations:  # the same rule broken by the same command: one line
        same = (v.rule_set, v.rule, v.request.split(" ", 1)[0], re.sub(r"'[^']*'", "", v.detail))
        groups.setdefault(same, []).append(v)
    lines = [f"graphkeep rules: {len(violations)} request(s) the service refuses:"]
    for alike in groups.values():
        more = f" (+{len(alike) - 1} more like it)" if len(alike) > 1 else ""
        lines.append(f"  {alike[0]}{more}")
    return "\n".join(lines)


class Checks:
    """The checkers of ``names`` (rules sets of :data:`~graphkeep.testing.rules.RULE_SETS`)
    and their :class:`~graphkeep.testing.rules.Recorder`; a context manager installs them
    (every redis-py and PyMongo client of the process is checked) and removes them."""

    def __init__(self, names: list[str] | tuple[str, ...]) -> None:
        self.names = list(names)
        self.families = {RULE_SETS[n] for n in self.names}
        self.recorder = Recorder()
        self.checkers: list[Any] = []

    def install(self) -> None:
        if "redis" in self.families:
            from graphkeep.testing.rules.redis_data import REDIS_RULES
            from graphkeep.testing.rules.redis_hook import RedisChecker

            rules = [REDIS_RULES[n] for n in self.names if n in REDIS_RULES]
            self.checkers.append(RedisChecker(rules, self.recorder))
        if "mongodb" in self.families:
            from graphkeep.testing.rules.mongodb_check import MongoChecker
            from graphkeep.testing.rules.mongodb_data import MONGO_RULES

            mongo = [MONGO_RULES[n] for n in self.names if n in MONGO_RULES]
            self.checkers.append(MongoChecker(mongo, self.recorder))
        for checker in self.checkers:
            checker.install()

    def uninstall(self) -> None:
        for checker in reversed(self.checkers):
            checker.uninstall()
        self.checkers.clear()

    def sync(self) -> None:
        """Bring what the MONITOR readers found into the recorder (at an owner's end);
        ``RuntimeError`` when a reader stopped."""
        for checker in self.checkers:
            sync = getattr(checker, "sync", None)
            if sync is not None:
                sync()

    def __enter__(self) -> Checks:
        self.install()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.uninstall()

    @contextmanager
    def owned(self, owner: str) -> Iterator[list[Violation]]:
        """What is sent in the block is ``owner``'s; the list it gives is filled at the
        block's end (MONITOR readers synced) with the requests the services refuse. Outside
        any owner, what was sent since the last one's end is this one's too (its set-up);
        inside another owner, the block's requests are taken from that one."""
        before = self.recorder.owner
        self.settle()  # what ran before the block is the owner before it
        found = self.recorder.take(None) if before is None else []
        self.recorder.owner = owner
        try:
            yield found
        finally:
            self.settle()
            self.recorder.owner = before
            found += self.recorder.take(owner)

    def outside(self) -> list[Violation]:
        """The refused requests sent outside any owner and not yet taken (MONITOR synced)."""
        self.settle()
        return self.recorder.take(None)

    def settle(self) -> None:
        """Sync the MONITOR readers into the running owner; a reader that stopped is a
        violation of that owner (nothing after it is checked)."""
        try:
            self.sync()
        except RuntimeError as exc:
            self.recorder.record(Violation("*", "monitor", "MONITOR", str(exc), ""))
