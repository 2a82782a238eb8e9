"""``graphkeep store ...``: LangGraph long-term memory stores (``BaseStore``) from the shell.

``namespaces``, ``get``, ``search``, ``delete`` and ``copy`` work on every store the
command can open (:func:`graphkeep.cli.endpoints.open_store`): graphkeep URLs through
:func:`graphkeep.connect_store`, and LangGraph's own ``SqliteStore`` (``sqlite:///file.db``)
and ``PostgresStore`` (``postgresql://...``, when langgraph-checkpoint-postgres is
installed). Namespaces on the command line: :mod:`graphkeep.cli.store_values`; ``copy``:
:mod:`graphkeep.cli.store_copy`.

Reads never refresh TTLs and never create a schema; ``copy`` creates the destination's.
"""

from __future__ import annotations

import argparse
import json
from typing import TextIO

from langgraph.store.base import PutOp

from graphkeep.cli.arguments import (
    Commands,
    add_key_prefixes,
    minutes,
    non_negative,
    positive,
)
from graphkeep.cli.console import EXIT_OK, NotFound, Progress, UsageError, print_json, table
from graphkeep.cli.endpoints import open_store
from graphkeep.cli.store_copy import cmd_store_copy
from graphkeep.cli.store_values import (
    NAMESPACE_HELP,
    PAGE_SIZE,
    Namespace,
    format_namespace,
    index_flags,
    index_options,
    item_json,
    iter_items,
    parse_filter,
    parse_namespace,
    short_value,
    store_label,
)

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
        out.write(f"no namespaces at {store_label(args.url, args.key_prefix)}\n")
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
            f" at {store_label(args.url, args.key_prefix)}"
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
    filter = parse_filter(args.filter)
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
            f" at {store_label(args.url, args.key_prefix)}\n"
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
            short_value(i.value),
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
    label = store_label(args.url, args.key_prefix)
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
    label = store_label(args.url, args.key_prefix)
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


# -- argparse wiring ------------------------------------------------------------------------

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


def add_store_commands(commands: Commands) -> None:
    """Register ``graphkeep store <command>`` among the top-level ``commands``."""
    store = commands.group(
        "store",
        "store_command",
        help=GROUP_HELP,
        description=GROUP_HELP,
        epilog=GROUP_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )

    p = store.add(
        "namespaces URL",
        cmd_namespaces,
        "list the namespaces that hold items, sorted; --prefix/--suffix may use * for any label",
        "  graphkeep store namespaces redis://localhost:6379/0\n"
        "  graphkeep store namespaces redis://localhost:6379/0 --prefix users --max-depth 2\n"
        "  graphkeep store namespaces sqlite:///store.db --suffix memories --json\n"
        "  graphkeep store namespaces mongodb://db/app --prefix '[\"team/a\"]' --limit 20\n",
    )
    p.add_argument("--prefix", metavar="NS", help=f"namespaces starting with NS ({NAMESPACE_HELP})")
    p.add_argument("--suffix", metavar="NS", help="namespaces ending with NS")
    p.add_argument("--max-depth", type=positive, metavar="N", help="truncate to N labels")
    p.add_argument("--limit", type=positive, metavar="N", help="at most N namespaces")

    p = store.add(
        "get URL",
        cmd_get,
        "one item: its value and times; exit code 4 when it does not exist",
        "  graphkeep store get redis://localhost:6379/0 users/alice prefs\n"
        '  graphkeep store get sqlite:///store.db \'["team/a","notes"]\' n1 --json\n',
    )
    p.add_argument("namespace", metavar="NAMESPACE", help=NAMESPACE_HELP)
    p.add_argument("key", metavar="KEY")

    p = store.add(
        "search URL",
        cmd_search,
        "items under a namespace prefix, newest first, or by similarity with --query",
        "  graphkeep store search redis://localhost:6379/0 users/alice\n"
        '  graphkeep store search redis://localhost:6379/0 / --filter \'{"kind": "note"}\'\n'
        '  graphkeep store search mongodb://db/app users --filter \'{"score": {"$gte": 3}}\' \\\n'
        "      --limit 50 --offset 50 --json\n"
        "  graphkeep store search redis://localhost:6379/0 users --query 'favourite food' \\\n"
        "      --embed openai:text-embedding-3-small --dims 1536\n",
    )
    p.add_argument(
        "namespace_prefix", metavar="NAMESPACE_PREFIX", help=f"{NAMESPACE_HELP}; / = all"
    )
    p.add_argument("--filter", metavar="JSON", help='e.g. \'{"kind": "note", "n": {"$gt": 2}}\'')
    p.add_argument("--query", metavar="TEXT", help="semantic search (needs --embed and --dims)")
    p.add_argument("--limit", type=positive, default=10, metavar="N", help="default 10")
    p.add_argument("--offset", type=non_negative, default=0, metavar="N", help="skip N items")
    index_flags(p, "the store's model, for --query")

    p = store.add(
        "delete URL",
        cmd_delete,
        "delete one item, or every item under a namespace prefix (--prefix NS --yes)",
        "  graphkeep store delete redis://localhost:6379/0 users/alice prefs\n"
        "  graphkeep store delete redis://localhost:6379/0 --prefix users/alice --dry-run\n"
        "  graphkeep store delete redis://localhost:6379/0 --prefix users/alice --yes\n",
    )
    p.add_argument("namespace", metavar="NAMESPACE", nargs="?", help=NAMESPACE_HELP)
    p.add_argument("key", metavar="KEY", nargs="?")
    p.add_argument("--prefix", metavar="NS", help="delete every item under NS")
    p.add_argument("--yes", action="store_true", help="confirm a --prefix delete")
    p.add_argument("--dry-run", action="store_true", help="show what would go, delete nothing")

    p = store.add(
        "copy SRC_URL DST_URL",
        cmd_store_copy,
        "copy items between any two stores (graphkeep URLs, sqlite:///, postgresql://,"
        " langgraph-redis://, langgraph-mongodb://, langgraph-dynamodb://), verified by"
        " reading every written item back",
        "  graphkeep store copy sqlite:///store.db redis://localhost:6379/0\n"
        "  graphkeep store copy redis://localhost:6379/0 'dynamodb://app?region=eu-west-1' \\\n"
        "      --prefix users --json\n"
        "  graphkeep store copy mongodb://db/app sqlite:///backup.db --dry-run\n"
        "  graphkeep store copy langgraph-redis://localhost:6379/0 redis://localhost:6379/1\n"
        "  graphkeep store copy 'langgraph-mongodb://db:27017/app?collection_name=memories' \\\n"
        "      mongodb://db/app\n"
        "  graphkeep store copy redis://localhost:6379/0 \\\n"
        "      'langgraph-dynamodb://memories?region=eu-west-1'\n"
        "  graphkeep store copy old sqlite:///copy.db --source-store myapp.stores:open_old\n"
        "\n"
        "Re-runnable: items the destination already holds with the same value are skipped\n"
        "(unless --overwrite), so a second run writes nothing. Keys and values are copied;\n"
        "a graphkeep destination keeps each item's created_at/updated_at, the others set\n"
        "their own (BaseStore's put takes no times). TTLs: an item of\n"
        "langgraph-redis/-mongodb/-dynamodb keeps the life it has left; other sources' TTLs\n"
        "are not carried over (--ttl sets one). With --embed/--dims/--field the destination\n"
        "embeds what it receives (add --overwrite to embed items copied before).\n"
        "--source-store / --dest-store MODULE:CALLABLE: a callable returning a context manager\n"
        "that yields a BaseStore, for any other store (SRC_URL / DST_URL then only label it).\n"
        "Exit code 1 when an item is refused or read back from the destination differs.\n",
    )
    p.add_argument(
        "--source-store", metavar="MODULE:CALLABLE", help="read from the store it yields"
    )
    p.add_argument("--dest-store", metavar="MODULE:CALLABLE", help="write to the store it yields")
    p.add_argument("--prefix", metavar="NS", help=f"only items under NS ({NAMESPACE_HELP})")
    add_key_prefixes(p)
    p.add_argument("--ttl", type=minutes, metavar="MINUTES", help="TTL of the copied items")
    p.add_argument("--dry-run", action="store_true", help="count what would be written")
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="write every item, also those already identical (to embed them or re-arm a TTL)",
    )
    p.add_argument(
        "--all",
        action="store_true",
        help="a live switch's copy into graphkeep (connect_store(url, fallback=SRC)): every"
        " item, each written only where graphkeep holds no item and no tombstone (never over"
        " a newer put, never a deleted item back), then the copy marked finished"
        " (store.fallback_done() is True)",
    )
    index_flags(p, "the destination's model")
