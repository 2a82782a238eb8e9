"""``graphkeep store copy``: items between any two stores, verified by reading them back.

Every store is used through the public ``BaseStore`` API only, so any pair can be copied:
graphkeep URLs, ``sqlite:///`` and ``postgresql://``. Re-runnable: items the destination
already holds with the same value are skipped (unless ``--overwrite``).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TextIO

from langgraph.store.base import BaseStore, GetOp, Item, PutOp

from graphkeep.cli.console import EXIT_ERROR, EXIT_OK, Progress, UsageError, print_json
from graphkeep.cli.endpoints import copy_key_prefixes, open_store, scheme_of
from graphkeep.cli.foreign import SQLITE_SCHEMES, sqlite_has_store, sqlite_path
from graphkeep.cli.store_values import (
    Namespace,
    format_namespace,
    index_options,
    iter_items,
    parse_namespace,
    store_label,
)
from graphkeep.store.filters import json_equal as same_value


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
            "problems": self.problems,
            "ok": not self.problems,
        }


def cmd_store_copy(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    prefix = parse_namespace(args.prefix, root=True) if args.prefix else ()
    src_prefix, dst_prefix = copy_key_prefixes(args)
    if args.src_url.rstrip("/") == args.dst_url.rstrip("/") and src_prefix == dst_prefix:
        raise UsageError(
            "source and destination are the same store: use a different --dst-key-prefix"
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
        open_store(args.src_url, key_prefix=src_prefix) as src,
        _destination(args, dst_prefix, index) as dst,
        Progress("copy", stream=err, enabled=args.progress) as progress,
    ):
        for page in iter_items(src, prefix):
            _copy_page(dst, page, args, report)
            progress.advance(len(page))
    if args.json:
        print_json(report.as_json(), out)
    else:
        _print_copy(report, out)
    return EXIT_ERROR if report.problems else EXIT_OK


@contextmanager
def _destination(
    args: argparse.Namespace, key_prefix: str | None, index: dict[str, Any] | None
) -> Iterator[BaseStore | None]:
    """The destination store (schema created), or None for a dry run into an empty SQLite."""
    if args.dry_run and scheme_of(args.dst_url) in SQLITE_SCHEMES:
        path = sqlite_path(args.dst_url)
        if not os.path.exists(path) or not sqlite_has_store(path):
            yield None  # nothing there yet: every item would be copied
            return
    with open_store(
        args.dst_url, key_prefix=key_prefix, setup=not args.dry_run, index=index
    ) as dst:
        yield dst


def _copy_page(
    dst: BaseStore | None, page: list[Item], args: argparse.Namespace, report: CopyReport
) -> None:
    """Write what ``dst`` lacks or holds differently, then read it back and compare."""
    keys = [(tuple(i.namespace), i.key) for i in page]
    present: list[Any] = [None] * len(keys)
    if dst is not None:
        present = dst.batch([GetOp(ns, key, refresh_ttl=False) for ns, key in keys])
    report.items += len(page)
    writes: list[Item] = []
    for item, found in zip(page, present, strict=True):
        if isinstance(found, Item) and same_value(found.value, item.value) and not args.overwrite:
            report.unchanged += 1
            report.verified += 1
            continue
        writes.append(item)
        if not isinstance(found, Item):
            report.copied += 1
        else:
            report.updated += 1
    if dst is None or args.dry_run or not writes:
        return
    dst.batch([PutOp(tuple(i.namespace), i.key, i.value, ttl=args.ttl) for i in writes])
    back = dst.batch([GetOp(tuple(i.namespace), i.key, refresh_ttl=False) for i in writes])
    for item, found in zip(writes, back, strict=True):
        where = f"{format_namespace(item.namespace)} {item.key}"
        if not isinstance(found, Item):
            report.problems.append(f"{where}: missing on the destination after the copy")
        elif not same_value(found.value, item.value):
            report.problems.append(f"{where}: the destination holds a different value")
        else:
            report.verified += 1


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
        f" {report.verified} verified\n"
    )
    for problem in report.problems[:20]:
        out.write(f"  ! {problem}\n")
    if len(report.problems) > 20:
        out.write(f"  ! ... and {len(report.problems) - 20} more\n")
    if report.problems:
        out.write(f"VERIFY FAILED: {len(report.problems)} item(s) differ; re-run the copy\n")
