"""``graphkeep store ...``: LangGraph long-term memory stores (``BaseStore``) from the shell.

``namespaces``, ``get``, ``search``, ``delete`` and ``copy`` work on every store the
command can open: graphkeep URLs through :func:`graphkeep.connect_store`, and
LangGraph's own ``SqliteStore`` (``sqlite:///file.db``) and ``PostgresStore``
(``postgresql://...``, when langgraph-checkpoint-postgres is installed). Every store is
used through the public ``BaseStore`` API only, so any pair can be copied.

A namespace is written with its labels joined by ``/`` (``users/alice/memories``), or
as a JSON array of labels (``'["team/a", "notes"]'``) when a label holds a ``/`` or the
text starts with ``[``. ``/`` alone (or ``[]``) is the root: every namespace.

Reads never refresh TTLs and never create a schema; ``copy`` creates the destination's.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TextIO, cast
from urllib.parse import quote

from langgraph.store.base import BaseStore, GetOp, InvalidNamespaceError, Item, PutOp

import graphkeep
from graphkeep.cli.console import (
    EXIT_ERROR,
    EXIT_OK,
    MASK,
    NotFound,
    Progress,
    UsageError,
    print_json,
    safe_url,
    table,
)
from graphkeep.cli.endpoints import POSTGRES_SCHEMES, SQLITE_SCHEMES, scheme_of, sqlite_path
from graphkeep.errors import ConfigurationError, InvalidInput, StorageUnavailable
from graphkeep.store.filters import compile_filter
from graphkeep.store.filters import json_equal as same_value
from graphkeep.store.validation import DEFAULT_MAX_KEY_BYTES, check_namespace

Namespace = tuple[str, ...]
#: items read, compared and written per store round trip
PAGE_SIZE = 200
#: how much of a value a table row shows
VALUE_WIDTH = 60

NAMESPACE_HELP = 'labels joined by "/" (users/alice), or a JSON array of labels (\'["a/b","c"]\')'


# -- namespaces on the command line ---------------------------------------------------------


def parse_namespace(text: str, *, root: bool = False, wildcards: bool = False) -> Namespace:
    """``users/alice`` or ``'["users", "alice"]'`` -> ``("users", "alice")``.

    ``root`` accepts ``/``, ``""`` and ``[]`` as the empty namespace (a prefix that holds
    everything); ``wildcards`` lets a label be ``*`` (namespace match conditions).
    """
    stripped = text.strip()
    labels: Any
    if stripped.startswith("["):
        try:
            labels = json.loads(stripped)
        except json.JSONDecodeError as exc:
            raise UsageError(f"namespace {text!r} is not a JSON array of labels: {exc}") from exc
        if not isinstance(labels, list) or not all(isinstance(x, str) for x in labels):
            raise UsageError(f"namespace {text!r} must be a JSON array of strings")
    elif stripped in ("", "/"):
        labels = []
    else:
        labels = stripped.strip("/").split("/")
    namespace = tuple(labels)
    if not namespace and not root:
        raise UsageError(f"empty namespace {text!r}: give at least one label")
    try:
        checked = [label for label in namespace if not (wildcards and label == "*")]
        check_namespace(tuple(checked), for_write=False, max_bytes=DEFAULT_MAX_KEY_BYTES)
    except InvalidNamespaceError as exc:
        raise UsageError(f"bad namespace {text!r}: {exc}") from exc
    return namespace


def format_namespace(namespace: Sequence[str]) -> str:
    """The command-line form of a namespace; reading it back with parse_namespace is exact."""
    labels = list(namespace)
    if not labels:
        return "/"
    if any("/" in label for label in labels) or labels[0].startswith("["):
        return json.dumps(labels, ensure_ascii=False)
    return "/".join(labels)


def _filter(text: str | None) -> dict[str, Any] | None:
    if text is None:
        return None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"--filter is not JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise UsageError(f'--filter must be a JSON object, e.g. \'{{"kind": "note"}}\', got {text}')
    try:
        compile_filter(value)  # the same rules on every store, checked before any request
    except InvalidInput as exc:
        raise UsageError(f"--filter: {exc}") from exc
    return value


# -- opening a store ------------------------------------------------------------------------


@contextmanager
def open_store(
    url: str,
    *,
    key_prefix: str | None = None,
    setup: bool = False,
    index: dict[str, Any] | None = None,
) -> Iterator[BaseStore]:
    """A sync ``BaseStore`` for ``url``; ``setup`` creates the schema (destinations only)."""
    MASK.remember(url)
    scheme = scheme_of(url)
    if not scheme:
        raise UsageError(
            "expected a URL such as redis://host:6379/0 or sqlite:///file.db,"
            f" got {safe_url(url)!r}"
        )
    if scheme in SQLITE_SCHEMES or scheme in POSTGRES_SCHEMES:
        if key_prefix is not None:
            raise UsageError(f"--key-prefix applies to graphkeep URLs, not to {scheme}://")
        opener = _open_sqlite if scheme in SQLITE_SCHEMES else _open_postgres
        with opener(url, setup=setup, index=index) as store:
            yield store
        return
    options: dict[str, Any] = {"setup": setup}
    if key_prefix is not None:
        options["key_prefix"] = key_prefix
    if index is not None:
        options["index"] = index
    try:
        manager = graphkeep.connect_store(url, **options)
        store = manager.__enter__()
    except ConfigurationError as exc:
        message = str(exc)
        if "unsupported URL scheme" in message:
            message += ", sqlite:///path or postgresql://... (LangGraph's own stores)"
        raise UsageError(message) from exc
    try:
        yield store
    except BaseException as exc:
        if not manager.__exit__(type(exc), exc, exc.__traceback__):
            raise
    else:
        manager.__exit__(None, None, None)


@contextmanager
def _open_sqlite(url: str, *, setup: bool, index: dict[str, Any] | None) -> Iterator[BaseStore]:
    path = sqlite_path(url)
    try:
        from langgraph.store.sqlite import SqliteStore
    except ImportError as exc:
        raise UsageError(
            "sqlite:// URLs need LangGraph's SQLite store: pip install langgraph-checkpoint-sqlite"
        ) from exc
    if not setup and not os.path.exists(path):
        raise NotFound(f"no SQLite database at {path}")
    with SqliteStore.from_conn_string(path, index=cast(Any, index)) as store:
        if setup:
            store.setup()
        elif not _has_table(store.conn, "store"):
            raise NotFound(f"no LangGraph store in {path} (its 'store' table is missing)")
        yield store


def _has_table(conn: sqlite3.Connection, name: str) -> bool:
    found = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)
    ).fetchone()
    return found is not None


@contextmanager
def _open_postgres(url: str, *, setup: bool, index: dict[str, Any] | None) -> Iterator[BaseStore]:
    try:
        from langgraph.store.postgres import PostgresStore
    except ImportError as exc:
        raise UsageError(
            "postgresql:// URLs need LangGraph's Postgres store:"
            " pip install langgraph-checkpoint-postgres 'psycopg[binary]'"
        ) from exc
    conn_string = "postgresql://" + url.split("://", 1)[1]
    try:
        manager = PostgresStore.from_conn_string(conn_string, index=cast(Any, index))
        store = manager.__enter__()
    except Exception as exc:
        raise StorageUnavailable(
            f"PostgreSQL at {safe_url(url)} is unavailable ({type(exc).__name__}: {exc})"
        ) from exc
    try:
        if setup:
            store.setup()
        yield store
    finally:
        manager.__exit__(None, None, None)


def index_options(args: argparse.Namespace) -> dict[str, Any] | None:
    """``--embed``/``--dims``/``--field`` as an IndexConfig, or None."""
    if args.embed is None:
        if args.dims is not None or args.field:
            raise UsageError("--dims and --field need --embed")
        return None
    if args.dims is None:
        raise UsageError("--embed needs --dims (the model's vector size)")
    index: dict[str, Any] = {"dims": args.dims, "embed": _embedder(args.embed)}
    if args.field:
        index["fields"] = list(args.field)
    return index


def _embedder(spec: str) -> Any:
    """``package.module:function`` -> that callable; anything else (``openai:model``) is
    handed to LangGraph, which resolves ``provider:model`` with ``init_embeddings``."""
    import importlib

    module_name, _, attribute = spec.partition(":")
    if attribute:
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            return spec
        found = getattr(module, attribute, None)
        if callable(found) and not isinstance(found, type):
            return found
    return spec


# -- reading --------------------------------------------------------------------------------


def iter_items(
    store: BaseStore,
    prefix: Namespace,
    *,
    filter: dict[str, Any] | None = None,
    page_size: int = PAGE_SIZE,
) -> Iterator[list[Item]]:
    """Every live item under ``prefix``, a page at a time (each item once)."""
    seen: set[tuple[Namespace, str]] = set()
    offset = 0
    while True:
        page = store.search(
            prefix, filter=filter, limit=page_size, offset=offset, refresh_ttl=False
        )
        fresh: list[Item] = [i for i in page if (tuple(i.namespace), i.key) not in seen]
        seen.update((tuple(i.namespace), i.key) for i in fresh)
        if fresh:
            yield fresh
        if len(page) < page_size:
            return
        offset += len(page)


def item_json(item: Item) -> dict[str, Any]:
    data: dict[str, Any] = {
        "namespace": list(item.namespace),
        "key": item.key,
        "value": item.value,
        "created_at": item.created_at.isoformat(),
        "updated_at": item.updated_at.isoformat(),
    }
    score = getattr(item, "score", None)
    if score is not None:
        data["score"] = score
    return data


def _short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return text if len(text) <= VALUE_WIDTH else text[: VALUE_WIDTH - 3] + "..."


def _store_label(url: str, key_prefix: str | None) -> str:
    # SQLite URLs carry no secret; printed as given (safe_url would re-assemble them)
    shown = url if scheme_of(url) in SQLITE_SCHEMES else safe_url(url)
    return shown + (f" (key prefix {key_prefix})" if key_prefix else "")


# -- commands -------------------------------------------------------------------------------


def cmd_namespaces(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    prefix = parse_namespace(args.prefix, root=True, wildcards=True) if args.prefix else None
    suffix = parse_namespace(args.suffix, wildcards=True) if args.suffix else None
    found: list[Namespace] = []
    with open_store(args.url, key_prefix=args.key_prefix) as store:
        while args.limit is None or len(found) < args.limit:
            want = PAGE_SIZE if args.limit is None else min(PAGE_SIZE, args.limit - len(found))
            page = store.list_namespaces(
                prefix=prefix or None,
                suffix=suffix,
                max_depth=args.max_depth,
                limit=want,
                offset=len(found),
            )
            found += [tuple(ns) for ns in page]
            if len(page) < want:
                break
    if args.json:
        print_json([list(ns) for ns in found], out)
    elif not found:
        out.write(f"no namespaces at {_store_label(args.url, args.key_prefix)}\n")
    else:
        for ns in found:
            out.write(format_namespace(ns) + "\n")
    return EXIT_OK


def cmd_get(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    namespace = parse_namespace(args.namespace)
    with open_store(args.url, key_prefix=args.key_prefix) as store:
        item = store.get(namespace, args.key, refresh_ttl=False)
    if item is None:
        raise NotFound(
            f"no item {args.key!r} in namespace {format_namespace(namespace)}"
            f" at {_store_label(args.url, args.key_prefix)}"
        )
    if args.json:
        print_json(item_json(item), out)
        return EXIT_OK
    out.write(f"namespace   {format_namespace(item.namespace)}\n")
    out.write(f"key         {item.key}\n")
    out.write(f"created_at  {item.created_at.isoformat()}\n")
    out.write(f"updated_at  {item.updated_at.isoformat()}\n")
    out.write(json.dumps(item.value, ensure_ascii=False, indent=2) + "\n")
    return EXIT_OK


def cmd_search(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    prefix = parse_namespace(args.namespace_prefix, root=True)
    filter = _filter(args.filter)
    index = index_options(args)
    if args.query is not None and index is None:
        raise UsageError(
            "--query needs the store's embedding model: --embed PROVIDER:MODEL --dims N"
            " (or --embed package.module:function)"
        )
    with open_store(args.url, key_prefix=args.key_prefix, index=index) as store:
        items = store.search(
            prefix,
            query=args.query,
            filter=filter,
            limit=args.limit,
            offset=args.offset,
            refresh_ttl=False,
        )
    if args.json:
        print_json([item_json(i) for i in items], out)
        return EXIT_OK
    if not items:
        out.write(
            f"no items under {format_namespace(prefix)}"
            f" at {_store_label(args.url, args.key_prefix)}\n"
        )
        return EXIT_OK
    scored = args.query is not None
    headers = ["NAMESPACE", "KEY", "UPDATED_AT", *(["SCORE"] if scored else []), "VALUE"]
    rows = [
        [
            format_namespace(i.namespace),
            i.key,
            i.updated_at.isoformat(timespec="seconds"),
            *([None if i.score is None else f"{i.score:.4f}"] if scored else []),
            _short(i.value),
        ]
        for i in items
    ]
    table(headers, rows, out)
    return EXIT_OK


def cmd_delete(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    if args.prefix is not None:
        if args.namespace is not None:
            raise UsageError("give either NAMESPACE KEY or --prefix NS, not both")
        return _delete_prefix(args, out, err)
    if args.namespace is None or args.key is None:
        raise UsageError("give NAMESPACE KEY (one item) or --prefix NS --yes (everything under NS)")
    namespace = parse_namespace(args.namespace)
    label = _store_label(args.url, args.key_prefix)
    with open_store(args.url, key_prefix=args.key_prefix) as store:
        if store.get(namespace, args.key, refresh_ttl=False) is None:
            raise NotFound(
                f"no item {args.key!r} in namespace {format_namespace(namespace)} at {label}"
            )
        if not args.dry_run:
            store.delete(namespace, args.key)
    if args.json:
        print_json(
            {
                "namespace": list(namespace),
                "key": args.key,
                "deleted": 0 if args.dry_run else 1,
                "dry_run": args.dry_run,
            },
            out,
        )
    else:
        verb = "would delete" if args.dry_run else "deleted"
        out.write(f"{verb} {format_namespace(namespace)} {args.key}\n")
    return EXIT_OK


def _delete_prefix(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    prefix = parse_namespace(args.prefix)
    if args.key is not None:
        raise UsageError("--prefix deletes whole namespaces: drop the KEY")
    label = _store_label(args.url, args.key_prefix)
    with open_store(args.url, key_prefix=args.key_prefix) as store:
        keys = [(tuple(i.namespace), i.key) for page in iter_items(store, prefix) for i in page]
        if not args.dry_run and not args.yes:
            raise UsageError(
                f"this deletes {len(keys)} item(s) under {format_namespace(prefix)} at {label};"
                " add --yes to confirm (or --dry-run to list them)"
            )
        if not args.dry_run:
            with Progress("delete", len(keys), stream=err, enabled=args.progress) as progress:
                for start in range(0, len(keys), PAGE_SIZE):
                    chunk = keys[start : start + PAGE_SIZE]
                    store.batch([PutOp(ns, key, None) for ns, key in chunk])
                    progress.advance(len(chunk))
    if args.json:
        print_json(
            {
                "prefix": list(prefix),
                "deleted": 0 if args.dry_run else len(keys),
                "items": [{"namespace": list(ns), "key": key} for ns, key in keys],
                "dry_run": args.dry_run,
            },
            out,
        )
        return EXIT_OK
    if args.dry_run:
        for ns, key in keys:
            out.write(f"{format_namespace(ns)} {key}\n")
    verb = "would delete" if args.dry_run else "deleted"
    out.write(f"{verb} {len(keys)} item(s) under {format_namespace(prefix)} at {label}\n")
    return EXIT_OK


# -- copy -----------------------------------------------------------------------------------


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


def _prefixes(args: argparse.Namespace) -> tuple[str | None, str | None]:
    def side(own: str | None, url: str) -> str | None:
        if own is not None:
            return own
        foreign = scheme_of(url) in SQLITE_SCHEMES or scheme_of(url) in POSTGRES_SCHEMES
        return None if foreign else args.key_prefix  # --key-prefix means the graphkeep side

    return side(args.src_key_prefix, args.src), side(args.dst_key_prefix, args.dst)


def cmd_copy(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    prefix = parse_namespace(args.prefix, root=True) if args.prefix else ()
    src_prefix, dst_prefix = _prefixes(args)
    if args.src.rstrip("/") == args.dst.rstrip("/") and src_prefix == dst_prefix:
        raise UsageError(
            "source and destination are the same store: use a different --dst-key-prefix"
        )
    if args.ttl is not None and args.ttl <= 0:
        raise UsageError(f"--ttl must be a positive number of minutes, got {args.ttl}")
    index = index_options(args)
    report = CopyReport(
        _store_label(args.src, src_prefix),
        _store_label(args.dst, dst_prefix),
        prefix,
        args.dry_run,
    )
    with (
        open_store(args.src, key_prefix=src_prefix) as src,
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
    if args.dry_run and scheme_of(args.dst) in SQLITE_SCHEMES:
        path = sqlite_path(args.dst)
        if not os.path.exists(path) or not _sqlite_has_store(path):
            yield None  # nothing there yet: every item would be copied
            return
    with open_store(args.dst, key_prefix=key_prefix, setup=not args.dry_run, index=index) as dst:
        yield dst


def _sqlite_has_store(path: str) -> bool:
    conn = sqlite3.connect(f"file:{quote(path)}?mode=ro", uri=True)
    try:
        return _has_table(conn, "store")
    finally:
        conn.close()


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


# -- argparse wiring ------------------------------------------------------------------------

AddCommand = Callable[..., argparse.ArgumentParser]

GROUP_HELP = "long-term memory stores (BaseStore): namespaces, get, search, delete, copy"
GROUP_EPILOG = """\
A NAMESPACE is written with its labels joined by "/" (users/alice/memories), or as a
JSON array of labels ('["team/a", "notes"]') when a label holds a "/"; "/" alone is the
root (every namespace). Reads never refresh TTLs.

commands:
  namespaces  list namespaces        get     one item        search  items under a prefix
  delete      one item or a prefix   copy    items between any two stores

examples:
  graphkeep store namespaces redis://localhost:6379/0 --prefix users
  graphkeep store get redis://localhost:6379/0 users/alice prefs
  graphkeep store copy sqlite:///store.db redis://localhost:6379/0
"""


def _positive(text: str) -> int:
    from graphkeep.cli.app import _positive as positive

    return positive(text)


def _offset(text: str) -> int:
    try:
        value = int(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from exc
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


def _minutes(text: str) -> float:
    try:
        return float(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not a number of minutes: {text!r}") from exc


def _index_flags(parser: argparse.ArgumentParser, whose: str) -> None:
    group = parser.add_argument_group(f"embeddings ({whose})")
    group.add_argument(
        "--embed",
        metavar="MODEL",
        help="provider:model for LangGraph's init_embeddings, or package.module:function",
    )
    group.add_argument("--dims", type=_positive, metavar="N", help="the model's vector size")
    group.add_argument(
        "--field", action="append", metavar="PATH", help="value path to embed (repeatable)"
    )


def add_store_commands(sub: Any, common: argparse.ArgumentParser, add: AddCommand) -> None:
    """Register ``graphkeep store <command>`` under the top-level subparsers ``sub``."""
    group = sub.add_parser(
        "store",
        help=GROUP_HELP,
        description=GROUP_HELP,
        epilog=GROUP_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = group.add_subparsers(dest="store_command", metavar="COMMAND", required=True)

    p = add(
        commands,
        "namespaces",
        cmd_namespaces,
        "list the namespaces that hold items, sorted; --prefix/--suffix may use * for any label",
        "  graphkeep store namespaces redis://localhost:6379/0\n"
        "  graphkeep store namespaces redis://localhost:6379/0 --prefix users --max-depth 2\n"
        "  graphkeep store namespaces sqlite:///store.db --suffix memories --json\n"
        "  graphkeep store namespaces mongodb://db/app --prefix '[\"team/a\"]' --limit 20\n",
        common,
    )
    p.add_argument("url", metavar="URL")
    p.add_argument("--prefix", metavar="NS", help=f"namespaces starting with NS ({NAMESPACE_HELP})")
    p.add_argument("--suffix", metavar="NS", help="namespaces ending with NS")
    p.add_argument("--max-depth", type=_positive, metavar="N", help="truncate to N labels")
    p.add_argument("--limit", type=_positive, metavar="N", help="at most N namespaces")

    p = add(
        commands,
        "get",
        cmd_get,
        "one item: its value and times; exit code 4 when it does not exist",
        "  graphkeep store get redis://localhost:6379/0 users/alice prefs\n"
        '  graphkeep store get sqlite:///store.db \'["team/a","notes"]\' n1 --json\n',
        common,
    )
    p.add_argument("url", metavar="URL")
    p.add_argument("namespace", metavar="NAMESPACE", help=NAMESPACE_HELP)
    p.add_argument("key", metavar="KEY")

    p = add(
        commands,
        "search",
        cmd_search,
        "items under a namespace prefix, newest first, or by similarity with --query",
        "  graphkeep store search redis://localhost:6379/0 users/alice\n"
        '  graphkeep store search redis://localhost:6379/0 / --filter \'{"kind": "note"}\'\n'
        '  graphkeep store search mongodb://db/app users --filter \'{"score": {"$gte": 3}}\' \\\n'
        "      --limit 50 --offset 50 --json\n"
        "  graphkeep store search redis://localhost:6379/0 users --query 'favourite food' \\\n"
        "      --embed openai:text-embedding-3-small --dims 1536\n",
        common,
    )
    p.add_argument("url", metavar="URL")
    p.add_argument(
        "namespace_prefix", metavar="NAMESPACE_PREFIX", help=f"{NAMESPACE_HELP}; / = all"
    )
    p.add_argument("--filter", metavar="JSON", help='e.g. \'{"kind": "note", "n": {"$gt": 2}}\'')
    p.add_argument("--query", metavar="TEXT", help="semantic search (needs --embed and --dims)")
    p.add_argument("--limit", type=_positive, default=10, metavar="N", help="default 10")
    p.add_argument("--offset", type=_offset, default=0, metavar="N", help="skip N items")
    _index_flags(p, "the store's model, for --query")

    p = add(
        commands,
        "delete",
        cmd_delete,
        "delete one item, or every item under a namespace prefix (--prefix NS --yes)",
        "  graphkeep store delete redis://localhost:6379/0 users/alice prefs\n"
        "  graphkeep store delete redis://localhost:6379/0 --prefix users/alice --dry-run\n"
        "  graphkeep store delete redis://localhost:6379/0 --prefix users/alice --yes\n",
        common,
    )
    p.add_argument("url", metavar="URL")
    p.add_argument("namespace", metavar="NAMESPACE", nargs="?", help=NAMESPACE_HELP)
    p.add_argument("key", metavar="KEY", nargs="?")
    p.add_argument("--prefix", metavar="NS", help="delete every item under NS")
    p.add_argument("--yes", action="store_true", help="confirm a --prefix delete")
    p.add_argument("--dry-run", action="store_true", help="show what would go, delete nothing")

    p = add(
        commands,
        "copy",
        cmd_copy,
        "copy items between any two stores (graphkeep URLs, sqlite:///, postgresql://),"
        " verified by reading every written item back",
        "  graphkeep store copy sqlite:///store.db redis://localhost:6379/0\n"
        "  graphkeep store copy redis://localhost:6379/0 'dynamodb://app?region=eu-west-1' \\\n"
        "      --prefix users --json\n"
        "  graphkeep store copy mongodb://db/app sqlite:///backup.db --dry-run\n"
        "\n"
        "Re-runnable: items the destination already holds with the same value are skipped\n"
        "(unless --overwrite), so a second run writes nothing. Keys and values are copied;\n"
        "created_at/updated_at are the destination's (BaseStore sets them) and TTLs are not\n"
        "carried over (--ttl sets one). With --embed/--dims/--field the destination embeds\n"
        "what it receives (add --overwrite to embed items copied before).\n"
        "Exit code 1 when an item read back from the destination differs.\n",
        common,
    )
    p.add_argument("src", metavar="SRC_URL")
    p.add_argument("dst", metavar="DST_URL")
    p.add_argument("--prefix", metavar="NS", help=f"only items under NS ({NAMESPACE_HELP})")
    p.add_argument("--src-key-prefix", metavar="PREFIX", help="key prefix of the source")
    p.add_argument("--dst-key-prefix", metavar="PREFIX", help="key prefix of the destination")
    p.add_argument("--ttl", type=_minutes, metavar="MINUTES", help="TTL of the copied items")
    p.add_argument("--dry-run", action="store_true", help="count what would be written")
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="write every item, also those already identical (to embed them or re-arm a TTL)",
    )
    _index_flags(p, "the destination's model")


__all__ = [
    "add_store_commands",
    "format_namespace",
    "iter_items",
    "open_store",
    "parse_namespace",
]
