"""``graphkeep rekey``: a store's records rewritten under the current key of ``GRAPHKEEP_KEYS``.

Per thread (``--thread T ...`` or ``--all``, in id order), :func:`~graphkeep.checkpoint.rekey.
rekey_thread` under the thread's lease: checkpoints and metadata, channel values, list
elements and manifests, pending writes, in place, verified by read-back; then, under the same
lease (each reseal fenced by its token), the thread's effect-ledger records
(:func:`~graphkeep.effects.sealing.rekey_effects`). Records in LangGraph's
``EncryptedSerializer`` form are decrypted with ``LANGGRAPH_AES_KEY``. What does not open
(plaintext, a key the ring lacks, a changed record) fails that thread closed, nothing of it
written; the others go on, and the exit code is 1. Re-running skips what is current, so a
run that was killed is simply run again. Without a terminal it needs ``--yes`` (``--dry-run``
does not). ``--store``: the long-term store's items at the same URL
(:func:`graphkeep.store.rekey.rekey_items`). ``--all`` also rewrites the node cache and the
run event logs at the URL and key prefix (:mod:`graphkeep.events.rekey`: every run, in place;
a run with an event that does not open is reported failed, nothing of it written, exit 1);
with ``--thread`` the runs of the event logs tied to those threads
(:mod:`graphkeep.events.threads`: their AG-UI runs and index, and the runs their checkpoints
name by run id), under the same rules; runs tied to no thread named are left alone. See
docs/cli.md and docs/security.md.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections import Counter
from typing import Any, TextIO

import graphkeep
from graphkeep.checkpoint.check import THREAD_PAGE, thread_page
from graphkeep.checkpoint.rekey import Legacy, Rekeyed, rekey_thread, sealed_port
from graphkeep.cli.arguments import Commands, add_thread_choice
from graphkeep.cli.console import EXIT_ERROR, EXIT_OK, UsageError, interactive, print_json
from graphkeep.cli.endpoints import Native, key_ring, open_endpoint, require_graphkeep
from graphkeep.effects.sealing import rekey_effects
from graphkeep.encryption import KEYS_ENV, KeyRing
from graphkeep.errors import (
    UNDECODABLE,
    CorruptData,
    LockNotAcquired,
)
from graphkeep.moving.decode import AES_KEY_ENV, Encrypted, decrypt
from graphkeep.port import codec
from graphkeep.port.codec import Typed
from graphkeep.store.rekey import rekey_items


def add_rekey_command(commands: Commands) -> None:
    p = commands.add(
        "rekey URL",
        cmd_rekey,
        f"rewrite every record under an older key (or in LangGraph's EncryptedSerializer form)"
        f" under the current key of {KEYS_ENV}: in place, under each thread's lease, resumable,"
        " verified by read-back",
        f"  {KEYS_ENV}=k2:NEW,k1:OLD graphkeep rekey redis://localhost:6379/0 --all --yes\n"
        "  graphkeep rekey mongodb://db/app --thread support-42 --dry-run --json\n"
        f"  {KEYS_ENV}=k2:NEW LANGGRAPH_AES_KEY=... graphkeep rekey dynamodb://app --all --yes\n"
        "\n"
        f"Rotation: put the new key first in {KEYS_ENV} (the old ones after it), deploy, run\n"
        "graphkeep rekey --all, check that graphkeep check --all --deep counts 0 records under\n"
        "the old key id, then drop it from the ring. Killed halfway, run it again: threads\n"
        "already current are skipped. A record that does not open (plaintext, an unknown key,\n"
        "a changed byte) fails its thread closed: nothing of it is written, exit code 1.\n"
        "--all also rewrites the node cache and every run of the event logs; --thread the\n"
        "runs of the event logs tied to its threads: their AG-UI runs (RUN_STARTED names the\n"
        "thread) and index, and runs named by a run_id of their checkpoints (stream_run's\n"
        "default). Other runs name no thread: only --all rewrites them.\n",
    )
    add_thread_choice(p, "every thread", repeatable=True)
    p.add_argument(
        "--store", action="store_true", help="the long-term store's items too (same URL)"
    )
    p.add_argument(
        "--dry-run", action="store_true", help="count what would be rewritten; write nothing"
    )
    p.add_argument("--yes", action="store_true", help="confirm without a prompt")
    p.add_argument(
        "--lease",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="each thread's lease while it is rewritten (default 60)",
    )


# -- the store ------------------------------------------------------------------------------


def rekey_store_items(
    url: str, key_prefix: str | None, dry_run: bool, ring: KeyRing
) -> dict[str, Any]:
    """``--store``: the long-term store's items at the same URL (and key prefix) under the
    current key (:func:`graphkeep.store.rekey.rekey_items`: in place, same namespace, key and
    timestamps, read back; items already current skipped). An item that does not open stops
    it with its :class:`~graphkeep.errors.CorruptData` (the ring here never reads plaintext)."""
    options: dict[str, Any] = {"setup": False, "encryption": ring}
    if key_prefix is not None:
        options["key_prefix"] = key_prefix
    with graphkeep.connect_store(url, **options) as store:
        return rekey_items(store, dry_run=dry_run).as_dict()


def rekey_event_logs(
    url: str,
    key_prefix: str | None,
    dry_run: bool,
    ring: KeyRing,
    threads: dict[str, list[str]] | None = None,
) -> dict[str, Any]:
    """``--all``: every run of the event log at the same URL (and key prefix) under the
    current key (:meth:`graphkeep.events.log.SyncEventLog.rekey`: in place, same run and
    event ids, read back; events already current skipped; a run that does not open is
    reported failed, nothing of it written); ``--thread``: the runs tied to ``threads``
    (thread id -> the run ids its checkpoints name; :mod:`graphkeep.events.threads`)."""
    options: dict[str, Any] = {"setup": False, "encryption": ring}
    if key_prefix is not None:
        options["key_prefix"] = key_prefix
    with graphkeep.connect_events(url, **options) as log:
        return log.rekey(dry_run=dry_run, threads=threads).as_dict()  # type: ignore[no-any-return]


def checkpoint_runs(opened: Native, thread_id: str) -> list[str]:
    """The run ids ``thread_id``'s checkpoints name (their metadata's ``run_id``, readable
    without a key), read from the saver's inventory."""
    inventory = opened.call(opened.saver.port.inventory(thread_id))
    return sorted({s.run_id for s in inventory.checkpoints if s.run_id})


# -- LangGraph's EncryptedSerializer ----------------------------------------------------------


def langgraph_cipher() -> Legacy | None:
    """The decryption of LangGraph's ``EncryptedSerializer`` payloads with
    ``LANGGRAPH_AES_KEY`` (None when it is not set)."""
    if not os.environ.get(AES_KEY_ENV):
        return None

    def legacy(value: Typed) -> Typed:
        plain = codec.unsqueeze(value)
        opened = decrypt(plain.tag, plain.data)
        if isinstance(opened, Encrypted):
            raise CorruptData(
                reason=f"its LangGraph encryption does not open with {AES_KEY_ENV}"
                + (f" ({opened.error})" if opened.error else ""),
                kind=UNDECODABLE,
                advice=f"Set {AES_KEY_ENV} to the key the application used; nothing of the"
                " thread was written",
            )
        return codec.squeeze(Typed(*opened))

    return legacy


# -- the command ---------------------------------------------------------------------------


def _confirm(args: argparse.Namespace, ring: KeyRing, err: TextIO) -> None:
    if args.yes or args.dry_run:
        return
    stdin = sys.stdin
    if not interactive(stdin):
        raise UsageError("rekey without a terminal needs --yes (nothing was rewritten)")
    which = "every thread's" if args.all else f"{len(args.thread)} thread(s)'"
    err.write(f"rewrite {which} records under key {ring.current!r}? [y/N] ")
    err.flush()
    if stdin.readline().strip().lower() not in ("y", "yes"):
        raise UsageError("nothing was rewritten")


def _threads(opened: Native, args: argparse.Namespace) -> Any:
    if not args.all:
        yield from dict.fromkeys(opened.saver.check_thread_id(t) for t in args.thread)
        return
    cursor: Any = None
    while True:
        listed, cursor, _ = opened.call(thread_page(opened.saver.port, cursor, None, THREAD_PAGE))
        yield from listed
        if cursor is None:
            return


def _effects_of(opened: Native, thread_id: str, dry_run: bool, legacy: Legacy | None) -> Any:
    """The thread's effect-ledger records resealed under its lease (``rekey_thread``'s
    ``held``: each reseal fenced by the lease's token), or None without a ledger."""
    ledger = opened.saver.effects
    if ledger is None:
        return None
    return lambda fence: rekey_effects(ledger, thread_id, dry_run, legacy, fence)


def _add(total: dict[str, Counter[str]], counts: dict[str, dict[str, int]]) -> None:
    for kind, by_key in counts.items():
        total.setdefault(kind, Counter()).update(by_key)


def _plain(total: dict[str, Counter[str]]) -> dict[str, dict[str, int]]:
    return {kind: dict(sorted(c.items())) for kind, c in sorted(total.items())}


def _by_key(total: dict[str, Counter[str]], ring: KeyRing) -> dict[str, int]:
    keys: Counter[str] = Counter({k: 0 for k in ring.key_ids})
    for by_key in total.values():
        keys.update(by_key)
    return dict(sorted(keys.items()))


def _runs_left(events: dict[str, Any]) -> str:
    """What ``--thread`` left of the event logs: runs tied to no thread named, and runs
    whose first event does not open (their thread cannot be told)."""
    if "threads" not in events:
        return ""
    said = f" of the thread(s); {events['other_runs']} other run(s) left alone"
    if events["unreadable"]:
        said += (
            f", {len(events['unreadable'])} whose first event does not open (their thread"
            " cannot be told: graphkeep check --deep, or rekey --all)"
        )
    return said


def cmd_rekey(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    require_graphkeep(args.url, "rekey")
    ring = key_ring()
    if ring is None:
        raise UsageError(
            f"graphkeep rekey needs {KEYS_ENV} (the new key first: k2:BASE64,k1:BASE64)"
        )
    if args.lease <= 0:
        raise UsageError("--lease takes a positive number of seconds")
    _confirm(args, ring, err)
    legacy = langgraph_cipher()
    before: dict[str, Counter[str]] = {}
    after: dict[str, Counter[str]] = {}
    done: list[str] = []
    current: list[str] = []
    failed: list[dict[str, Any]] = []
    effects = Counter[str]()
    rewritten = 0
    store: dict[str, Any] | None = None
    cached: dict[str, int] | None = None
    runs_of: dict[str, list[str]] = {}
    with open_endpoint(args.url, key_prefix=args.key_prefix) as opened:
        if not isinstance(opened, Native):  # pragma: no cover - require_graphkeep refuses them
            raise UsageError("graphkeep rekey rewrites graphkeep stores only")
        sealed_port(opened.saver)
        for thread_id in _threads(opened, args):
            if not args.all:
                runs_of[thread_id] = checkpoint_runs(opened, thread_id)
            try:
                result: Rekeyed = opened.call(
                    rekey_thread(
                        opened.saver,
                        thread_id,
                        legacy=legacy,
                        dry_run=args.dry_run,
                        lease=args.lease,
                        held=_effects_of(opened, thread_id, args.dry_run, legacy),
                    )
                )
                if result.held is not None:
                    effects.update(result.held)
            except (CorruptData, LockNotAcquired) as exc:
                kind = getattr(exc, "kind", "busy")
                failed.append({"thread_id": thread_id, "kind": kind, "error": str(exc)})
                if not args.json:
                    out.write(f"failed {thread_id}: {' '.join(str(exc).split())}\n")
                    out.flush()
                continue
            _add(before, result.before)
            _add(after, result.before if args.dry_run else result.after)
            rewritten += result.rewritten
            (done if result.rewritten else current).append(thread_id)
            if not args.json:
                verb = "would rewrite" if args.dry_run else "rekeyed"
                line = (
                    f"{verb} {thread_id}: {result.rewritten} record(s)"
                    if result.rewritten
                    else f"current {thread_id}"
                )
                out.write(line + "\n")
                out.flush()
    if args.store:
        try:
            store = rekey_store_items(args.url, args.key_prefix, args.dry_run, ring)
        except CorruptData as exc:
            store = {"failed": {"kind": exc.kind, "error": str(exc)}}
            failed.append({"store": True, "kind": exc.kind, "error": str(exc)})
            if not args.json:
                out.write(f"failed store: {' '.join(str(exc).split())}\n")
    if args.all:  # the node cache at the same URL and key prefix
        options = {"setup": False, "encryption": ring}
        if args.key_prefix is not None:
            options["key_prefix"] = args.key_prefix
        with graphkeep.connect_cache(args.url, **options) as cache:
            cached = cache.rekey(dry_run=args.dry_run, legacy=legacy)
    # every run of the event logs, or (--thread) the runs tied to those threads
    threads = None if args.all else runs_of
    events = rekey_event_logs(args.url, args.key_prefix, args.dry_run, ring, threads)
    for run in events["failed"]:
        failed.append({"run_id": run["run_id"], "kind": run["kind"], "error": run["error"]})
        if not args.json:
            out.write(f"failed run {run['run_id']}: {' '.join(run['error'].split())}\n")
    report = {
        "url": opened.label,
        "current_key": ring.current,
        "dry_run": args.dry_run,
        "rewritten": rewritten,
        "threads": {"rekeyed": done, "current": current, "failed": failed},
        "records": {
            "before": _plain(before),
            "after": _plain(after),
            "by_key_before": _by_key(before, ring),
            "by_key_after": _by_key(after, ring),
        },
        "effects": dict(sorted(effects.items())),
        "cache": cached,
        "events": events,
    }
    if store is not None:
        report["store"] = store
    if args.json:
        print_json(report, out)
    else:
        verb = "would rewrite" if args.dry_run else "rewrote"
        out.write(
            f"{verb} {rewritten} record(s) in {len(done)} thread(s) under key {ring.current!r};"
            f" {len(current)} thread(s) current, {len(failed)} failed;"
            f" {effects.get('rewritten', 0)} effect record(s)"
            + (f", {cached['rewritten']} cache entries" if cached else "")
            + f", {events['rewritten']} event(s) in {len(events['rekeyed'])}"
            f" of {events['runs']} run(s)"
            + _runs_left(events)
            + (
                f", {store['stale' if args.dry_run else 'rewritten']}"
                f" of {store['scanned']} store item(s)"
                if store and "scanned" in store
                else ""
            )
            + "\n"
        )
        keys = report["records"]["by_key_before" if args.dry_run else "by_key_after"]
        out.write("records by key: " + ", ".join(f"{k} {n}" for k, n in keys.items()) + "\n")
    return EXIT_ERROR if failed else EXIT_OK
