"""What really runs inside graphkeep's Redis scripts, read from the server's MONITOR stream.

:class:`ScriptAudit` opens a MONITOR connection on every primary of a server (one for a
single server, each master of a Cluster) for the duration of a ``with`` block. MONITOR
logs each script call (``EVALSHA sha numkeys KEYS... ARGV...``) followed by the commands
the script ran (``[0 lua]`` lines: a script is atomic, so nothing comes between them). For
every script call of the audited key prefix, :meth:`ScriptAudit.problems` names:

- a script call declaring no key (``EVAL … 0``: ElastiCache Serverless refuses it);
- a key a command inside the script touched that the call did not declare in KEYS (the
  keys of each command as the server itself extracts them: ``COMMAND GETKEYS``);
- any request (script call or not) of the prefix over 3,999 arguments (ElastiCache
  Serverless's limit, the command name included).

Other sessions share the test servers: calls that name no key of the prefix are ignored.
"""

from __future__ import annotations

import threading
import uuid
from dataclasses import dataclass, field
from typing import Any

import redis

from graphkeep.testing.rules.redis_monitor import parse_monitor_line

MAX_ARGS = 3999
SCRIPT_CALLS = {b"EVAL", b"EVALSHA", b"EVAL_RO", b"EVALSHA_RO", b"FCALL", b"FCALL_RO"}


def parse_line(line: bytes) -> tuple[str, list[bytes]]:
    """``(client, args)`` of one MONITOR line (the rules checker's parser)."""
    parsed = parse_monitor_line(line.decode("utf-8", "surrogateescape"))
    assert parsed is not None, line
    return parsed


@dataclass
class ScriptRun:
    node: str
    args: list[bytes]
    commands: list[list[bytes]] = field(default_factory=list)

    @property
    def declared(self) -> list[bytes]:
        if self.args[0].upper() in {b"FCALL", b"FCALL_RO"} or len(self.args) > 2:
            count = int(self.args[2])
            return self.args[3 : 3 + count]
        return []


class _Node:
    def __init__(self, host: str, port: int) -> None:
        self.name = f"{host}:{port}"
        self.client = redis.Redis(host=host, port=port)
        self.connection = self.client.connection_pool.get_connection()
        self.connection.send_command("MONITOR")
        assert self.connection.read_response() in (b"OK", "OK")
        self.lines: list[bytes] = []
        self.marker = f"gk-audit-{uuid.uuid4().hex}".encode()
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        while True:
            line = self.connection.read_response()
            if self.marker in line:
                return
            self.lines.append(line)

    def stop(self) -> None:
        self.client.echo(self.marker)
        self.thread.join(timeout=60)
        assert not self.thread.is_alive(), f"MONITOR on {self.name} did not see its end"
        self.connection.disconnect()
        self.client.close()


class ScriptAudit:
    """MONITOR on every primary of the server at ``url`` while the block runs."""

    def __init__(self, url: str, prefix: str) -> None:
        self.url = url
        self.prefix = prefix.encode()
        self.runs: list[ScriptRun] = []
        self.requests: list[tuple[str, list[bytes]]] = []
        self._nodes: list[_Node] = []
        self._keys: dict[tuple[bytes, ...], list[bytes]] = {}
        self._getkeys: dict[str, tuple[Any, Any]] = {}

    def _primaries(self) -> list[tuple[str, int]]:
        if "+cluster://" in self.url:
            seed = redis.RedisCluster.from_url(self.url.replace("+cluster", ""))
            try:
                return [(n.host, n.port) for n in seed.get_primaries()]
            finally:
                seed.close()
        client = redis.Redis.from_url(self.url)
        kwargs = client.connection_pool.connection_kwargs
        client.close()
        return [(kwargs["host"], kwargs["port"])]

    def __enter__(self) -> ScriptAudit:
        self._nodes = [_Node(host, port) for host, port in self._primaries()]
        return self

    def __exit__(self, *exc: Any) -> None:
        for node in self._nodes:
            node.stop()
        for node in self._nodes:
            current: ScriptRun | None = None
            for line in node.lines:
                client, args = parse_line(line)
                if not args:
                    continue
                if client == "lua":
                    if current is not None:
                        current.commands.append(args)
                    continue
                current = None
                if any(self.prefix in a for a in args):
                    self.requests.append((node.name, args))
                if args[0].upper() in SCRIPT_CALLS:
                    current = ScriptRun(node.name, args)
                    self.runs.append(current)

    def keys_of(self, node: str, command: list[bytes]) -> list[bytes]:
        """The keys the server itself finds in ``command`` (COMMAND GETKEYS)."""
        memo = (node.encode(), *command)
        if memo not in self._keys:
            if node not in self._getkeys:
                host, port = node.rsplit(":", 1)
                client = redis.Redis(host=host, port=int(port))
                self._getkeys[node] = (client, client.connection_pool.get_connection())
            connection = self._getkeys[node][1]
            connection.send_command("COMMAND", "GETKEYS", *command)
            try:  # the raw reply (redis-py's COMMAND callback expects COMMAND INFO's)
                found = connection.read_response()
            except redis.ResponseError:  # "The command has no key arguments"
                found = []
            self._keys[memo] = list(found)
        return self._keys[memo]

    def close(self) -> None:
        for client, connection in self._getkeys.values():
            connection.disconnect()
            client.close()
        self._getkeys.clear()

    def ours(self) -> list[ScriptRun]:
        """The script calls of the audited prefix (by what they declared or touched)."""
        return [
            run
            for run in self.runs
            if any(self.prefix in a for a in run.args)
            or any(self.prefix in a for c in run.commands for a in c)
        ]

    def problems(self) -> list[str]:
        found: list[str] = []
        for node, args in self.requests:
            if len(args) > MAX_ARGS:
                found.append(f"{args[0]!r} of {len(args)} arguments on {node}")
        for run in self.ours():
            declared = set(run.declared)
            if not declared:
                found.append(f"{run.args[0]!r} declaring no key on {run.node}")
            for command in run.commands:
                for key in self.keys_of(run.node, command):
                    if key not in declared:
                        found.append(f"{command[0]!r} in a script touched {key!r}, not in its KEYS")
        self.close()
        return found

    def largest(self) -> int:
        """The most arguments of one request of the prefix."""
        return max((len(args) for _, args in self.requests), default=0)
