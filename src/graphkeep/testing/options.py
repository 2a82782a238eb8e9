"""The plugin's options as values: the selected backends, the server mode and the
``graphkeep_env`` exports, each a usage error when malformed (also before the command line is
fully parsed, as ``pytest_load_initial_conftests`` needs them)."""

from __future__ import annotations

import importlib.util
import os
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from graphkeep.errors import mask_url

BACKENDS = ("redis", "redis-cluster", "mongodb", "dynamodb", "valkey", "valkey-cluster")
#: the backends selected by default (when their driver imports); the others are opt-in: named
#: by --graphkeep-backends, or by a ``graphkeep_env`` line (which starts that server only)
DEFAULT_BACKENDS = ("redis", "redis-cluster", "mongodb", "dynamodb")
#: the module each backend's extra installs: a backend is selected by default when it imports
DRIVERS = {"redis": "redis", "redis-cluster": "redis", "mongodb": "pymongo", "dynamodb": "boto3"}
DRIVERS |= {"valkey": "redis", "valkey-cluster": "redis"}
SERVER_MODES = ("env", "local", "containers")


def option(config: pytest.Config, dest: str) -> Any:
    """A command-line option's value, also before the command line is fully parsed."""
    value = getattr(config.option, dest, None)
    if value is None:
        value = getattr(getattr(config, "known_args_namespace", None), dest, None)
    return value


def selected_backends(config: pytest.Config, *, opt_in: bool = False) -> list[str]:
    """The backends of ``--graphkeep-backends``, else the default ones whose driver imports
    (``opt_in``: every backend whose driver imports, for ``graphkeep_env``)."""
    raw = option(config, "graphkeep_backends")
    if raw is None:
        default = BACKENDS if opt_in else DEFAULT_BACKENDS
        return [b for b in default if importlib.util.find_spec(DRIVERS[b]) is not None]
    names = [n.strip() for n in str(raw).split(",") if n.strip()]
    unknown = [n for n in names if n not in BACKENDS]
    if unknown or not names:
        raise pytest.UsageError(
            f"--graphkeep-backends: unknown {', '.join(unknown) or '(empty list)'};"
            f" choose from {', '.join(BACKENDS)}"
        )
    return list(dict.fromkeys(names))


def server_mode(config: pytest.Config) -> str:
    mode = option(config, "graphkeep_servers") or os.environ.get("GRAPHKEEP_SERVERS")
    mode = mode or "containers"
    if mode not in SERVER_MODES:
        raise pytest.UsageError(
            f"GRAPHKEEP_SERVERS={mode!r}: choose from {', '.join(SERVER_MODES)}"
        )
    return mode


def exports(config: pytest.Config) -> dict[str, tuple[str, str | None]]:
    """``graphkeep_env`` as ``{variable: (backend, query parameter or None)}``."""
    found: dict[str, tuple[str, str | None]] = {}
    for line in config.getini("graphkeep_env"):
        variable, sep, target = str(line).partition("=")
        backend, _, param = target.strip().partition(":")
        if not sep or not variable.strip() or backend not in BACKENDS:
            raise pytest.UsageError(
                f"graphkeep_env: {line!r} is not VARIABLE=backend[:param] with a backend of"
                f" {', '.join(BACKENDS)}"
            )
        found[variable.strip()] = (backend, param.strip() or None)
    return found


def query_param(url: str, param: str) -> str:
    """The value of ``param`` in ``url``'s query (what ``VARIABLE=backend:param`` exports)."""
    values = parse_qs(urlsplit(url).query).get(param)
    if not values:
        raise pytest.UsageError(f"graphkeep_env: {mask_url(url)} has no {param!r} parameter")
    return values[0]
