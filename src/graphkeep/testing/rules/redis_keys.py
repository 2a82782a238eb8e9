"""The keys of a Redis request, as the server finds them: from the key specs of ``COMMAND``
(fetched once per server), ``COMMAND GETKEYS`` where a spec cannot tell (``incomplete``).
No table of commands is written here: a command the server does not know has no keys."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from redis.crc import key_slot


def _text(value: Any) -> Any:
    """A reply with bytes decoded (command tables are ASCII)."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, list):
        return [_text(v) for v in value]
    if isinstance(value, dict):
        return {_text(k): _text(v) for k, v in value.items()}
    return value


def _pairs(value: Any) -> dict[str, Any]:
    """A RESP2 flat list ``[k, v, k, v]`` (or a RESP3 map) as a dict."""
    if isinstance(value, dict):
        return value
    return {value[i]: value[i + 1] for i in range(0, len(value) - 1, 2)}


@dataclass(frozen=True)
class CommandInfo:
    name: str
    flags: frozenset[str]
    acl: frozenset[str]
    specs: tuple[dict[str, Any], ...]
    subcommands: dict[str, CommandInfo]

    @property
    def is_module(self) -> bool:
        return "module" in self.flags

    @property
    def is_script(self) -> bool:
        """A script or function call: scripting category, keys declared by a count."""
        return "@scripting" in self.acl and any(
            s.get("find_keys", {}).get("type") == "keynum" for s in self.specs
        )

    @property
    def incomplete(self) -> bool:
        return any(
            "incomplete" in s.get("flags", ())
            or s.get("begin_search", {}).get("type") not in ("index", "keyword")
            or s.get("find_keys", {}).get("type") not in ("range", "keynum")
            for s in self.specs
        )


def _info(entry: list[Any]) -> CommandInfo:
    specs = tuple(
        {k: (_pairs(v) if k in ("begin_search", "find_keys") else v) for k, v in _pairs(s).items()}
        for s in (entry[8] if len(entry) > 8 else [])
    )
    for spec in specs:
        for part in ("begin_search", "find_keys"):
            spec[part]["spec"] = _pairs(spec[part].get("spec", []))
    subs = {}
    for sub in entry[9] if len(entry) > 9 else []:
        info = _info(sub)
        subs[info.name.split("|", 1)[-1]] = info
    return CommandInfo(
        name=str(entry[0]).lower(),
        flags=frozenset(str(f) for f in entry[2]),
        acl=frozenset(str(a) for a in entry[6]),
        specs=specs,
        subcommands=subs,
    )


def parse_command_table(reply: Any) -> dict[str, CommandInfo]:
    """``COMMAND``'s reply as ``{name: CommandInfo}``."""
    table = {}
    for entry in _text(reply):
        info = _info(entry)
        table[info.name] = info
    return table


def _spec_keys(spec: dict[str, Any], argv: Sequence[bytes]) -> list[bytes]:
    argc = len(argv)
    begin = spec["begin_search"]
    if begin["type"] == "index":
        start = int(begin["spec"]["index"])
    else:  # keyword
        keyword = str(begin["spec"]["keyword"]).lower().encode()
        startfrom = int(begin["spec"]["startfrom"])
        order = range(startfrom, argc) if startfrom >= 0 else range(argc + startfrom, 0, -1)
        found = [i for i in order if 0 < i < argc and argv[i].lower() == keyword]
        if not found:
            return []
        start = found[0] + 1
    if start >= argc:
        return []
    find = spec["find_keys"]
    if find["type"] == "range":
        last, step, limit = (int(find["spec"][k]) for k in ("lastkey", "keystep", "limit"))
        if last >= 0:
            end = start + last
        elif limit <= 1:
            end = argc + last
        else:
            end = start + (argc - start) // limit - 1
        return list(argv[start : min(end, argc - 1) + 1 : max(step, 1)])
    numkeys = int(argv[start + int(find["spec"]["keynumidx"])])
    first = start + int(find["spec"]["firstkey"])
    step = max(int(find["spec"]["keystep"]), 1)
    return list(argv[first : min(first + numkeys * step, argc) : step])


@dataclass
class Commands:
    """One server's command table, fetched on first use; ``getkeys`` asks the server."""

    fetch: Callable[[], Any]
    getkeys: Callable[[Sequence[bytes]], list[bytes]]
    _table: dict[str, CommandInfo] | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def table(self) -> dict[str, CommandInfo]:
        with self._lock:
            if self._table is None:
                self._table = parse_command_table(self.fetch())
            return self._table

    def info(self, argv: Sequence[bytes]) -> CommandInfo | None:
        info = self.table.get(argv[0].decode("utf-8", "replace").lower())
        if info is not None and info.subcommands and len(argv) > 1:
            sub = info.subcommands.get(argv[1].decode("utf-8", "replace").lower())
            return sub or info
        return info

    def keys(self, argv: Sequence[bytes], info: CommandInfo | None = None) -> list[bytes]:
        info = info or self.info(argv)
        if info is None or not info.specs:
            return []
        if info.incomplete:
            try:
                return self.getkeys(argv)
            except Exception:  # noqa: BLE001 — the server finds no key in it
                return []
        keys: list[bytes] = []
        for spec in info.specs:
            keys.extend(k for k in _spec_keys(spec, argv) if k not in keys)
        return keys


def slots(keys: Sequence[bytes]) -> set[int]:
    return {key_slot(k) for k in keys}
