"""The Redis checkpoint port (plain Redis >= 7: hashes, sorted sets, Lua) and the savers on it.

A thread is eight keys sharing one hash tag (layout in :mod:`.checkpoint_scripts`); every
port call is one script call or command, i.e. one round trip, except the
cross-thread admin paths (``list(None)``, ``delete_for_runs``) which SCAN for
threads first and are documented as costly. Nothing global is touched on the
write path. The parent walk of a read is the ``chain`` script: server-side, in one round
trip, it follows the rule of :func:`graphkeep.checkpoint.walk.walk_op`.

``watch`` reads the thread's feed, a Redis Stream the put script appends to
(:class:`Feed <graphkeep.checkpoint.port.Feed>`): ``feed_read`` blocks in ``XREAD``
on the stream's node and wakes as soon as a put lands; ``commits`` and
``newest_commit`` answer from the lex indexes ``a`` / ``x``.

Requests yielded here are plain data (:mod:`.requests`); the executors of :mod:`.client`
run them on a sync or asyncio client (see docs/architecture.md).

:class:`RedisSaver` (sync) and :class:`AsyncRedisSaver` (asyncio) take an existing
redis-py client (``Redis``, ``RedisCluster`` or their asyncio twins) or are opened with
``from_url`` as a context manager::

    with RedisSaver.from_url("redis://localhost:6379/0") as saver:
        graph = builder.compile(checkpointer=saver)

URLs: ``redis://``, ``rediss://``, ``unix://`` for one server and
``redis+cluster://host:port`` (``rediss+cluster://`` with TLS) for a cluster seed.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from graphkeep.backends.redis.checkpoint_codec import (
    SEP,
    feed_id,
    join_field,
    loaded_of,
    pack_head,
    record_of,
    split_index_member,
    stream_entries,
    summary_of,
    text,
    writes_of,
)
from graphkeep.backends.redis.checkpoint_scripts import (
    FEED_COUNT,
    SCRIPTS,
    STAGE_LOST,
    THREAD_KEYS,
    lease_refusal,
)
from graphkeep.backends.redis.client import OnRedis, RedisSite, ResponseError
from graphkeep.backends.redis.effects import EFFECT_SCRIPTS, RedisEffectsPort
from graphkeep.backends.redis.keys import (
    CHECKPOINT_FORMAT,
    check_prefix,
    decode_thread,
    encode_thread,
    fence_key,
    pattern_prefix,
)
from graphkeep.backends.redis.requests import (
    Command,
    Delete,
    Pipeline,
    Scan,
    Script,
    XRead,
    script_room,
)
from graphkeep.checkpoint.port import INTERRUPT_IDX, CheckpointPort
from graphkeep.checkpoint.records import (
    HOLDS_CHECKPOINT,
    HOLDS_OTHER,
    HOLDS_VALUE,
    HOLDS_WRITES,
    Activity,
    BlobRecord,
    Chain,
    CheckpointRecord,
    Expiring,
    Inventory,
    Link,
    ListQuery,
    Loaded,
    Summary,
    ThreadDump,
    Typed,
    WriteRecord,
)
from graphkeep.checkpoint.saver import AsyncSaver, SyncSaver, thread_options
from graphkeep.port import Op, codec

__all__ = ["AsyncRedisSaver", "RedisCheckpointPort", "RedisSaver"]

#: the saver's scripts and the effect ledger's (``saver.effects`` shares the executor)
ALL_SCRIPTS = {**SCRIPTS, **EFFECT_SCRIPTS}
#: how many times a call too large for one request is staged when its staging hash is
#: deleted before its commit (a delete_thread at the same moment)
STAGE_ATTEMPTS = 3
FORMAT = CHECKPOINT_FORMAT  # old keys stay readable by old code


#: a feed position: (stream entry id, highest checkpoint id delivered so far or None)
FeedPosition = tuple[str, str | None]


#: what each of ``thread_keys`` holds, in its order (h p x a w wi b f)
_KEY_HOLDS = (
    HOLDS_CHECKPOINT,
    HOLDS_CHECKPOINT,
    HOLDS_OTHER,
    HOLDS_OTHER,
    HOLDS_WRITES,
    HOLDS_WRITES,
    HOLDS_VALUE,
    HOLDS_OTHER,
)


#: the threads whose lease keys a port keeps made (then it starts afresh)
LEASE_KEYS_KEPT = 1024


class RedisCheckpointPort(CheckpointPort):
    """The checkpoint port on Redis. ``ttl`` in seconds slides on every write of a thread.

    It has a native commit feed (``feed = True``): the thread's stream, see
    :meth:`feed_read`; and takes a lease with a read in one script (``leases_with_read``:
    :meth:`load_leased`).
    """

    feed = True
    leases_with_read = True
    #: the saver's scripts and its effect ledger's (the ledger shares the saver's executor)
    scripts = ALL_SCRIPTS

    def __init__(
        self,
        *,
        key_prefix: str = "graphkeep",
        ttl: float | None = None,
        refresh_ttl_on_read: bool = False,
    ) -> None:
        self.prefix = check_prefix(key_prefix)
        self.ttl_ms = int(ttl * 1000) if ttl else 0
        self.read_ttl_ms = self.ttl_ms if refresh_ttl_on_read else 0
        #: thread id -> its lease's keys (lock, fencing token): a leased run names them in
        #: its read, each of its writes and its release
        self._lease_keys: dict[str, tuple[str, str]] = {}

    @classmethod
    def configured(cls, site: RedisSite, options: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        return cls(**thread_options(options)), options

    # -- keys ----------------------------------------------------------------------

    def thread_keys(self, thread_id: str) -> list[str]:
        base = f"{self.prefix}:{FORMAT}:{{{encode_thread(thread_id)}}}"
        return [f"{base}:{suffix}" for suffix in ("h", "p", "x", "a", "w", "wi", "b", "f")]

    def stage_key(self, thread_id: str) -> str:
        """The thread's staging hash: the first arguments of a script call too large for one
        request (see :meth:`_atomic` and ``checkpoint_scripts``); never read otherwise."""
        return f"{self.prefix}:{FORMAT}:{{{encode_thread(thread_id)}}}:s"

    def fence_key(self, thread_id: str) -> str:
        return self._lease_keys_of(thread_id)[1]

    def _lease_keys_of(self, thread_id: str) -> tuple[str, str]:
        keys = self._lease_keys.get(thread_id)
        if keys is None:
            if len(self._lease_keys) >= LEASE_KEYS_KEPT:
                self._lease_keys.clear()
            # same hash tag as the thread, but not one of its eight data keys: a
            # delete_thread or TTL refresh leaves a held lease alone
            lock = f"{self.prefix}:{FORMAT}:{{{encode_thread(thread_id)}}}:lock"
            keys = self._lease_keys[thread_id] = (lock, fence_key(self.prefix, thread_id))
        return keys

    def _atomic(
        self, name: str, thread_id: str, args: list[Any], fence: int | None = None
    ) -> Op[Any]:
        """The script ``name`` on the thread's keys with ``args``: one request when they fit
        in one (every call of a normal size), else the first arguments staged in as few
        ``stage`` requests as hold them and ``<name>/staged`` with the rest, which applies
        the whole call in one script (the thread changes there, all or nothing).

        ``fence`` (a lease's fencing token): the ``/fenced`` script, which checks it against
        the thread's fencing token first and writes nothing when a newer one was granted
        (:class:`~graphkeep.errors.LeaseLost`)."""
        keys = self.thread_keys(thread_id)
        tail_keys, tail_args, fenced = [], [], ""
        if fence is not None:
            tail_keys, tail_args, fenced = [self.fence_key(thread_id)], [fence], "/fenced"
        try:
            if len(args) + len(tail_args) <= script_room(len(keys) + len(tail_keys)):
                return (yield Script(name + fenced, keys + tail_keys, args + tail_args))
            stage = self.stage_key(thread_id)
            # the staging hash and fencing token's keys; the token, count and holder's token
            inline = script_room(len(keys) + 1 + len(tail_keys)) - 2 - len(tail_args)
            staged, rest = args[: len(args) - inline], args[len(args) - inline :]
            per = script_room(1) - 2  # token and first index
            attempts = 0
            while True:
                # staged anew (a fresh token) when the staging hash went in between: the
                # thread was deleted meanwhile, and this call writes it again, as a plain call
                # would
                attempts += 1
                token = uuid.uuid4().hex
                for start in range(0, len(staged), per):
                    chunk = staged[start : start + per]
                    yield Script("stage", [stage], [token, start, *chunk])
                try:
                    return (
                        yield Script(
                            f"{name}/staged{fenced}",
                            [*keys, stage, *tail_keys],
                            [token, len(staged), *rest, *tail_args],
                        )
                    )
                except ResponseError as exc:
                    if STAGE_LOST not in str(exc) or attempts == STAGE_ATTEMPTS:
                        raise
        except ResponseError as exc:
            raise lease_refusal(exc, thread_id, fence) from None

    def feed_key(self, thread_id: str) -> str:
        """The thread's feed: a Stream of ``n`` = namespace, ``c`` = checkpoint id (or ``u``
        = its 16 bytes when it is a UUID)."""
        return self.thread_keys(thread_id)[7]

    def _thread_pattern(self) -> str:
        return f"{pattern_prefix(self.prefix)}:{FORMAT}:{{*}}:h"

    def _thread_of(self, key: bytes | str) -> str:
        text = key.decode() if isinstance(key, bytes) else key
        start = len(self.prefix) + len(FORMAT) + 3
        return decode_thread(text[start:-3])

    # -- port ----------------------------------------------------------------------

    def setup(self) -> Op[None]:
        yield Script("__load__", [], [])

    def put_checkpoint(
        self, record: CheckpointRecord, blobs: list[BlobRecord], fence: int | None = None
    ) -> Op[None]:
        args: list[Any] = [
            record.ns,
            record.checkpoint_id,
            pack_head(record),
            codec.packb(
                [
                    record.checkpoint.tag,
                    record.checkpoint.data,
                    record.metadata.tag,
                    record.metadata.data,
                ]
            ),
            self.ttl_ms,
            len(blobs),
        ]
        for blob in blobs:
            field = join_field(record.ns, blob.channel, blob.version)
            args += [field, codec.pack_typed(blob.value)]
        yield from self._atomic("put", record.thread_id, args, fence)

    def put_writes(
        self,
        thread_id: str,
        ns: str,
        checkpoint_id: str,
        writes: list[WriteRecord],
        fence: int | None = None,
    ) -> Op[None]:
        args: list[Any] = [ns, checkpoint_id, self.ttl_ms, len(writes)]
        for w in writes:
            args += [
                w.task_id,
                str(w.idx),
                "1" if w.special else "0",
                codec.packb([w.channel, w.task_path, w.value.tag, w.value.data]),
            ]
        yield from self._atomic("put_writes", thread_id, args, fence)

    def load(self, thread_id: str, ns: str, checkpoint_id: str | None) -> Op[Loaded | None]:
        raw = yield Script(
            "get", self.thread_keys(thread_id), [ns, checkpoint_id or "", self.read_ttl_ms]
        )
        return loaded_of(thread_id, raw, {}) if raw else None

    def list_page(
        self, query: ListQuery, cursor: Any, page_size: int
    ) -> Op[tuple[list[Loaded], Any]]:
        if query.thread_id is None:
            return (yield from self._list_all_threads(query, cursor, page_size))
        if query.ns is not None:
            mode = "ns"
            upper = cursor if cursor is not None else (query.before or "")
            if query.checkpoint_id is not None:
                # one exact checkpoint: fetch it and stop
                if query.before and query.checkpoint_id >= query.before:
                    return [], None
                loaded = yield from self.load(query.thread_id, query.ns, query.checkpoint_id)
                return ([loaded] if loaded else []), None
        else:
            mode = "id" if query.checkpoint_id is not None else "all"
            upper = cursor if cursor is not None else (query.before or "")
        raw = yield Script(
            "list",
            self.thread_keys(query.thread_id),
            [mode, query.ns or "", query.checkpoint_id or "", upper, page_size, self.read_ttl_ms],
        )
        next_upper = raw[0]
        pages: dict[str, dict[str, Typed]] = {}
        items = [loaded_of(query.thread_id, it, pages) for it in raw[1:]]
        return items, (next_upper.decode() if next_upper else None)

    def _list_all_threads(
        self, query: ListQuery, cursor: Any, page_size: int
    ) -> Op[tuple[list[Loaded], Any]]:
        # Costly by nature: SCAN for threads, read every id, then fetch pages by id.
        if cursor is None:
            entries: list[tuple[str, str, str]] = []
            for thread_id in (yield from self._threads()):
                members = yield Script("all_ids", self.thread_keys(thread_id), [])
                for member in members:
                    cid, _, ns = member.partition(SEP)
                    entries.append((cid.decode(), thread_id, ns.decode()))
            entries.sort(reverse=True)
            if query.before is not None:
                entries = [e for e in entries if e[0] < query.before]
            if query.checkpoint_id is not None:
                entries = [e for e in entries if e[0] == query.checkpoint_id]
            cursor = (entries, 0)
        entries, pos = cursor
        page = entries[pos : pos + page_size]
        items: list[Loaded] = []
        by_thread: dict[str, list[tuple[str, str]]] = {}
        for cid, thread_id, ns in page:
            by_thread.setdefault(thread_id, []).append((ns, cid))
        fetched: dict[tuple[str, str, str], Loaded] = {}
        per = (script_room(THREAD_KEYS) - 1) // 2
        for thread_id, wanted in by_thread.items():
            raw = []
            for start in range(0, len(wanted), per):
                args: list[Any] = [len(wanted[start : start + per])]
                for ns, cid in wanted[start : start + per]:
                    args += [ns, cid]
                raw += yield Script("fetch", self.thread_keys(thread_id), args)
            pages: dict[str, dict[str, Typed]] = {}
            for it in raw:
                if it:
                    loaded = loaded_of(thread_id, it, pages)
                    rec = loaded.record
                    fetched[(rec.checkpoint_id, thread_id, rec.ns)] = loaded
        items = [fetched[e] for e in page if e in fetched]
        pos += len(page)
        return items, ((entries, pos) if pos < len(entries) else None)

    def chain(
        self, thread_id: str, ns: str, checkpoint_id: str | None, channels: list[str]
    ) -> Op[Chain]:
        # Channels beyond one request's room: one walk per part, from the target the first
        # one found. Each walk follows the same parent links and stops once its channels have
        # values, so the longest walk is the whole one and the seed values add up.
        per = script_room(THREAD_KEYS) - 3
        parts = [channels[i : i + per] for i in range(0, len(channels), per)] or [[]]
        target: str | None = None
        ancestors: list[Summary] = []
        writes: dict[str, list[WriteRecord]] = {}
        blobs: dict[tuple[str, str], Typed] = {}
        for number, part in enumerate(parts):
            at = checkpoint_id if number == 0 else target
            raw = yield Script(
                "chain", self.thread_keys(thread_id), [ns, at or "", self.read_ttl_ms, *part]
            )
            found, steps = raw
            if not found:
                return Chain(None, [], {}, {})
            target = found.decode()
            walked: list[Summary] = []
            for parent, head, wfields, wvalues, chans, seed_blobs in steps:
                summary = summary_of(ns, parent.decode(), head)
                walked.append(summary)
                writes[summary.checkpoint_id] = writes_of(wfields, wvalues)
                for ch, blob in zip(chans, seed_blobs, strict=True):
                    if blob:
                        channel = ch.decode()
                        blobs[(channel, summary.versions[channel])] = codec.unpack_typed(blob)
            if len(walked) > len(ancestors):
                ancestors = walked
        return Chain(target, ancestors, writes, blobs)

    def get_blobs(
        self, thread_id: str, keys: list[tuple[str, str, str]]
    ) -> Op[dict[tuple[str, str, str], Typed]]:
        if not keys:
            return {}
        fields = [join_field(*key) for key in keys]
        per = script_room(THREAD_KEYS) - 1
        raw = []
        for start in range(0, len(fields), per):
            args: list[Any] = [self.read_ttl_ms, *fields[start : start + per]]
            raw += yield Script("blobs", self.thread_keys(thread_id), args)
        return {
            key: codec.unpack_typed(value)
            for key, value in zip(keys, raw, strict=True)
            if value is not None
        }

    def delete_thread(self, thread_id: str, fence: int | None = None) -> Op[None]:
        keys = [*self.thread_keys(thread_id), self.stage_key(thread_id)]
        if fence is None:
            yield Delete(keys)
            return
        try:
            yield Script("drop/fenced", [*keys, self.fence_key(thread_id)], [fence])
        except ResponseError as exc:
            raise lease_refusal(exc, thread_id, fence) from None

    def inventory(self, thread_id: str) -> Op[Inventory]:
        keys = self.thread_keys(thread_id)
        heads, wmembers, bkeys, pexpiretimes = yield Script("inventory", keys, [])
        checkpoints = []
        for i in range(0, len(heads), 2):
            ns, _, cid = heads[i].partition(SEP)
            checkpoints.append(summary_of(ns.decode(), cid.decode(), heads[i + 1]))
        write_keys = set()
        for member in wmembers:
            ns, cid, _rest = member.split(SEP, 2)
            write_keys.add((ns.decode(), cid.decode()))
        blob_keys = set()
        for key in bkeys:
            ns, ch, version = key.split(SEP, 2)
            blob_keys.add((ns.decode(), ch.decode(), version.decode()))
        # TTL is per key and every write re-arms all of the thread's keys: each key is a
        # unit of the whole thread (ns None); its ref is its place in ``thread_keys``
        expiries = [
            Expiring(i + 1, None if ms == -1 else ms / 1000, _KEY_HOLDS[i])
            for i, ms in enumerate(pexpiretimes)
            if ms != -2
        ]
        return Inventory(checkpoints, write_keys, blob_keys, expiries)

    def rearm(self, thread_id: str, refs: list[Any], at: float | None) -> Op[None]:
        if refs:
            at_ms = -1 if at is None else int(at * 1000)
            yield Script("rearm", self.thread_keys(thread_id), [at_ms, *sorted(refs)])

    def delete_records(
        self,
        thread_id: str,
        checkpoints: list[tuple[str, str]],
        blobs: list[tuple[str, str, str]],
        fence: int | None = None,
    ) -> Op[None]:
        args: list[Any] = [len(checkpoints)]
        for ns, cid in checkpoints:
            args += [ns, cid]
        args += [join_field(ns, ch, version) for ns, ch, version in blobs]
        yield from self._atomic("delete", thread_id, args, fence)

    def find_runs(self, run_ids: list[str]) -> Op[dict[str, list[tuple[str, str]]]]:
        found: dict[str, list[tuple[str, str]]] = {}
        per = script_room(THREAD_KEYS)
        for thread_id in (yield from self._threads()):
            fields = []
            for start in range(0, len(run_ids), per):
                wanted = list(run_ids[start : start + per])
                fields += yield Script("find_runs", self.thread_keys(thread_id), wanted)
            for field in fields:
                ns, _, cid = field.partition(SEP)
                found.setdefault(thread_id, []).append((ns.decode(), cid.decode()))
        return found

    def export_thread(self, thread_id: str) -> Op[ThreadDump]:
        heads, payloads, writes, blobs = yield Script("export", self.thread_keys(thread_id), [])
        payload_of = {payloads[i]: payloads[i + 1] for i in range(0, len(payloads), 2)}
        dump = ThreadDump([], [], [])
        for i in range(0, len(heads), 2):
            field = heads[i]
            ns, _, cid = field.partition(SEP)
            payload = payload_of.get(field)
            if payload is None:
                continue
            dump.checkpoints.append(
                record_of(thread_id, ns.decode(), cid.decode(), heads[i + 1], payload)
            )
        for i in range(0, len(writes), 2):
            ns, cid, _rest = writes[i].split(SEP, 2)
            (write,) = writes_of([writes[i]], [writes[i + 1]])
            dump.writes.append((ns.decode(), cid.decode(), write))
        for i in range(0, len(blobs), 2):
            ns, ch, version = blobs[i].split(SEP, 2)
            value = codec.unpack_typed(blobs[i + 1])
            dump.blobs.append((ns.decode(), BlobRecord(ch.decode(), version.decode(), value)))
        return dump

    def import_thread(self, thread_id: str, dump: ThreadDump, fence: int | None = None) -> Op[None]:
        blob_args: list[Any] = []
        for ns, blob in dump.blobs:
            blob_args += [join_field(ns, blob.channel, blob.version), codec.pack_typed(blob.value)]
        write_args: list[Any] = []
        for ns, cid, w in dump.writes:
            write_args += [
                join_field(ns, cid, w.task_id, str(w.idx)),
                codec.packb([w.channel, w.task_path, w.value.tag, w.value.data]),
            ]
        cp_args: list[Any] = []
        # in id order: the script announces each new checkpoint on the feed as it goes
        for rec in sorted(dump.checkpoints, key=lambda r: (r.checkpoint_id, r.ns)):
            cp_args += [
                join_field(rec.ns, rec.checkpoint_id),
                pack_head(rec),
                codec.packb(
                    [rec.checkpoint.tag, rec.checkpoint.data, rec.metadata.tag, rec.metadata.data]
                ),
            ]
        args = [
            self.ttl_ms,
            len(dump.blobs),
            len(dump.checkpoints),
            len(dump.writes),
            *blob_args,
            *write_args,
            *cp_args,
        ]
        yield from self._atomic("import", thread_id, args, fence)

    def list_threads(self, cursor: Any, page_size: int) -> Op[tuple[list[str], Any]]:
        threads = yield from self._threads()
        return threads, None

    def commits(
        self, thread_id: str, ns: str | None, above: str | None, limit: int
    ) -> Op[list[tuple[str, str]]]:
        """``(ns, id)`` above ``above``, ascending, from one ``ZRANGEBYLEX``: on ``a``
        (members ``id NUL ns``: every namespace, in (id, ns) order) or on ``x``
        (``ns NUL id``: one namespace). Ids never contain NUL, so ``id NUL ...`` sorts
        below ``id \\x01`` and every longer id above it: ``[above \\x01`` on ``a`` and
        ``(ns NUL above`` on ``x`` start strictly above ``above``."""
        keys = self.thread_keys(thread_id)
        if ns is None:
            low = "-" if above is None else "[" + above + "\x01"
            raw = yield Command(("ZRANGEBYLEX", keys[3], low, "+", "LIMIT", 0, limit))
            return [split_index_member(m, id_first=True) for m in raw]
        low = "[" + ns + "\x00" if above is None else "(" + ns + "\x00" + above
        raw = yield Command(("ZRANGEBYLEX", keys[2], low, "(" + ns + "\x01", "LIMIT", 0, limit))
        return [split_index_member(m, id_first=False) for m in raw]

    def newest_commit(self, thread_id: str, ns: str | None) -> Op[str | None]:
        """The last member of ``a`` (any namespace) or of ``ns``'s range of ``x``."""
        keys = self.thread_keys(thread_id)
        if ns is None:
            raw = yield Command(("ZREVRANGEBYLEX", keys[3], "+", "-", "LIMIT", 0, 1))
        else:
            raw = yield Command(
                ("ZREVRANGEBYLEX", keys[2], "(" + ns + "\x01", "[" + ns + "\x00", "LIMIT", 0, 1)
            )
        return split_index_member(raw[0], id_first=ns is None)[1] if raw else None

    def write_indexes(self, thread_id: str, ns: str, checkpoint_id: str) -> Op[list[int]]:
        """The ``idx`` ending each member ``ns NUL id NUL task NUL idx`` of the checkpoint's
        range of ``wi``: one ``ZRANGEBYLEX``."""
        member = ns + "\x00" + checkpoint_id
        keys = self.thread_keys(thread_id)
        raw = yield Command(("ZRANGEBYLEX", keys[5], "[" + member + "\x00", "(" + member + "\x01"))
        return [int(m.rsplit(SEP, 1)[1]) for m in raw]

    def activity(self, thread_id: str, above: str, limit: int) -> Op[Activity]:
        """One ``activity`` script: the ``a`` index above ``above``, the newest id, the
        root head's write indexes and ``MEMORY USAGE`` of the thread's keys (one slot)."""
        found = yield from self.activities([thread_id], above, limit)
        return found[0]

    def activities(self, thread_ids: list[str], above: str, limit: int) -> Op[list[Activity]]:
        """The ``activity`` script of each thread, sent as one pipeline (a cluster: one
        call per slot)."""
        if not thread_ids:
            return []
        calls = tuple(
            Script("activity", self.thread_keys(t), [above, limit, INTERRUPT_IDX])
            for t in thread_ids
        )
        replies = yield Pipeline(calls)
        found = []
        for thread_id, (recent, newest, interrupted, size, links) in zip(
            thread_ids, replies, strict=True
        ):
            placed = [split_index_member(m, id_first=True) for m in recent]
            found.append(
                Activity(
                    thread_id,
                    newest.partition(SEP)[0].decode() or None,
                    [cid for _, cid in placed],
                    bool(interrupted),
                    int(size),
                    [
                        Link(ns, cid, text(parent) or None, text(source) or None, text(run) or None)
                        for (ns, cid), (parent, run, source) in zip(placed, links, strict=True)
                    ],
                )
            )
        return found

    def feed_end(self, thread_id: str) -> Op[FeedPosition]:
        """The feed's newest entry id ("0-0" when empty) with the thread's highest
        checkpoint id (the floor a catch-up from the index would start above)."""
        pos, newest = yield Script("feed_end", self.thread_keys(thread_id), [])
        return pos.decode(), (newest.decode() or None)

    def feed_read(
        self, thread_id: str, position: FeedPosition, wait_ms: int
    ) -> Op[tuple[list[tuple[str, str]], FeedPosition]]:
        """Feed entries after ``position``: ``XREAD COUNT FEED_COUNT [BLOCK wait_ms]``.

        A blocking read that returns fewer than ``FEED_COUNT`` entries is complete (the
        stream keeps more than that, so nothing after ``position`` can have been trimmed).
        A full one, and every non-blocking read, go through the ``feed`` script, which
        reads the stream and notices trimming in the same step, catching up from the
        index then (see ``scripts.FEED``).
        """
        entry_id, newest = position
        if wait_ms > 0:
            raw = yield XRead(self.feed_key(thread_id), entry_id, FEED_COUNT, wait_ms)
            entries = stream_entries(raw)
            if len(entries) < FEED_COUNT:
                found = [(ns, cid) for _, ns, cid in entries]
                if entries:
                    entry_id = entries[-1][0]
                return found, (entry_id, _highest(newest, found))
        raw = yield Script(
            "feed", self.thread_keys(thread_id), [entry_id, newest or "", FEED_COUNT]
        )
        found = [(raw[i].decode(), feed_id(raw[i + 1], raw[i + 2])) for i in range(2, len(raw), 3)]
        return found, (raw[1].decode(), _highest(newest, found))

    def lock_key(self, thread_id: str) -> str:
        return self._lease_keys_of(thread_id)[0]

    def acquire_lock(self, thread_id: str, token: str, ttl_ms: int) -> Op[int]:
        keys = [self.lock_key(thread_id), self.fence_key(thread_id)]
        fence = yield Script("lock", keys, [token, ttl_ms, int(time.time() * 1000)])
        return int(fence)

    def load_leased(
        self, thread_id: str, ns: str, checkpoint_id: str | None, token: str, ttl_ms: int
    ) -> Op[tuple[int, Loaded | None]]:
        """One script: the lease (as :meth:`acquire_lock`), then, when granted, the read (as
        :meth:`load`) — ``saver.exclusive``'s first read costs no request for its lease."""
        keys = [*self.thread_keys(thread_id), self.lock_key(thread_id), self.fence_key(thread_id)]
        now = int(time.time() * 1000)
        args = [ns, checkpoint_id or "", self.read_ttl_ms, token, ttl_ms, now]
        raw = yield Script("get/leased", keys, args)
        fence = int(raw[0])
        found = raw[1] if fence and len(raw) > 1 else None
        return fence, (loaded_of(thread_id, found, {}) if found else None)

    def settled_key(self, thread_id: str) -> str:
        # the thread's hash tag, not one of its data keys: delete_thread and TTL leave it
        return f"{self.prefix}:{FORMAT}:{{{encode_thread(thread_id)}}}:settled"

    def is_settled(self, thread_id: str) -> Op[bool]:
        found = yield Command(("EXISTS", self.settled_key(thread_id)))
        return bool(found)

    def settle(self, thread_id: str) -> Op[None]:
        yield Command(("SET", self.settled_key(thread_id), "1"))

    def release_lock(self, thread_id: str, token: str) -> Op[bool]:
        released = yield Script("unlock", [self.lock_key(thread_id)], [token])
        return bool(released)

    def extend_lock(self, thread_id: str, token: str, ttl_ms: int) -> Op[bool]:
        extended = yield Script("extend_lock", [self.lock_key(thread_id)], [token, ttl_ms])
        return bool(extended)

    def _threads(self) -> Op[list[str]]:
        keys = yield Scan(self._thread_pattern())
        return sorted({self._thread_of(k) for k in keys})


def _highest(newest: str | None, found: list[tuple[str, str]]) -> str | None:
    """The highest checkpoint id among ``newest`` and the entries just read."""
    ids = [cid for _, cid in found]
    if newest is not None:
        ids.append(newest)
    return max(ids, default=None)


class RedisSaver(OnRedis, SyncSaver):
    """Sync saver on a ``redis.Redis`` or ``redis.cluster.RedisCluster`` client.

    Options: ``serde``, ``ttl`` (seconds or timedelta, sliding per thread),
    ``refresh_ttl_on_read``, ``key_prefix`` (default ``"graphkeep"``),
    ``max_id_bytes`` (default 1024). ``where`` names the server in errors (default:
    the client's host and port).
    """

    port_type = RedisCheckpointPort
    effects_port_type = RedisEffectsPort


class AsyncRedisSaver(OnRedis, AsyncSaver):
    """Asyncio saver on a ``redis.asyncio.Redis`` or ``redis.asyncio.RedisCluster`` client
    (options as :class:`RedisSaver`)."""

    port_type = RedisCheckpointPort
    effects_port_type = RedisEffectsPort
