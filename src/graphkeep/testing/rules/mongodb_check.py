"""The MongoDB family's checks, from PyMongo's own command monitoring.

One :class:`pymongo.monitoring.CommandListener` is registered for the process at the first
configure (PyMongo has no way to unregister one): every client made after it, sync or async,
reports each command it sends, and the listener hands it to the checkers of the running
session. Index builds are tracked per namespace in this process only: builds that overlap
across processes (a fleet starting at once) are not visible here (docs/testing.md).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

from pymongo import monitoring

from graphkeep.testing.rules import UNCHECKED, Recorder, Violation, abbreviate
from graphkeep.testing.rules.mongodb_data import MongoRules

#: set in a thread while a checker's own probe runs (its commands are not checked)
_PROBING = threading.local()
#: the checkers of the running sessions (a pytester session may run inside another)
ACTIVE: list[MongoChecker] = []


class _Dispatch(monitoring.CommandListener):
    def started(self, event: monitoring.CommandStartedEvent) -> None:
        if not getattr(_PROBING, "active", False) and not UNCHECKED.get():
            # the innermost rules session owns what is sent while it runs (a conformance row
            # inside a pytest session under rules: the row's case fails, not the test)
            for checker in ACTIVE[-1:]:
                try:
                    checker.started(event)
                except Exception as exc:  # noqa: BLE001 — said in the test, never breaks the command
                    checker.unchecked(exc)

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        for checker in list(ACTIVE):
            checker.finished(event, ok=True)

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        for checker in list(ACTIVE):
            checker.finished(event, ok=False)


_REGISTERED: list[_Dispatch] = []


def register() -> None:
    """Register the process's listener once (clients made afterwards report to it)."""
    if not _REGISTERED:
        _REGISTERED.append(_Dispatch())
        monitoring.register(_REGISTERED[0])


def index_kinds(spec: dict[str, Any]) -> set[str]:
    """The kinds of one ``createIndexes`` index spec that a service may lack."""
    kinds = set()
    for name, value in dict(spec.get("key", {})).items():
        if name == "$**" or str(name).endswith(".$**"):
            kinds.add("wildcard")
        if value in ("hashed", "text", "2d", "2dsphere", "geoHaystack"):
            kinds.add(str(value))
    if spec.get("partialFilterExpression") is not None:
        kinds.add("partial")
    if spec.get("sparse"):
        kinds.add("sparse")
    collation = spec.get("collation") or {}
    if collation.get("strength") in (1, 2):
        kinds.add("case-insensitive")
    return kinds


@dataclass
class Found:
    operators: set[str] = field(default_factory=set)
    stages: set[str] = field(default_factory=set)
    variables: set[str] = field(default_factory=set)

    def expression(self, value: Any) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                if isinstance(key, str) and key.startswith("$"):
                    self.operators.add(key)
                if key == "$facet" and isinstance(item, dict):
                    for sub in item.values():
                        self.pipeline(sub)
                elif key == "pipeline" and isinstance(item, list):
                    self.pipeline(item)
                else:
                    self.expression(item)
        elif isinstance(value, list):
            for item in value:
                self.expression(item)
        elif isinstance(value, str) and value.startswith("$$"):
            self.variables.add(value.split(".", 1)[0])

    def pipeline(self, stages: Any) -> None:
        for stage in stages if isinstance(stages, list) else []:
            if isinstance(stage, dict) and stage:
                name = next(iter(stage))
                self.stages.add(str(name))
                self.expression(stage[name])


def _queries(name: str, cmd: dict[str, Any], found: Found) -> bool:
    """Walk the parts of a command that the server evaluates; True if it has a pipeline update."""
    pipeline_update = False
    if name == "aggregate":
        found.pipeline(cmd.get("pipeline"))
    for part in ("filter", "query", "projection"):
        found.expression(cmd.get(part))
    if name == "findAndModify" and isinstance(cmd.get("update"), list):
        pipeline_update = True
        found.pipeline(cmd["update"])
    for update in cmd.get("updates", []) if name == "update" else []:
        found.expression(update.get("q"))
        found.expression(update.get("arrayFilters"))
        if isinstance(update.get("u"), list):
            pipeline_update = True
            found.pipeline(update["u"])
    for delete in cmd.get("deletes", []) if name == "delete" else []:
        found.expression(delete.get("q"))
    if name in ("create", "collMod"):
        found.expression(cmd.get("validator"))
        found.pipeline(cmd.get("pipeline"))
    if name == "createIndexes":
        for spec in cmd.get("indexes", []):
            found.expression(spec.get("partialFilterExpression"))
    return pipeline_update


@dataclass
class MongoChecker:
    rules: list[MongoRules]
    recorder: Recorder
    builds: dict[str, set[tuple[Any, int]]] = field(default_factory=dict)
    #: the collection of each build in flight
    building: dict[tuple[Any, int], str] = field(default_factory=dict)
    transactions: dict[tuple[bytes, int], float] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    clock: Any = time.monotonic

    def install(self) -> None:
        register()
        ACTIVE.append(self)

    def uninstall(self) -> None:
        if self in ACTIVE:
            ACTIVE.remove(self)

    def unchecked(self, exc: Exception) -> None:
        for rules in self.rules:
            self._record(
                rules,
                "unchecked",
                "the rules checker",
                f"could not check a command ({type(exc).__name__}: {exc})",
                "docs/testing.md",
            )

    def _record(self, rules: MongoRules, rule: str, request: str, detail: str, url: str) -> None:
        self.recorder.record(Violation(rules.name, rule, request, detail, url))

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        self.recorder.saw("mongodb")
        name, cmd = event.command_name, dict(event.command)
        target = cmd.get(name)
        ns = f"{event.database_name}.{target}" if isinstance(target, str) else event.database_name
        request = f"{name} {abbreviate(ns)}"
        found = Found()
        pipeline_update = _queries(name, cmd, found)
        kinds: set[str] = set()
        unique = False
        if name == "createIndexes":
            for spec in cmd.get("indexes", []):
                kinds |= index_kinds(spec)
                unique = unique or bool(spec.get("unique"))
        for rules in self.rules:
            for kind, items in (
                ("operator", found.operators & rules.operators.keys()),
                ("stage", found.stages & rules.stages.keys()),
                ("variable", found.variables & rules.variables.keys()),
            ):
                table = getattr(rules, f"{kind}s" if kind != "variable" else "variables")
                for item in sorted(items):
                    self._record(
                        rules,
                        f"unsupported-{kind}",
                        request,
                        f"{item} is not supported",
                        table[item],
                    )
            for kind in sorted(kinds & rules.index_kinds.keys()):
                self._record(
                    rules,
                    "unsupported-index",
                    request,
                    f"a {kind} index is not supported",
                    rules.index_kinds[kind],
                )
            if pipeline_update and rules.pipeline_updates:
                self._record(
                    rules,
                    "pipeline-update",
                    request,
                    "an update given as a pipeline",
                    rules.pipeline_updates,
                )
            if name in rules.commands:
                self._record(
                    rules,
                    "unsupported-command",
                    request,
                    f"{name} is not supported",
                    rules.commands[name],
                )
            index = cmd.get("index") if name == "collMod" else None
            if rules.ttl_collmod and isinstance(index, dict) and "expireAfterSeconds" in index:
                self._record(
                    rules,
                    "ttl-collmod",
                    request,
                    "collMod of an index's expireAfterSeconds is not supported",
                    rules.ttl_collmod,
                )
        if name == "createIndexes":
            self._index_build(event, ns, request, unique)
        self._transaction(event, request)

    def _index_build(
        self, event: monitoring.CommandStartedEvent, ns: str, request: str, unique: bool
    ) -> None:
        with self.lock:
            running = self.builds.setdefault(ns, set())
            overlap = bool(running)
            running.add((event.connection_id, event.request_id))
            self.building[(event.connection_id, event.request_id)] = ns
        for rules in self.rules:
            if overlap and rules.one_index_build:
                self._record(
                    rules,
                    "concurrent-index-builds",
                    request,
                    "an index build started while another one on the same collection was in"
                    " flight (one build per collection at a time)",
                    rules.one_index_build,
                )
        if (
            unique
            and any(r.unique_on_empty_only for r in self.rules)
            and self._holds_documents(event, ns)
        ):
            for rules in self.rules:
                if rules.unique_on_empty_only:
                    self._record(
                        rules,
                        "unique-index-on-data",
                        request,
                        "a unique index created on a collection that already holds documents",
                        rules.unique_on_empty_only,
                    )

    def _holds_documents(self, event: monitoring.CommandStartedEvent, ns: str) -> bool:
        """Probe with a client of our own (its commands are not checked)."""
        from pymongo import MongoClient

        db, _, coll = ns.partition(".")
        address = (event.connection_id[0], int(event.connection_id[1] or 27017))
        _PROBING.active = True
        try:
            # a client per probe, closed at once: no pooled connection of ours outlives it
            # (tests count the connections their process holds to the server)
            probe: MongoClient[dict[str, Any]] = MongoClient(
                host=address[0],
                port=address[1],
                directConnection=True,
                serverSelectionTimeoutMS=5000,
            )
            with probe:
                return probe[db][coll].find_one({}, projection={"_id": 1}) is not None
        finally:
            _PROBING.active = False

    def _transaction(self, event: monitoring.CommandStartedEvent, request: str) -> None:
        cmd = dict(event.command)
        lsid = cmd.get("lsid", {}).get("id")
        number = cmd.get("txnNumber")
        if lsid is None or number is None or cmd.get("autocommit", True) is not False:
            return
        key = (bytes(lsid), int(number))
        now = self.clock()
        with self.lock:
            begun = self.transactions.setdefault(key, now)
            if event.command_name in ("commitTransaction", "abortTransaction"):
                self.transactions.pop(key, None)
        for rules in self.rules:
            limit = rules.transaction_seconds
            if limit is not None and rules.transaction_url and now - begun > limit:
                self._record(
                    rules,
                    "transaction-lifetime",
                    request,
                    f"a multi-document transaction {now - begun:.0f} s old; the service ends"
                    f" transactions after {limit:.0f} s",
                    rules.transaction_url,
                )

    def finished(self, event: Any, ok: bool) -> None:
        build = (event.connection_id, event.request_id)
        with self.lock:  # by the build, not a walk of every collection ever built on
            ns = self.building.pop(build, None)
            if ns is not None and ns in self.builds:
                self.builds[ns].discard(build)
                if not self.builds[ns]:
                    del self.builds[ns]
