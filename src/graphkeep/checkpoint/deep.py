"""``graphkeep check --deep``: every payload of a thread decoded with the deployment's serializer.

:func:`payload_problems` is a pure function of one thread's export (every checkpoint record,
pending write and stored value, payloads included: :meth:`CheckpointPort.export_thread
<graphkeep.checkpoint.port.CheckpointPort.export_thread>`) and a serializer. It decodes what a
reader would decode (the checkpoint, its metadata, the values its checkpoints name, the list
elements their manifests name, the pending writes) and reports, as plain
:class:`Problem` tuples that :mod:`graphkeep.checkpoint.check` turns into findings:

- ``undecodable``: the serializer (or zlib, for a compressed payload) fails, or returns None for
  a payload that does not stand for None (:func:`graphkeep.port.codec.load`'s rule);
- ``unknown_type``: a msgpack value names a class this process cannot import (LangGraph's
  serializer then hands back the object's raw fields, or None, in place of the object: the
  state no longer reads as written);
- ``plaintext``: in an encrypted deployment (an ``EncryptedSerializer``), a payload stored
  without encryption (LangGraph reads such rows as they are: nothing else would notice);
- ``missing_element``: a list manifest a checkpoint names lists an element that is not stored;
- ``malformed_write``: a pending write whose task id or index LangGraph's ``put_writes`` would
  not have written (an empty task id; a special channel off its fixed negative index, a
  negative index on another channel);
- ``orphan_elements``: element records no stored manifest names (a warning; ``--repair``
  deletes them, as ``prune`` does).

Values no checkpoint names are orphans (the inventory check reports them) and are not decoded.
Problems of one kind in one place are reported once, with a count.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any

import ormsgpack
from langgraph.checkpoint.base import WRITES_IDX_MAP

from graphkeep.checkpoint.lists import ELEMENT_CHANNEL, is_manifest, manifest_keys
from graphkeep.checkpoint.records import Inventory, ThreadDump
from graphkeep.port import codec
from graphkeep.port.codec import Typed

__all__ = [
    "CLASS_EXTS",
    "Problem",
    "is_encrypted",
    "payload_problems",
    "unknown_types",
    "write_problem",
]

#: LangGraph's msgpack extension codes that name a class as ``(module, name, ...)``
#: (constructor with one / positional / keyword arguments, method, pydantic v1 / v2)
CLASS_EXTS = frozenset({0, 1, 2, 3, 4, 5})


@dataclass(frozen=True, slots=True)
class Problem:
    """One deep finding before it is a :class:`~graphkeep.checkpoint.check.Finding`."""

    kind: str
    ns: str
    checkpoint_id: str | None
    channel: str | None
    detail: str


def is_encrypted(serde: Any) -> bool:
    """Does ``serde`` encrypt (LangGraph's ``EncryptedSerializer``: a serializer and a cipher)?"""
    return getattr(serde, "cipher", None) is not None and hasattr(serde, "serde")


def _can_import(module: str, name: str, known: dict[tuple[str, str], bool]) -> bool:
    key = (module, name)
    if key not in known:
        try:
            found = importlib.import_module(module)
            for part in name.split("."):
                found = getattr(found, part)
            known[key] = True
        except Exception:  # noqa: BLE001 - any failure is "cannot be rebuilt here"
            known[key] = False
    return known[key]


def unknown_types(data: bytes, known: dict[tuple[str, str], bool] | None = None) -> set[str]:
    """``module.name`` of every class a LangGraph msgpack payload names that this process
    cannot import (nested values included); ``known`` remembers the answers (one check)."""
    found: set[str] = set()
    known = {} if known is None else known

    def hook(code: int, raw: bytes) -> Any:
        if code in CLASS_EXTS:
            spec = ormsgpack.unpackb(raw, ext_hook=hook, option=ormsgpack.OPT_NON_STR_KEYS)
            module, name = str(spec[0]), str(spec[1])
            if not _can_import(module, name, known):
                found.add(f"{module}.{name}")
        else:  # numpy arrays, DeltaChannel snapshots (which hold plain msgpack): look inside
            try:
                ormsgpack.unpackb(raw, ext_hook=hook, option=ormsgpack.OPT_NON_STR_KEYS)
            except Exception:  # noqa: BLE001 - raw bytes (a numpy buffer), not msgpack
                pass
        return None

    ormsgpack.unpackb(data, ext_hook=hook, option=ormsgpack.OPT_NON_STR_KEYS)
    return found


def write_problem(task_id: Any, idx: Any, channel: str) -> str | None:
    """What is wrong with a pending write's address, as LangGraph's ``put_writes`` makes it
    (a task id; the index of the write in its task, or the fixed negative index of a special
    channel: ``WRITES_IDX_MAP``), or None."""
    if not isinstance(task_id, str) or not task_id:
        return "its task id is empty"
    if not isinstance(idx, int) or isinstance(idx, bool):
        return f"its index {idx!r} is not an integer"
    special = WRITES_IDX_MAP.get(channel)
    if special is not None and idx != special:
        return f"channel {channel} is always written at index {special}"
    if special is None and idx < 0:
        return "a negative index belongs to a special channel (error, interrupt, resume, ...)"
    return None


def _plain(serde: Any, value: Typed) -> tuple[str, bytes]:
    """The serializer's own tag and bytes of a stored payload: decompressed, decrypted."""
    value = codec.unsqueeze(value)
    tag, data = value.tag, value.data
    if "+" in tag and is_encrypted(serde):
        inner, _, cipher = tag.partition("+")
        return inner, bytes(serde.cipher.decrypt(cipher, data))
    return tag, data


def _reason(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:160]}" if text else type(exc).__name__


@dataclass(slots=True)
class _Entry:
    ns: str
    checkpoint_id: str | None
    channel: str | None
    detail: str
    count: int = 0


@dataclass(slots=True)
class _Tally:
    """Problems counted per kind and place, the first occurrence's words kept; a problem
    given a ``group`` is counted per namespace and group instead (a thread written without
    the key is one ``plaintext`` finding, not one per payload)."""

    entries: dict[tuple[str, ...], tuple[str, _Entry]] = field(default_factory=dict)
    #: classes looked up so far: (module, name) -> importable
    known: dict[tuple[str, str], bool] = field(default_factory=dict)
    #: the records were sealed by graphkeep.encryption (opened before they are decoded): a
    #: payload inside an envelope is encrypted whatever the serializer's tag says
    sealed: bool = False

    def add(
        self,
        kind: str,
        ns: str,
        cid: str | None,
        channel: str | None,
        detail: str,
        group: str | None = None,
    ) -> None:
        key = (kind, ns, "g", group) if group is not None else (kind, ns, cid or "", channel or "")
        _, entry = self.entries.setdefault(key, (kind, _Entry(ns, cid, channel, detail)))
        entry.count += 1

    def result(self) -> list[Problem]:
        out = []
        for key, (kind, e) in sorted(self.entries.items()):
            if key[2] == "g" and e.count > 1:
                detail = f"{e.count} payloads, e.g. {e.detail}"
            else:
                detail = e.detail + (f" ({e.count} payloads)" if e.count > 1 else "")
            out.append(Problem(kind, e.ns, e.checkpoint_id, e.channel, detail))
        return out


def _decode(
    serde: Any, value: Typed, what: str, place: tuple[str, str | None, str | None], tally: _Tally
) -> None:
    """Decode one payload as a reader would; what fails goes to ``tally`` at ``place``."""
    ns, cid, channel = place
    if value.tag == codec.EMPTY_TAG:
        return
    encrypted = is_encrypted(serde)
    stored_tag = value.tag.removeprefix(codec.COMPRESSED_PREFIX)
    if encrypted and not tally.sealed and "+" not in stored_tag:
        what_tag = f"{what} is stored unencrypted ({stored_tag})"
        tally.add("plaintext", ns, cid, channel, what_tag, group="")
    try:
        codec.load(serde, value)  # raises for None where the payload does not stand for None
        tag, data = _plain(serde, value)
        lost = unknown_types(data, tally.known) if tag == "msgpack" else set()
    except Exception as exc:  # noqa: BLE001 - every failure (zlib, the serializer) is one
        tally.add("undecodable", ns, cid, channel, f"{what}: {_reason(exc)}")
        return
    for name in sorted(lost):
        tally.add(
            "unknown_type",
            ns,
            cid,
            channel,
            f"{what} holds a {name}, which this process cannot import: LangGraph reads it"
            " back as its raw fields (or None), not as the object",
            group=name,
        )


def payload_problems(
    dump: ThreadDump,
    serde: Any,
    ns: str | None = None,
    stored: Inventory | None = None,
    *,
    sealed: bool = False,
) -> tuple[list[Problem], list[tuple[str, str, str]]]:
    """The deep problems of one thread's export (only namespace ``ns`` when given), and the
    blob keys ``(ns, ELEMENT_CHANNEL, key)`` of its orphan list elements. ``stored``: the
    thread's inventory (its keys), read just before: a checkpoint or a value a checkpoint
    names that it lists but the export could not read whole (a chunk missing: a store
    leaves a payload out while it looks half-written) is ``undecodable``. ``sealed``: the
    payloads were opened from graphkeep's envelopes (no ``plaintext`` finding by tag)."""
    tally = _Tally(sealed=sealed)
    records = [r for r in dump.checkpoints if ns is None or r.ns == ns]
    blobs = {(s, b.channel, b.version): b.value for s, b in dump.blobs if ns is None or s == ns}
    if stored is not None:
        exported = {(r.ns, r.checkpoint_id) for r in records}
        for summary in stored.checkpoints:
            if (ns is None or summary.ns == ns) and (
                summary.ns,
                summary.checkpoint_id,
            ) not in exported:
                what = "the checkpoint is stored but its payload does not read back whole"
                tally.add("undecodable", summary.ns, summary.checkpoint_id, None, what)
        for record in records:
            for channel in record.present:
                named_key = (record.ns, channel, record.versions.get(channel, ""))
                if named_key in stored.blob_keys and named_key not in blobs:
                    what = f"the value at version {named_key[2]} does not read back whole"
                    tally.add("undecodable", record.ns, record.checkpoint_id, channel, what)
    # the newest checkpoint naming each stored value
    named: dict[tuple[str, str, str], str] = {}
    for record in sorted(records, key=lambda r: r.checkpoint_id):
        at = (record.ns, record.checkpoint_id, None)
        _decode(serde, record.checkpoint, "the checkpoint", at, tally)
        _decode(serde, record.metadata, "the metadata", at, tally)
        for channel in record.present:
            version = record.versions.get(channel)
            if version is not None:
                named[(record.ns, channel, version)] = record.checkpoint_id
    for s, cid, write in dump.writes:
        if ns is None or s == ns:
            what = f"the pending write of task {write.task_id} idx {write.idx}"
            malformed = write_problem(write.task_id, write.idx, write.channel)
            if malformed is not None:
                tally.add("malformed_write", s, cid, write.channel, f"{what}: {malformed}")
            _decode(serde, write.value, what, (s, cid, write.channel), tally)
    # list elements: every stored manifest keeps its elements; a named one must find them
    users: dict[tuple[str, str], tuple[str, str]] = {}
    kept: set[tuple[str, str]] = set()
    for (s, channel, version), value in sorted(blobs.items()):
        if channel == ELEMENT_CHANNEL or not is_manifest(value):
            continue
        named_by = named.get((s, channel, version))
        try:
            keys = manifest_keys(value)
        except Exception as exc:  # noqa: BLE001 - a manifest that does not parse
            if named_by is not None:
                what = f"the list manifest: {_reason(exc)}"
                tally.add("undecodable", s, named_by, channel, what)
            continue
        kept.update((s, key) for key in keys)
        if named_by is None:
            continue
        for key in keys:
            users[(s, key)] = (named_by, channel)
            if (s, ELEMENT_CHANNEL, key) not in blobs:
                tally.add(
                    "missing_element",
                    s,
                    named_by,
                    channel,
                    f"list element {key} of version {version} is not stored",
                )
    for (s, channel, version), value in sorted(blobs.items()):
        if channel == ELEMENT_CHANNEL:
            if (s, version) in users:
                user, list_channel = users[(s, version)]
                what = f"list element {version}"
                _decode(serde, value, what, (s, user, list_channel), tally)
            continue
        named_by = named.get((s, channel, version))
        if named_by is not None and not is_manifest(value):
            what = f"the value at version {version}"
            _decode(serde, value, what, (s, named_by, channel), tally)
    orphans = sorted(
        key for key in blobs if key[1] == ELEMENT_CHANNEL and (key[0], key[2]) not in kept
    )
    by_ns: dict[str, list[str]] = {}
    for s, _, key in orphans:
        by_ns.setdefault(s, []).append(key)
    problems = tally.result()
    for s, keys in sorted(by_ns.items()):
        problems.append(
            Problem(
                "orphan_elements",
                s,
                None,
                ELEMENT_CHANNEL,
                f"{len(keys)} list element record(s) no stored list names (first: {keys[0]})",
            )
        )
    return problems, orphans
