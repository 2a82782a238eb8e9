"""The ``graphkeep`` argument parser, dispatch and error handling."""

from __future__ import annotations

import argparse
import sys
import traceback
from collections.abc import Sequence
from typing import TextIO

from graphkeep import __version__
from graphkeep.cli.arguments import (
    Commands,
    add_key_prefixes,
    add_namespace_choice,
    add_thread_choice,
    common_options,
    duration,
    positive,
    size,
)
from graphkeep.cli.console import EXIT_ERROR, EXIT_USAGE, MASK, CliError, mask
from graphkeep.errors import ConfigurationError, GraphkeepError, InvalidInput, StorageUnavailable
from graphkeep.moving.decode import EncryptedValueError

DESCRIPTION = """\
Inspect, dump, prune, copy, materialize, migrate and size the checkpoints
LangGraph apps keep in graphkeep stores (the URLs of graphkeep.connect) and in
LangGraph's own savers (sqlite:///path, postgresql://... when
langgraph-checkpoint-sqlite / -postgres are installed); watch a thread's
checkpoints and read a run's events live
(graphkeep stores only)."""

EPILOG = """\
URLs:
  redis://[:password@]host:6379/0   redis+cluster://host:7000   rediss://...
  valkey://, valkeys://, valkey+cluster://, valkeys+cluster:// (the same, as Valkey writes them)
  mongodb://host:27017/db           dynamodb://TABLE?region=us-east-1[&endpoint_url=...]
  sqlite:///relative.db  sqlite:////absolute/path.db  postgresql://user:pw@host/db
  (graphkeep schemes: whatever graphkeep.connect.BACKENDS registers)

exit codes:
  0 ok   1 error (store unreachable, copy not verified, check found errors, ...)
  2 usage (bad flags, bad URL; health, check: store unreachable)
  3 a stats or health threshold was crossed; check found warnings only
  4 not found (thread, checkpoint, run, SQLite file)
  130 interrupted (Ctrl-C)

Encrypted values are decoded when LANGGRAPH_AES_KEY is set. Passwords in URLs are
masked in every message. Progress bars go to stderr, only when it is a terminal.
Run `graphkeep COMMAND --help` for examples."""


def build_parser() -> argparse.ArgumentParser:
    from graphkeep.cli.check import add_check_command
    from graphkeep.cli.copy import cmd_copy
    from graphkeep.cli.dump import cmd_dump
    from graphkeep.cli.effects import add_effects_command
    from graphkeep.cli.health import add_health_command
    from graphkeep.cli.hot import add_hot_commands, add_hot_option
    from graphkeep.cli.inspection import cmd_history, cmd_threads
    from graphkeep.cli.live import add_live_commands
    from graphkeep.cli.maintain import cmd_prune, cmd_setup, cmd_stats
    from graphkeep.cli.materialize import add_materialize_command
    from graphkeep.cli.migrate import cmd_migrate
    from graphkeep.cli.privileges import add_privilege_options
    from graphkeep.cli.rekey import add_rekey_command
    from graphkeep.cli.store import add_store_commands

    parser = argparse.ArgumentParser(
        prog="graphkeep",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"graphkeep {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    commands = Commands(sub, common_options())

    p = commands.add(
        "threads URL",
        cmd_threads,
        "list threads with checkpoint count, namespaces, size and last checkpoint time",
        "  graphkeep threads redis://localhost:6379/0\n"
        "  graphkeep threads redis://localhost:6379/0 --limit 50 --json\n"
        "  graphkeep threads 'dynamodb://app?region=eu-west-1' --quick\n"
        "  graphkeep threads sqlite:///checkpoints.db\n"
        "  graphkeep threads mongodb://db/app --hot redis://cache:6379/0\n",
    )
    p.add_argument("--limit", type=positive, help="show at most N threads")
    p.add_argument(
        "--page-size", type=positive, default=500, help="threads per store page (default 500)"
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="read only the store's index: no sizes or write counts, much faster on big stores",
    )
    add_hot_option(p)

    p = commands.add(
        "history URL THREAD",
        cmd_history,
        "a thread's checkpoints, newest first: id, step, source, parent, pending writes,"
        " channels changed",
        "  graphkeep history redis://localhost:6379/0 support-42\n"
        "  graphkeep history redis://localhost:6379/0 support-42 --limit 5 --json\n"
        "  graphkeep history redis://localhost:6379/0 support-42 --all-ns\n",
    )
    add_namespace_choice(p)
    p.add_argument("--limit", type=positive, help="newest N checkpoints only")
    add_hot_option(p)

    p = commands.add(
        "dump URL",
        cmd_dump,
        "read-only recovery export of channels as plain JSON: the stored seed value and"
        " every write since, oldest first",
        "  graphkeep dump redis://localhost:6379/0 --thread-id support-42 --channel messages\n"
        "  graphkeep dump mongodb://db/app --thread-id t1 --channel messages --channel todo \\\n"
        "      --checkpoint-id 1f0c... --output t1.json\n"
        "\n"
        "Recover a DeltaChannel value: start from `seed` (null when delta_kind is no_seed)\n"
        "and apply the channel's reducer to the `value` of each entry of `writes` in order.\n"
        "Without --channel every state channel of the checkpoint is dumped.\n",
    )
    p.add_argument("--thread-id", required=True, metavar="THREAD")
    p.add_argument(
        "--channel", action="append", metavar="CHANNEL", help="channel to dump (repeatable)"
    )
    p.add_argument("--checkpoint-id", metavar="ID", help="checkpoint to dump (default: latest)")
    p.add_argument("--checkpoint-ns", default="", metavar="NS", help='namespace (default "")')
    p.add_argument("--output", "-o", metavar="FILE", help="write the JSON here (default: -)")
    p.add_argument("--compact", action="store_true", help="one-line JSON")
    add_hot_option(p)

    p = commands.add(
        "prune URL",
        cmd_prune,
        "remove old checkpoints (keeping what DeltaChannels need) or whole threads",
        "  graphkeep prune redis://localhost:6379/0 --keep-latest --thread t1 t2 --dry-run\n"
        "  graphkeep prune redis://localhost:6379/0 --keep-latest --older-than 30d\n"
        "  graphkeep prune redis://localhost:6379/0 --delete --older-than 90d --json\n"
        "\n"
        "--keep-latest keeps each namespace's newest checkpoint plus the ancestors its\n"
        "DeltaChannels still replay from (the saver's own prune rule); --delete removes\n"
        "threads entirely. --older-than selects threads whose newest checkpoint is older.\n",
    )
    strategy = p.add_mutually_exclusive_group(required=True)
    strategy.add_argument("--keep-latest", action="store_true", help="keep the newest state")
    strategy.add_argument("--delete", action="store_true", help="delete the threads entirely")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--thread", nargs="+", metavar="THREAD", help="these threads")
    which.add_argument(
        "--older-than", type=duration, metavar="AGE", help="threads idle this long (30d, 12h)"
    )
    p.add_argument("--dry-run", action="store_true", help="print the plan, remove nothing")
    p.add_argument("--verbose", "-v", action="store_true", help="list every checkpoint removed")

    p = commands.add(
        "copy SRC_URL DST_URL",
        cmd_copy,
        "copy threads between any two savers with the same checkpoint ids, metadata,"
        " writes and DeltaChannel chains",
        "  graphkeep copy sqlite:///app.db redis://localhost:6379/0 --all\n"
        "  graphkeep copy redis://old:6379/0 'dynamodb://app?region=eu-west-1' --thread t1 t2\n"
        "  graphkeep copy redis://localhost:6379/0 redis://localhost:6379/0 --thread t1 \\\n"
        "      --rename-to t1-backup\n"
        "  graphkeep copy mongodb://old:27017/app redis://localhost:6379/0 --all \\\n"
        "      --source-saver app.savers:mongodb_saver\n"
        "\n"
        "Idempotent and resumable: checkpoints already on the destination are skipped, so\n"
        "re-run the same command after an interruption; one that differs from the source is\n"
        "never overwritten (reported). Channel versions are translated into the kind the\n"
        "destination steps from (integers or strings), one-to-one and in order. Every thread\n"
        "is verified at the end: between graphkeep stores as stored bytes, otherwise through\n"
        "LangGraph's read path (get_tuple of every checkpoint, heads, list order; with\n"
        "--graph, get_state and its history); exit code 1 when one is not.\n",
    )
    add_thread_choice(p, "every thread of the source")
    p.add_argument("--rename-to", metavar="THREAD", help="new id for the (single) thread")
    add_key_prefixes(p)
    p.add_argument(
        "--no-verify", dest="verify", action="store_false", help="skip the final verification"
    )
    p.add_argument(
        "--source-saver",
        metavar="MODULE:CALLABLE",
        help="any LangGraph saver as the source: CALLABLE(SRC_URL) (or CALLABLE(), when it takes"
        " no argument) returns a context manager yielding a BaseCheckpointSaver",
    )
    p.add_argument(
        "--dest-saver",
        metavar="MODULE:CALLABLE",
        help="the same for the destination, called with DST_URL",
    )
    p.add_argument(
        "--graph",
        metavar="MODULE:ATTR",
        help="the app's graph (compiled or a builder): also verify get_state and"
        " get_state_history read through it from each side",
    )

    p = commands.add(
        "stats URL",
        cmd_stats,
        "storage growth report; exit code 3 when a threshold is crossed (for cron)",
        "  graphkeep stats redis://localhost:6379/0\n"
        "  graphkeep stats redis://localhost:6379/0 --top 20 --json\n"
        "  graphkeep stats mongodb://db/app --max-checkpoints-per-thread 500 \\\n"
        "      --max-bytes-per-thread 10MB || alert 'checkpoints grow'\n",
    )
    p.add_argument("--top", type=positive, default=10, help="largest N threads (default 10)")
    p.add_argument("--max-checkpoints-per-thread", type=positive, metavar="N")
    p.add_argument(
        "--max-bytes-per-thread", type=size, metavar="SIZE", help="e.g. 500KB, 10MB, 1GiB"
    )
    add_hot_option(p)

    p = commands.add(
        "setup URL",
        cmd_setup,
        "create the store's schema, or print it for teams that own their migrations",
        "  graphkeep setup 'dynamodb://app?region=eu-west-1'\n"
        "  graphkeep setup mongodb://db/app --print > indexes.json\n"
        "  graphkeep setup redis://localhost:6379/0 --print\n"
        "  graphkeep setup 'redis://localhost:6379/0?key_prefix=app' --print-acl\n"
        "  graphkeep setup 'dynamodb://app?region=eu-west-1' --print-iam-policy [--read-only]\n",
    )
    p.add_argument("--print", action="store_true", help="print the schema instead of creating it")
    add_privilege_options(p)

    add_materialize_command(commands)
    p = commands.add(
        "migrate URL",
        cmd_migrate,
        "bring every thread's head to a schema version: one upgraded checkpoint appended per"
        " thread (history kept), under the thread's lease, verified",
        "  graphkeep migrate redis://localhost:6379/0 --to 2 \\\n"
        "      --migrations myapp.schema:MIGRATIONS \\\n"
        "      --all --dry-run\n"
        "  graphkeep migrate redis://localhost:6379/0 --to 2 \\\n"
        "      --migrations myapp.schema:MIGRATIONS \\\n"
        "      --thread t1 t2 --json\n"
        "\n"
        "--migrations names the mapping given to graphkeep.connect(migrations=...). Idempotent\n"
        "and resumable: heads already at the version are left alone, so re-run the same\n"
        "command after an interruption. A thread whose lease is held (a live run) is skipped\n"
        "and reported; exit code 1 when a thread was skipped or failed.\n",
    )
    p.add_argument("--to", type=positive, required=True, metavar="N", help="the schema version")
    p.add_argument(
        "--migrations", required=True, metavar="MODULE:ATTR", help="the migrations mapping"
    )
    add_thread_choice(p, "every thread of the store")
    p.add_argument("--dry-run", action="store_true", help="report the plan, write nothing")

    add_health_command(commands)
    add_hot_commands(commands)
    add_check_command(commands)
    add_rekey_command(commands)
    add_live_commands(commands)
    add_effects_command(commands)
    add_store_commands(commands)
    return parser


def run(argv: Sequence[str] | None, out: TextIO, err: TextIO) -> int:
    # a command masks the passwords of its own URLs: one run's (e.g. a password "graphkeep")
    # must not hide words of the next one's output in the same process
    MASK.forget()
    parser = build_parser()
    try:
        args = parser.parse_args(list(argv) if argv is not None else None)
    except SystemExit as exc:  # --help, --version, usage errors
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    try:
        code: int = args.func(args, out, err)
        return code
    except KeyboardInterrupt:
        err.write(
            "graphkeep: interrupted (copy, prune, materialize and migrate are safe to re-run)\n"
        )
        return 130
    except BrokenPipeError:
        return 0
    except BaseException as exc:
        if isinstance(exc, SystemExit):
            raise
        code = exit_code(exc)
        if args.traceback:
            err.write(mask("".join(traceback.format_exception(exc))))
        err.write(f"graphkeep: error: {describe(exc)}\n")
        if code == EXIT_ERROR and not isinstance(exc, (CliError, GraphkeepError)):
            if not args.traceback:
                err.write("graphkeep: (run again with --traceback for details)\n")
        return code


def exit_code(exc: BaseException) -> int:
    if isinstance(exc, CliError):
        return exc.code
    if isinstance(exc, (ConfigurationError, InvalidInput)):
        return EXIT_USAGE
    return EXIT_ERROR


def describe(exc: BaseException) -> str:
    """One line, credentials masked; driver errors keep their type name."""
    if isinstance(exc, (CliError, GraphkeepError, EncryptedValueError)):
        text = str(exc)
    elif isinstance(exc, (ConnectionError, TimeoutError, OSError)) and not isinstance(
        exc, StorageUnavailable
    ):
        text = f"{type(exc).__name__}: {exc} (is the server running and reachable?)"
    else:
        text = f"{type(exc).__name__}: {exc}"
    line = " ".join(text.split())
    return mask(line if len(line) <= 2000 else line[:2000] + "...")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``graphkeep`` console script; returns the exit code."""
    return run(argv, sys.stdout, sys.stderr)
