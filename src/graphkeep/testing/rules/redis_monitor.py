"""What runs inside a script, from the server's MONITOR stream: one MONITOR connection and one
reader thread per server node a session's scripts go to.

A script's own commands (``[db lua]`` lines) follow its EVAL/EVALSHA/FCALL line, all at once
(a script runs atomically), so each of them is checked against the KEYS that line declares.
Only this process's scripts are checked: the MONITOR line names the calling client's address,
compared with the local addresses of the connections the hook saw sending scripts (two pytest
lanes may share the servers), or, where an address is translated (a container's published
port), the call's own arguments, fingerprinted when the hook saw them. At the end of each test
a unique marker command is sent on each node that ran a script and the reader is awaited up to
it, so a violation lands on its test.
"""

from __future__ import annotations

import codecs
import hashlib
import re
import threading
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from redis.exceptions import ConnectionError as RedisConnectionError

from graphkeep.testing.rules import Violation
from graphkeep.testing.rules.redis_keys import Commands

MARKER = b"gk-rules-marker-"
#: seconds to wait for the reader to reach a marker (a busy shared server lags)
MARKER_TIMEOUT = 30.0


def fingerprint(argv: list[bytes]) -> bytes:
    """A request's arguments, hashed (matches our request in MONITOR whatever the address)."""
    digest = hashlib.blake2b(digest_size=16)
    for arg in argv:
        digest.update(len(arg).to_bytes(8, "big"))
        digest.update(arg)
    return digest.digest()


def parse_monitor_line(line: str) -> tuple[str, list[bytes]] | None:
    """``1700000000.1 [0 127.0.0.1:5000] "SET" "k" "v"`` as ``("127.0.0.1:5000", argv)``
    (``lua`` for a script's own commands); ``None`` for anything else. The server quotes
    each argument as sdscatrepr does: ``\\``, ``\\"``, ``\\n``… and ``\\xHH`` for other bytes."""
    open_, close = line.find("["), line.find("] ")
    if open_ < 0 or close < 0:
        return None
    _, _, client = line[open_ + 1 : close].partition(" ")
    rest = line[close + 2 :].encode("utf-8", "surrogateescape")
    # sdscatrepr's escapes are a subset of Python's bytes literals': decoded in C
    return client, [codecs.escape_decode(arg)[0] for arg in _ARG.findall(rest)]


_ARG = re.compile(rb'"([^"\\]*(?:\\.[^"\\]*)*)"', re.S)


@dataclass
class Monitor:
    """The MONITOR reader of one node. ``connect`` makes a plain (unchecked) redis-py
    connection; ``ours`` says whether a client address is one of this process's."""

    node: str
    connect: Callable[[], Any]
    commands: Commands
    ours: Callable[[str], bool]
    rule_sets: list[tuple[str, str]]  # (rules set, its page) that check undeclared keys
    pending: list[Violation] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    seen: dict[bytes, threading.Event] = field(default_factory=dict)
    error: str | None = None
    #: the server went away (killed, restarted): the reader read up to there and stopped;
    #: the node starts a new MONITOR before its next script
    dead: bool = False
    #: fingerprints of the script calls this process sent and the reader has not seen yet
    expected: Counter[bytes] = field(default_factory=Counter)

    def expect(self, argv: list[bytes]) -> None:
        with self.lock:
            self.expected[fingerprint(argv)] += 1

    def _expected(self, argv: list[bytes]) -> bool:
        key = fingerprint(argv)
        with self.lock:
            if self.expected.get(key, 0) > 0:
                self.expected[key] -= 1
                if not self.expected[key]:
                    del self.expected[key]
                return True
        return False

    def start(self) -> None:
        self.script_names = {n for n, info in self.commands.table.items() if info.is_script}
        self.conn = self.connect()
        self.conn.send_command("MONITOR")
        self.conn.read_response()  # OK: from here on every command is streamed
        self.marker_conn = self.connect()
        self.thread = threading.Thread(
            target=self._read, name=f"graphkeep-rules-monitor-{self.node}", daemon=True
        )
        self.thread.start()

    def _read(self) -> None:
        script: tuple[str, set[bytes]] | None = None  # (request, declared keys) of ours
        while True:
            try:
                raw = self.conn.read_response(timeout=None)
            except Exception:  # noqa: BLE001 — closed at the end, or the server went away
                if not getattr(self, "closing", False):
                    self.dead = True  # what the server ran until then was read
                for event in list(self.seen.values()):
                    event.set()
                return
            line = raw.decode("utf-8", "surrogateescape") if isinstance(raw, bytes) else str(raw)
            if MARKER.decode() in line:
                for token, event in list(self.seen.items()):
                    if token.decode() in line:
                        event.set()
                script = None
                continue
            open_, close = line.find("["), line.find("] ")
            client = line[open_ + 1 : close].partition(" ")[2] if 0 <= open_ < close else ""
            if client == "lua" and script is None:
                continue  # another process's script, or none of ours
            mine = False
            if client != "lua":
                script = None
                name = line[close + 3 : line.find('"', close + 3)].lower()
                if name not in self.script_names:
                    continue  # parse only script calls and what runs inside ours
                mine = self.ours(client)
                if not mine and not self.expected:
                    continue
            parsed = parse_monitor_line(line)
            if parsed is None or not parsed[1]:
                continue
            argv = parsed[1]
            if script is not None:
                self._check_inner(script, argv)
                continue
            if not mine:  # behind NAT (a container's port): the very request we sent
                mine = self._expected(argv)
                if not mine:
                    continue
            info = self.commands.info(argv)
            if info is not None and info.is_script:
                keys = set(self.commands.keys(argv, info))
                script = (f"{argv[0].decode(errors='replace').upper()} {_short(argv)}", keys)

    def _check_inner(self, script: tuple[str, set[bytes]], argv: list[bytes]) -> None:
        request, declared = script
        for key in self.commands.keys(argv):
            if key in declared:
                continue
            name = argv[0].decode("utf-8", "replace").upper()
            shown = key.decode("utf-8", "replace")
            shown = shown if len(shown) <= 60 else shown[:59] + "…"
            with self.lock:
                for rule_set, url in self.rule_sets:
                    self.pending.append(
                        Violation(
                            rule_set,
                            "undeclared-script-key",
                            request,
                            f"the script touched {shown!r} with {name}, a key it did not"
                            " declare in KEYS",
                            url,
                        )
                    )

    def sync(self) -> list[Violation]:
        """Send a marker, wait until the reader has read up to it, and take what it found."""
        token = MARKER + uuid.uuid4().hex.encode()
        event = self.seen[token] = threading.Event()
        try:
            if not self.dead:
                try:
                    self.marker_conn.send_command("ECHO", token)
                    self.marker_conn.read_response()
                except (RedisConnectionError, OSError):
                    # the server is gone: the reader stops at the end of what it ran
                    self.thread.join(MARKER_TIMEOUT)
                else:
                    if not event.wait(MARKER_TIMEOUT) and not self.dead:
                        self.error = (
                            f"MONITOR of {self.node} did not reach a marker in {MARKER_TIMEOUT}s"
                        )
        finally:
            self.seen.pop(token, None)
        with self.lock:
            found, self.pending = self.pending, []
            self.expected.clear()  # all sent before the marker was read by now
        return found

    def close(self) -> None:
        self.closing = True
        for conn in (getattr(self, "conn", None), getattr(self, "marker_conn", None)):
            if conn is not None:
                try:
                    conn.disconnect()
                except Exception:  # noqa: BLE001, S110 — already gone
                    pass


def _short(argv: list[bytes]) -> str:
    """A script call abbreviated: the SHA or function name (never the script's values)."""
    head = argv[1].decode("utf-8", "replace") if len(argv) > 1 else ""
    if argv[0].lower() in (b"eval", b"eval_ro"):
        return f"<script of {len(argv[1])} bytes>" if len(argv) > 1 else ""
    return head[:12] + ("…" if len(head) > 12 else "")
