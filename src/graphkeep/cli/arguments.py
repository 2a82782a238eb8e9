"""The argparse pieces every ``graphkeep`` command shares: value types, common options and
how a sub-command is registered."""

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


def add_command(
    subparsers: Any,
    name: str,
    command: Command,
    summary: str,
    examples: str,
    common: argparse.ArgumentParser,
) -> argparse.ArgumentParser:
    """Register ``name`` (running ``command``) with its summary and examples."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        name,
        help=summary,
        description=textwrap.fill(summary, 79),
        epilog="examples:\n" + examples,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        parents=[common],
    )
    parser.set_defaults(func=command)
    return parser
