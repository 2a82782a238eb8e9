"""``graphkeep effects URL [clear] [--thread T]``: the effect ledger's records from the shell.

Lists what ``@ledger.once`` recorded (thread, key, effect name, state, times, stored size —
never the result itself), or removes records: a thread's (``--thread``) or every record
under the key prefix. ``clear`` is how a person settles an effect reported
``EffectOutcomeUnknown`` after checking the outside system.
"""

from __future__ import annotations

import argparse
from typing import Any, TextIO

from graphkeep.cli.arguments import Commands
from graphkeep.cli.console import EXIT_OK, UsageError, print_json, table
from graphkeep.cli.endpoints import open_effects

ACTIONS = ("clear",)
#: ``--thread -``: the records of effects called outside any graph
NO_THREAD = "-"
KEY_WIDTH = 40


def _url_and_action(words: list[str]) -> tuple[str, str]:
    """``URL``, ``URL clear`` or ``clear URL``."""
    if len(words) == 1 and words[0] not in ACTIONS:
        return words[0], "list"
    if len(words) == 2 and words[1] in ACTIONS and words[0] not in ACTIONS:
        return words[0], words[1]
    if len(words) == 2 and words[0] in ACTIONS and words[1] not in ACTIONS:
        return words[1], words[0]
    raise UsageError("expected: graphkeep effects URL [clear] [--thread T]")


def _short(key: str) -> str:
    return key if len(key) <= KEY_WIDTH else key[: KEY_WIDTH - 1] + "…"


def cmd_effects(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    url, action = _url_and_action(args.words)
    thread = "" if args.thread == NO_THREAD else args.thread
    with open_effects(url, args.key_prefix) as ledger:
        if action == "clear":
            count = ledger.clear(thread)
            where = (
                "every thread"
                if thread is None
                else "no thread"
                if thread == ""
                else f"thread {thread!r}"
            )
            if args.json:
                print_json({"cleared": count, "thread_id": thread}, out)
            else:
                out.write(f"cleared {count} record{'' if count == 1 else 's'} ({where})\n")
            return EXIT_OK
        records = ledger.records(thread)
    if args.json:
        print_json([r.as_dict() for r in records], out)
        return EXIT_OK
    rows: list[list[Any]] = [
        [
            r.thread_id or "-",
            _short(r.key),
            r.name,
            r.state,
            r.created_at.strftime("%Y-%m-%d %H:%M:%S"),
            r.expires_at.strftime("%Y-%m-%d %H:%M:%S"),
            r.size,
        ]
        for r in records
    ]
    table(
        ["THREAD", "KEY", "EFFECT", "STATE", "CREATED (UTC)", "EXPIRES (UTC)", "BYTES"], rows, out
    )
    return EXIT_OK


def add_effects_command(commands: Commands) -> None:
    p = commands.add(
        "effects",
        cmd_effects,
        "list the effect ledger's records (graphkeep.connect_effects, saver.effects): thread,"
        " key, effect, state, times and size, never results; `clear` removes them",
        "  graphkeep effects redis://localhost:6379/0\n"
        "  graphkeep effects redis://localhost:6379/0 --thread support-42 --json\n"
        "  graphkeep effects redis://localhost:6379/0 clear --thread support-42\n"
        "  graphkeep effects 'dynamodb://app?region=eu-west-1' clear\n"
        "\n"
        "A record 'started' whose lease ended is an effect whose outcome is unknown (its\n"
        "process died mid-effect): check the outside system, then clear it to let the next\n"
        "call run it again. Without --thread, clear removes every record under the prefix.\n",
    )
    p.add_argument("words", nargs="+", metavar="URL [clear]")
    p.add_argument(
        "--thread",
        metavar="T",
        help="only this thread's records (-: those of effects called outside any graph)",
    )
