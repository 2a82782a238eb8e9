"""``graphkeep store copy``: items between any two stores, verified by reading them back.

Destinations are written through the public ``BaseStore`` API, so any pair can be copied:
graphkeep URLs, ``sqlite:///``, ``postgresql://``, the official stores of other packages
(``langgraph-redis://``, ``langgraph-mongodb://``, ``langgraph-dynamodb://``: see
:mod:`graphkeep.moving.rival_stores`, which reads those from what they stored, with each
item's remaining TTL, for this command and ``connect_store(url, fallback=…)`` alike) and
any store a ``--source-store`` / ``--dest-store`` callable yields.
A graphkeep destination keeps each item's ``created_at`` / ``updated_at`` (its store's
``put_stamped``); other destinations stamp their own. Re-runnable: items the destination
already holds with the same value are skipped (unless ``--overwrite``). An item the
destination refuses is reported and the others go on.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, TextIO

from langgraph.store.base import BaseStore, GetOp, Item, PutOp

from graphkeep.cli.arguments import import_object
from graphkeep.cli.console import (
    EXIT_ERROR,
    EXIT_OK,
    MASK,
    NotFound,
    Progress,
    UsageError,
    print_json,
)
from graphkeep.cli.endpoints import copy_key_prefixes, open_store, scheme_of
from graphkeep.cli.foreign import sqlite_has_store
from graphkeep.cli.store_values import (
    Namespace,
    format_namespace,
    index_options,
    iter_items,
    parse_namespace,
    store_label,
)
from graphkeep.moving.openers import SQLITE_SCHEMES, sqlite_path
from graphkeep.moving.rival_items import Entry, Pages, Record, Unreadable, plain
from graphkeep.moving.rival_stores import (
    StoreMissing,
    holds_store,
    native_get,
    native_pages,
    open_rival_source,
)
from graphkeep.moving.rival_stores import is_rival_store as is_rival
from graphkeep.store.filters import json_equal as same_value
from graphkeep.store.shells import SyncStore

EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


@dataclass
class CopyReport:
    """What one ``store copy`` did: items seen, written, already identical, verified."""

    source: str
    destination: str
    prefix: Namespace
    dry_run: bool
    items: int = 0
    copied: int = 0
    updated: int = 0
    unchanged: int = 0
    #: items the destination was read and found to hold identically
    verified: int = 0
    #: entries of the source that are no item (each one a problem; the others were copied)
    unreadable: int = 0
    #: items the destination refused (each one a problem; the others were written)
    refused: int = 0
    #: items written with a TTL (the source's remaining life, or --ttl)
    with_ttl: int = 0
    #: items written into a destination with an index (embedded there)
    embedded: int = 0
    #: items the source held an embedding of (the rivals say; other sources: 0)
    source_indexed: int = 0
    #: ``--all``: items graphkeep holds (or deleted) already, left as graphkeep has them
    kept: int = 0
    #: ``--all``: the copy marked finished (``store.fallback_done()``)
    finished: bool = False
    problems: list[str] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "destination": self.destination,
            "prefix": list(self.prefix),
            "dry_run": self.dry_run,
            "items": self.items,
            "copied": self.copied,
            "updated": self.updated,
            "unchanged": self.unchanged,
            "verified": self.verified,
            "unreadable": self.unreadable,
            "refused": self.refused,
            "with_ttl": self.with_ttl,
            "embedded": self.embedded,
            "source_indexed": self.source_indexed,
            "kept": self.kept,
            "finished": self.finished,
            "problems": self.problems,
            "ok": not self.problems,
        }


def cmd_store_copy(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    prefix = parse_namespace(args.prefix, root=True) if args.prefix else ()
    src_prefix, dst_prefix = _key_prefixes(args)
    if args.src_url.rstrip("/") == args.dst_url.rstrip("/") and src_prefix == dst_prefix:
        raise UsageError(
            "source and destination are the same store: use a different --dst-key-prefix"
        )
    if args.all and (args.prefix or args.overwrite or args.dest_store):
        raise UsageError(
            "--all copies every item into graphkeep: no --prefix, --overwrite, --dest-store"
        )
    if args.ttl is not None and args.ttl <= 0:
        raise UsageError(f"--ttl must be a positive number of minutes, got {args.ttl}")
    index = index_options(args)
    report = CopyReport(
        store_label(args.src_url, src_prefix),
        store_label(args.dst_url, dst_prefix),
        prefix,
        args.dry_run,
    )
    with (
        _source(args, src_prefix) as pages,
        _destination(args, dst_prefix, index) as dst,
        Progress("copy", stream=err, enabled=args.progress) as progress,
    ):
        if args.all and dst is not None and not isinstance(dst, SyncStore):
            raise UsageError("--all copies into a graphkeep store URL (the live switch's store)")
        for page in pages(prefix):
            _copy_page(dst, page, args, report, index is not None)
            progress.advance(len(page))
        if args.all and isinstance(dst, SyncStore) and not args.dry_run and not report.problems:
            dst.mark_fallback_done()
            report.finished = True
    if args.json:
        print_json(report.as_json(), out)
    else:
        _print_copy(report, out)
    return EXIT_ERROR if report.problems else EXIT_OK


def _key_prefixes(args: argparse.Namespace) -> tuple[str | None, str | None]:
    """Each side's key prefix; a rival's or a callable's store has none (the common
    ``--key-prefix`` applies to the graphkeep side only)."""
    src, dst = copy_key_prefixes(args)
    if args.source_store or is_rival(args.src_url):
        if args.src_key_prefix is not None:
            raise UsageError("--src-key-prefix applies to graphkeep URLs only")
        src = None
    if args.dest_store or is_rival(args.dst_url):
        if args.dst_key_prefix is not None:
            raise UsageError("--dst-key-prefix applies to graphkeep URLs only")
        dst = None
    return src, dst


@contextmanager
def _source(args: argparse.Namespace, key_prefix: str | None) -> Iterator[Pages]:
    """The source's items, page by page: a rival read from its storage, anything else
    through ``BaseStore.search`` (never refreshing a TTL)."""
    if args.source_store:
        with open_callable_store(args.source_store, "--source-store") as store:
            yield native_pages(store) or _searched(store)
        return
    if is_rival(args.src_url):
        MASK.remember(args.src_url)
        with ExitStack() as stack:
            try:
                source = stack.enter_context(open_rival_source(args.src_url))
            except StoreMissing as exc:  # the command's "not found" (exit 4)
                raise NotFound(str(exc)) from None
            yield source.pages
        return
    with open_store(args.src_url, key_prefix=key_prefix) as store:
        yield _searched(store)


def _searched(store: BaseStore) -> Pages:
    def pages(prefix: Namespace) -> Iterator[list[Entry]]:
        for page in iter_items(store, prefix):
            yield [Record(item) for item in page]

    return pages


@contextmanager
def open_callable_store(spec: str, option: str) -> Iterator[BaseStore]:
    """The store ``MODULE:CALLABLE`` yields (a callable returning a context manager)."""
    factory = import_object(spec, option, "myapp.stores:open_store")
    if not callable(factory):
        raise UsageError(f"{option} {spec}: not a callable")
    with factory() as store:
        if not isinstance(store, BaseStore):
            raise UsageError(f"{option} {spec}: yielded {type(store).__name__}, not a BaseStore")
        yield store


@contextmanager
def _destination(
    args: argparse.Namespace, key_prefix: str | None, index: dict[str, Any] | None
) -> Iterator[BaseStore | None]:
    """The destination store (schema created), or None for a dry run into a SQLite file or
    a rival that holds no store yet."""
    if args.dest_store:
        with open_callable_store(args.dest_store, "--dest-store") as store:
            yield store
        return
    if args.dry_run and is_rival(args.dst_url) and not holds_store(args.dst_url):
        yield None  # nothing there yet: every item would be copied
        return
    if args.dry_run and scheme_of(args.dst_url) in SQLITE_SCHEMES:
        path = sqlite_path(args.dst_url)
        if not os.path.exists(path) or not sqlite_has_store(path):
            yield None  # nothing there yet: every item would be copied
            return
    with open_store(
        args.dst_url, key_prefix=key_prefix, setup=not args.dry_run, index=index
    ) as dst:
        yield dst


def _same(found: Any, value: Any) -> bool:
    return isinstance(found, Item) and same_value(plain(found.value), plain(value))


def _copy_page(
    dst: BaseStore | None,
    entries: list[Entry],
    args: argparse.Namespace,
    report: CopyReport,
    indexed: bool,
) -> None:
    """Write what ``dst`` lacks or holds differently, then read it back and compare; an
    entry of the source that is no item is reported (and the others copied)."""
    page = [e for e in entries if isinstance(e, Record)]
    for bad in entries:
        if isinstance(bad, Unreadable):
            report.unreadable += 1
            report.problems.append(f"{bad.where}: unreadable in the source ({bad.reason})")
    keys = [(tuple(r.item.namespace), r.item.key) for r in page]
    present: list[Any] = [None] * len(keys)
    if dst is not None:
        present = _get(dst, keys)
    report.items += len(page)
    report.source_indexed += sum(r.indexed for r in page)
    writes: list[Record] = []
    for record, found in zip(page, present, strict=True):
        if args.all and isinstance(found, Item) and not _same(found, record.item.value):
            report.kept += 1  # graphkeep's own item: never overwritten by the switch's copy
            continue
        if _same(found, record.item.value) and not args.overwrite:
            report.unchanged += 1
            report.verified += 1
            continue
        writes.append(record)
        if not isinstance(found, Item):
            report.copied += 1
        else:
            report.updated += 1
    if dst is None or args.dry_run or not writes:
        return
    written = _put(dst, writes, args, report)
    back = _get(dst, [_key(r) for r in written])
    for record, found in zip(written, back, strict=True):
        where = _where(record)
        if args.all and not _same(found, record.item.value):
            report.kept += 1  # put or deleted by the app meanwhile: graphkeep's state stands
            report.copied -= 1
        elif not isinstance(found, Item):
            report.problems.append(f"{where}: missing on the destination after the copy")
        elif not _same(found, record.item.value):
            report.problems.append(f"{where}: the destination holds a different value")
        else:
            report.verified += 1
            report.with_ttl += _ttl(record, args) is not None
            report.embedded += indexed


def _get(store: BaseStore, keys: list[tuple[Namespace, str]]) -> list[Any]:
    """The items at ``keys`` (None where missing), read by the route that is right for
    ``store`` (:func:`~graphkeep.moving.rival_stores.native_get`), never refreshing a TTL."""
    read = native_get(store)
    if read is not None:
        return read(keys)
    return store.batch([GetOp(ns, key, refresh_ttl=False) for ns, key in keys])


def _us(moment: datetime) -> int:
    """``moment`` in epoch microseconds (a naive time is UTC)."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return (moment - EPOCH) // timedelta(microseconds=1)


def _key(record: Record) -> tuple[Namespace, str]:
    return tuple(record.item.namespace), record.item.key


def _where(record: Record) -> str:
    return f"{format_namespace(record.item.namespace)} {record.item.key}"


def _ttl(record: Record, args: argparse.Namespace) -> float | None:
    return float(args.ttl) if args.ttl is not None else record.ttl


def _put(
    dst: BaseStore, writes: list[Record], args: argparse.Namespace, report: CopyReport
) -> list[Record]:
    """Put ``writes`` in one batch; when the destination refuses it, one by one, each item it
    refuses reported (the others are written). Returns the records written."""

    def put(records: list[Record]) -> None:
        ops = [PutOp(*_key(r), plain(r.item.value), ttl=_ttl(r, args)) for r in records]
        if isinstance(dst, SyncStore):  # graphkeep's store takes the source's times
            times = [(_us(r.item.created_at), _us(r.item.updated_at)) for r in records]
            stamped = [(o, *t) for o, t in zip(ops, times, strict=True)]
            if args.all:  # only where graphkeep holds no item and no tombstone
                dst.put_adopted(stamped)
            else:
                dst.put_stamped(stamped)
        else:
            dst.batch(ops)

    try:
        put(writes)
        return writes
    except ConnectionError:
        raise
    except Exception:  # noqa: S110 - some item was refused: found below, put by put
        pass
    written: list[Record] = []
    for record in writes:
        try:
            put([record])
        except ConnectionError:
            raise
        except Exception as exc:
            reason = f"{type(exc).__name__}: {exc}"
            report.refused += 1
            report.problems.append(f"{_where(record)}: the destination refused it ({reason[:300]})")
        else:
            written.append(record)
    return written


def _print_copy(report: CopyReport, out: TextIO) -> None:
    where = f"{report.source} -> {report.destination}"
    under = "" if not report.prefix else f" under {format_namespace(report.prefix)}"
    if report.dry_run:
        out.write(
            f"dry run, {where}{under}: {report.items} item(s); would copy {report.copied},"
            f" update {report.updated}; {report.unchanged} already identical\n"
        )
        return
    out.write(
        f"{where}{under}: {report.items} item(s); {report.copied} copied,"
        f" {report.updated} updated, {report.unchanged} already identical;"
        f" {report.verified} verified"
    )
    extras = [(report.unreadable, "unreadable in the source"), (report.refused, "refused"),
              (report.kept, "kept as graphkeep holds them"),
              (report.with_ttl, "with a TTL"), (report.embedded, "embedded")]  # fmt: skip
    out.write("".join(f"; {n} {what}" for n, what in extras if n) + "\n")
    if report.source_indexed and not report.embedded and report.copied + report.updated:
        out.write(
            f"  note: {report.source_indexed} item(s) had embeddings in the source; pass"
            " --embed/--dims/--field (and --overwrite) to index them in the destination\n"
        )
    if report.finished:
        out.write("  the fallback copy is finished: store.fallback_done() is True\n")
    for problem in report.problems[:20]:
        out.write(f"  ! {problem}\n")
    if len(report.problems) > 20:
        out.write(f"  ! ... and {len(report.problems) - 20} more\n")
    if report.problems:
        out.write(
            f"VERIFY FAILED: {len(report.problems)} item(s) not copied or differ; re-run the copy\n"
        )
