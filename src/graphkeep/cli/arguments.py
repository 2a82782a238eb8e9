"""The argparse pieces ``graphkeep`` commands share: value types, the common options, the
option groups several commands take and how a sub-command is registered."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import textwrap
from collections.abc import Callable
from typing import Any, TextIO

from graphkeep.cli.console import UsageError, parse_duration, parse_size

#: a command: parsed arguments, stdout, stderr -> exit code
Command = Callable[[argparse.Namespace, TextIO, TextIO], int]


# -- value types -----------------------------------------------------------------------


def import_object(spec: str, option: str, example: str) -> Any:
    """What ``MODULE:ATTR`` (``ATTR`` may be dotted) names, for options such as ``--graph``,
    ``--migrations`` and ``--serde``: the app's modules are found from the current directory,
    as ``python -m`` finds them. Anything that goes wrong is a :class:`UsageError` naming
    ``option`` (``example`` shows the form), before any store is opened."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise UsageError(f"{option} takes MODULE:ATTR (e.g. {example}), got {spec!r}")
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        found: Any = importlib.import_module(module_name)
    except Exception as exc:  # the app's module may fail in any way while it is imported
        raise UsageError(
            f"{option} {spec}: cannot import {module_name!r}: {type(exc).__name__}: {exc}"
        ) from exc
    for part in attr.split("."):
        try:
            found = getattr(found, part)
        except AttributeError:
            raise UsageError(f"{option} {spec}: {module_name!r} has no {attr!r}") from None
    return found


def import_graph(spec: str) -> Any:
    """What ``--graph MODULE:ATTR`` names (see :func:`import_object`): a compiled graph or a
    ``StateGraph`` builder as it is, a function without arguments (the app's factory) called
    first; the caller checks which kind it needs."""
    found = import_object(spec, "--graph", "app.graph:graph")
    graph_like = ("channels", "get_state", "compile")
    if callable(found) and not any(hasattr(found, name) for name in graph_like):
        try:
            found = found()
        except Exception as exc:  # the app's factory may fail in any way
            raise UsageError(
                f"--graph {spec}: calling it failed: {type(exc).__name__}: {exc}"
            ) from exc
    return found


def size(text: str) -> int:
    """``500KB``, ``10MB``, ``1GiB`` or a byte count, for ``--max-bytes-per-thread``."""
    try:
        return parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def duration(text: str) -> float:
    """``30d``, ``12h`` ... as seconds, for ``--older-than``."""
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def positive(text: str) -> int:
    """A whole number above 0 (``--limit``, ``--top``, ``--dims`` ...)."""
    try:
        value = int(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from exc
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {value}")
    return value


def non_negative(text: str) -> int:
    """A whole number of 0 or more (``--offset``)."""
    try:
        value = int(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from exc
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


def minutes(text: str) -> float:
    """A number of minutes (``store copy --ttl``; checked positive by the command)."""
    try:
        return float(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not a number of minutes: {text!r}") from exc


def seconds(text: str) -> float:
    """``"5"``, ``"2.5"``, ``"90s"``, ``"5m"`` -> seconds (> 0), for ``--timeout``."""
    try:
        value = float(text)
    except ValueError:
        try:
            value = parse_duration(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(
                f"not a duration: {text!r} (seconds, or e.g. 90s, 5m, 1h)"
            ) from exc
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text!r}")
    return value


# -- parsers ---------------------------------------------------------------------------


def common_options() -> argparse.ArgumentParser:
    """The options every command takes (a parent parser)."""
    common = argparse.ArgumentParser(add_help=False)
    group = common.add_argument_group("common options")
    group.add_argument(
        "--key-prefix",
        metavar="PREFIX",
        help="graphkeep key prefix of the store (the key_prefix option of graphkeep.connect)",
    )
    group.add_argument("--json", action="store_true", help="machine-readable JSON on stdout")
    group.add_argument(
        "--no-progress", dest="progress", action="store_false", help="never draw progress bars"
    )
    group.add_argument(
        "--traceback", action="store_true", help="show the Python traceback of an error"
    )
    return common


class Commands:
    """The sub-commands of ``graphkeep``, or of a group of them (``graphkeep store``): each
    takes the common options and shows its summary and examples in its ``--help``."""

    def __init__(self, subparsers: Any, common: argparse.ArgumentParser) -> None:
        self.subparsers = subparsers
        self.common = common

    def add(
        self, usage: str, command: Command, summary: str, examples: str
    ) -> argparse.ArgumentParser:
        """Register the sub-command ``usage`` names (``"copy SRC_URL DST_URL"``: its name,
        then the metavars of its first positional arguments, each stored under its
        lower-cased name: ``args.src_url``), running ``command``."""
        name, *positionals = usage.split()
        parser: argparse.ArgumentParser = self.subparsers.add_parser(
            name,
            help=summary,
            description=textwrap.fill(summary, 79),
            epilog="examples:\n" + examples,
            formatter_class=argparse.RawDescriptionHelpFormatter,
            parents=[self.common],
        )
        parser.set_defaults(func=command)
        for metavar in positionals:
            parser.add_argument(metavar.lower(), metavar=metavar)
        return parser

    def group(self, name: str, dest: str, **options: Any) -> Commands:
        """The sub-commands of ``graphkeep NAME`` (their name in ``args.<dest>``);
        ``options`` are those of the group's own parser (``help``, ``description`` ...)."""
        parser = self.subparsers.add_parser(name, **options)
        commands = parser.add_subparsers(dest=dest, metavar="COMMAND", required=True)
        return Commands(commands, self.common)


def add_thread_choice(
    parser: argparse.ArgumentParser, every: str, *, repeatable: bool = False
) -> None:
    """``--thread THREAD [THREAD ...]`` or ``--all`` (``every`` says which threads), one of
    them required; ``repeatable``: ``--thread`` may be given again, adding threads."""
    which = parser.add_mutually_exclusive_group(required=True)
    if repeatable:
        which.add_argument(
            "--thread",
            action="extend",
            nargs="+",
            metavar="THREAD",
            help="these threads (repeatable)",
        )
    else:
        which.add_argument("--thread", nargs="+", metavar="THREAD", help="these threads")
    which.add_argument("--all", action="store_true", help=every)


def add_namespace_choice(parser: argparse.ArgumentParser) -> None:
    """``--ns NS`` (default the root namespace) or ``--all-ns``."""
    ns = parser.add_mutually_exclusive_group()
    ns.add_argument("--ns", default="", help='checkpoint namespace (default: root "")')
    ns.add_argument("--all-ns", action="store_true", help="every namespace (subgraphs too)")


def add_key_prefixes(parser: argparse.ArgumentParser) -> None:
    """A copy's ``--src-key-prefix`` and ``--dst-key-prefix`` (each side's own; unset: the
    common ``--key-prefix``, see :func:`~graphkeep.cli.endpoints.copy_key_prefixes`)."""
    parser.add_argument("--src-key-prefix", metavar="PREFIX", help="key prefix of the source")
    parser.add_argument("--dst-key-prefix", metavar="PREFIX", help="key prefix of the destination")
