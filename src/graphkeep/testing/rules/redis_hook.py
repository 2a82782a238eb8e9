"""The Redis family's checks, where redis-py puts a request on the wire.

redis-py has no per-command listener, so the packing methods are wrapped for the session (and
restored after it): the sync connection's ``send_command`` and ``pack_commands`` (pipelines,
MULTI…EXEC, cluster pipelines) and the asyncio connection's ``pack_command`` (which its
``send_command``, ``pack_commands`` and the async cluster client all call) and
``pack_commands``. The request is sent unchanged; a violation is recorded, never raised, so
graphkeep's own error handling cannot hide it (the plugin fails the test).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import redis.asyncio.connection as aconnection
import redis.connection as sconnection

from graphkeep.testing.rules import UNCHECKED, Recorder, Violation, abbreviate
from graphkeep.testing.rules.redis_data import DETAILS, RedisRules
from graphkeep.testing.rules.redis_keys import CommandInfo, Commands, slots
from graphkeep.testing.rules.redis_monitor import Monitor

IGNORE = "_graphkeep_rules_ignore"


def _argv(encoder: Any, args: Sequence[Any]) -> list[bytes]:
    """The arguments as the server receives them (redis-py splits a spaced first argument)."""
    first = args[0]
    if isinstance(first, str):
        args = tuple(first.encode().split()) + tuple(args[1:])
    elif isinstance(first, bytes) and b" " in first:
        args = tuple(first.split()) + tuple(args[1:])
    return [bytes(encoder.encode(a)) for a in args]


def _sockname(conn: Any) -> str | None:
    sock = getattr(conn, "_sock", None)
    try:
        if sock is not None:
            host, port = sock.getsockname()[:2]
        else:
            writer = getattr(conn, "_writer", None)
            name = writer.get_extra_info("sockname") if writer is not None else None
            if not name:
                return None
            host, port = name[:2]
    except (OSError, ValueError, TypeError):
        return None
    return f"[{host}]:{port}" if ":" in str(host) else f"{host}:{port}"


def describe(argv: Sequence[bytes], keys: Sequence[bytes], info: CommandInfo | None) -> str:
    """A request abbreviated: the command, up to three key names, the argument count."""
    name = argv[0].decode("utf-8", "replace").upper()
    if info is not None and "|" in info.name and len(argv) > 1:
        name += " " + argv[1].decode("utf-8", "replace").upper()
    if info is not None and info.is_script and len(argv) > 1:
        head = argv[1].decode("utf-8", "replace")
        body = info.name in ("eval", "eval_ro")
        name += f" <script of {len(argv[1])} bytes>" if body else f" {head[:12]}"
    shown = [abbreviate(k.decode("utf-8", "replace"), 40) for k in keys[:3]]
    more = f" +{len(keys) - 3} keys" if len(keys) > 3 else ""
    key_part = f" keys {', '.join(shown)}{more}" if shown else ""
    return f"{name}{key_part} ({len(argv)} arguments)"


@dataclass
class Node:
    """One server node: its command table and, once a script ran there, its MONITOR."""

    host: str
    port: int
    options: dict[str, Any]
    checker: RedisChecker
    lock: Any = field(default_factory=threading.RLock)
    monitor: Monitor | None = None
    scripts_sent: bool = False

    def __post_init__(self) -> None:
        self.admin = self.connect()
        self.commands = Commands(fetch=lambda: self.call("COMMAND"), getkeys=self.getkeys)

    def connect(self) -> Any:
        conn = sconnection.Connection(  # type: ignore[no-untyped-call]
            host=self.host,
            port=self.port,
            socket_connect_timeout=10,
            socket_timeout=60,  # the MONITOR reader reads without one
            **self.options,
        )
        setattr(conn, IGNORE, True)
        return conn

    def call(self, *args: Any) -> Any:
        with self.lock:
            self.admin.send_command(*args)
            return self.admin.read_response()

    def getkeys(self, argv: Sequence[bytes]) -> list[bytes]:
        return list(self.call("COMMAND", "GETKEYS", *argv))

    def ensure_monitor(self) -> None:
        with self.lock:
            if self.monitor is not None and self.monitor.dead:
                # the server went away and is back: the old findings first, then a new reader
                self.checker.take_pending(self.monitor)
                self.monitor.close()
                self.monitor = None
            if self.monitor is None:
                monitor = Monitor(
                    node=f"{self.host}:{self.port}",
                    connect=self.connect,
                    commands=self.commands,
                    ours=self.checker.ours,
                    rule_sets=[
                        (r.name, r.urls["undeclared-script-key"])
                        for r in self.checker.rules
                        if r.declared_script_keys
                    ],
                )
                monitor.start()
                self.monitor = monitor
            self.scripts_sent = True


@dataclass
class RedisChecker:
    rules: list[RedisRules]
    recorder: Recorder
    nodes: dict[tuple[str, int], Node] = field(default_factory=dict)
    local: set[str] = field(default_factory=set)
    unresolved: list[Any] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    originals: list[tuple[Any, str, Any]] = field(default_factory=list)

    # -- addresses of this process's script connections

    def ours(self, client: str) -> bool:
        if client in self.local:
            return True
        with self.lock:
            for conn in self.unresolved:
                name = _sockname(conn)
                if name:
                    self.local.add(name)
            self.unresolved = [c for c in self.unresolved if _sockname(c) is None]
        return client in self.local

    def _remember(self, conn: Any) -> None:
        name = _sockname(conn)
        if name:
            self.local.add(name)
        else:
            with self.lock:
                self.unresolved.append(conn)

    # -- the checks

    def node(self, conn: Any) -> Node | None:
        host, port = getattr(conn, "host", None), getattr(conn, "port", None)
        if host is None or port is None:
            return None  # a unix socket: no cluster, no managed service
        key = (str(host), int(port))
        with self.lock:
            node = self.nodes.get(key)
            if node is None:
                options = {
                    k: getattr(conn, k)
                    for k in ("username", "password")
                    if getattr(conn, k, None) is not None
                }
                node = self.nodes[key] = Node(key[0], key[1], options, self)
        return node

    def violation(self, rules: RedisRules, rule: str, request: str, **values: Any) -> None:
        detail = DETAILS[rule].format(**values)
        self.recorder.record(Violation(rules.name, rule, request, detail, rules.urls[rule]))

    def guarded(self, call: Any, *args: Any) -> None:
        """Run a check; a checker that cannot check says so in the test, never breaks the
        request (which is sent unchanged)."""
        try:
            call(*args)
        except Exception as exc:  # noqa: BLE001 — reported as a failure of the test instead
            for rules in self.rules:
                self.recorder.record(
                    Violation(
                        rules.name,
                        "unchecked",
                        "the rules checker",
                        f"could not check a request ({type(exc).__name__}: {exc})",
                        "docs/testing.md",
                    )
                )

    def check(self, conn: Any, argv: list[bytes]) -> list[bytes]:
        """Check one request; its keys (for a transaction's slot check)."""
        node = self.node(conn)
        if node is None or not argv:
            return []
        self.recorder.saw("redis")
        info = node.commands.info(argv)
        keys = node.commands.keys(argv, info)
        request = describe(argv, keys, info)
        name = (info.name if info else argv[0].decode("utf-8", "replace")).lower()
        top = name.split("|", 1)[0]
        is_module = info is not None and info.is_module
        for rules in self.rules:
            if rules.max_arguments is not None and len(argv) > rules.max_arguments:
                self.violation(
                    rules, "argument-limit", request, n=len(argv), limit=rules.max_arguments
                )
            if name in rules.refused or top in rules.refused:
                self.violation(rules, "restricted-command", request)
            elif name.startswith(rules.refused_prefixes) or (
                is_module and not name.startswith(rules.modules_offered)
            ):
                self.violation(rules, "module-command", request)
            if info is not None and info.is_script and not keys and rules.scripts_need_keys:
                self.violation(rules, "script-without-keys", request)
            if rules.one_slot and len(slots(keys)) > 1:
                self.violation(rules, "cross-slot", request, n=len(slots(keys)))
        if info is not None and info.is_script and any(r.declared_script_keys for r in self.rules):
            node.ensure_monitor()  # before the script is sent: MONITOR sees it
            self._remember(conn)
            if node.monitor is not None:
                node.monitor.expect(argv)
        return keys

    def check_many(self, conn: Any, commands: list[list[bytes]], each: bool) -> None:
        """A pipeline: each command (``each``), and a MULTI…EXEC's keys in one slot."""
        in_tx: list[bytes] | None = None
        names: list[str] = []
        for argv in commands:
            keys = self.check(conn, argv) if each else self._keys(conn, argv)
            word = argv[0].lower() if argv else b""
            if word == b"multi":
                in_tx, names = [], []
            elif word == b"exec" and in_tx is not None:
                n = len(slots(in_tx))
                if n > 1:
                    shown = ", ".join(dict.fromkeys(names))
                    request = f"MULTI … EXEC of {len(names)} commands ({abbreviate(shown)})"
                    for rules in self.rules:
                        if rules.one_slot:
                            self.violation(rules, "cross-slot", request, n=n)
                in_tx = None
            elif in_tx is not None:
                in_tx.extend(keys)
                names.append(argv[0].decode("utf-8", "replace").upper())

    def take_pending(self, monitor: Monitor) -> None:
        """What a stopped reader found, into the recorder."""
        with monitor.lock:
            found, monitor.pending = monitor.pending, []
        for violation in found:
            self.recorder.record(violation)

    def _keys(self, conn: Any, argv: list[bytes]) -> list[bytes]:
        node = self.node(conn)
        return node.commands.keys(argv) if node is not None and argv else []

    def sync(self) -> None:
        """Bring what the MONITOR readers found into the recorder (at a test's end)."""
        for node in list(self.nodes.values()):
            if node.monitor is not None and node.scripts_sent:
                node.scripts_sent = False
                for violation in node.monitor.sync():
                    self.recorder.record(violation)
                if node.monitor.error:
                    raise RuntimeError(f"graphkeep rules: {node.monitor.error}")

    # -- install / remove

    def install(self) -> None:
        checker = self
        sync_send: Any = sconnection.AbstractConnection.send_command
        sync_many: Any = sconnection.AbstractConnection.pack_commands
        async_one: Any = aconnection.AbstractConnection.pack_command
        async_many: Any = aconnection.AbstractConnection.pack_commands

        def send_command(self: Any, *args: Any, **kwargs: Any) -> Any:
            if args and not getattr(self, IGNORE, False) and not UNCHECKED.get():
                checker.guarded(checker.check, self, _argv(self.encoder, args))
            return sync_send(self, *args, **kwargs)

        def pack_commands(self: Any, commands: Iterable[Sequence[Any]]) -> Any:
            commands = [list(c) for c in commands]
            if not getattr(self, IGNORE, False) and not UNCHECKED.get():
                argvs = [_argv(self.encoder, c) for c in commands if c]
                checker.guarded(checker.check_many, self, argvs, True)
            return sync_many(self, commands)

        def apack_command(self: Any, *args: Any) -> Any:
            if args and not UNCHECKED.get():
                checker.guarded(checker.check, self, _argv(self.encoder, args))
            return async_one(self, *args)

        def apack_commands(self: Any, commands: Iterable[Sequence[Any]]) -> Any:
            commands = [list(c) for c in commands]
            if not UNCHECKED.get():
                argvs = [_argv(self.encoder, c) for c in commands if c]
                checker.guarded(checker.check_many, self, argvs, False)
            return async_many(self, commands)

        for cls, attr, new in (
            (sconnection.AbstractConnection, "send_command", send_command),
            (sconnection.AbstractConnection, "pack_commands", pack_commands),
            (aconnection.AbstractConnection, "pack_command", apack_command),
            (aconnection.AbstractConnection, "pack_commands", apack_commands),
        ):
            self.originals.append((cls, attr, cls.__dict__[attr]))
            setattr(cls, attr, new)

    def uninstall(self) -> None:
        for cls, attr, original in reversed(self.originals):
            setattr(cls, attr, original)
        self.originals.clear()
        for node in self.nodes.values():
            if node.monitor is not None:
                node.monitor.close()
            try:
                node.admin.disconnect()
            except Exception:  # noqa: BLE001, S110 — already gone
                pass
