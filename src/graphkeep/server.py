"""``graphkeep.server``: the checkpointer and the store of a LangGraph Agent Server, configured by
environment, for ``langgraph.json``::

    "checkpointer": {"path": "graphkeep.server:checkpointer"},
    "store": {"path": "graphkeep.server:store"}

:func:`checkpointer` and :func:`store` take no argument (Agent Server calls them with none) and
return an async context manager that yields a ready saver / store; the server enters it once
per event loop and closes it on shutdown. Everything comes from the environment
(:data:`VARIABLES`), and from what the server hands its checkpointer and store through
``LANGGRAPH_CHECKPOINTER`` / ``LANGGRAPH_THREAD_TTL`` / ``LANGGRAPH_STORE`` (the ``checkpointer``
and ``store`` sections of ``langgraph.json``): ``serde`` and the thread ``ttl`` for the saver,
``index`` and ``ttl`` for the store. A missing or unusable value raises
:class:`~graphkeep.errors.ConfigurationError` naming its variable, so the server fails at start-up.

:func:`checkpointer_settings` and :func:`store_settings` are the reading of the environment
alone (a URL and the options for :func:`graphkeep.aconnect` / :func:`graphkeep.aconnect_store`).
"""

from __future__ import annotations

import importlib
import json
import os
import sys
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

from graphkeep.connect import (
    URL_OPTIONS,
    aconnect,
    aconnect_store,
    class_for,
)
from graphkeep.encryption import KEYS_ENV, KeyRing
from graphkeep.errors import ConfigurationError, mask_url
from graphkeep.store.validation import index_config, ttl_config

#: every variable graphkeep.server reads, and what it holds
VARIABLES: dict[str, str] = {
    "GRAPHKEEP_URL": "the checkpointer's URL (required), e.g. redis://host:6379/0",
    "GRAPHKEEP_STORE_URL": "the store's URL (default: GRAPHKEEP_URL)",
    "GRAPHKEEP_KEY_PREFIX": "key_prefix of both (default: none; or ?key_prefix= in a URL)",
    "GRAPHKEEP_TTL": "the checkpointer's native ttl in seconds (default: langgraph.json's"
    " checkpointer.ttl.default_ttl, else none)",
    "GRAPHKEEP_OPTIONS": "more graphkeep.aconnect options, as a JSON object",
    "GRAPHKEEP_FALLBACK_URL": "the saver the app used before (a live switch: each thread moved"
    " from it on first use; docs/migrate.md), e.g. sqlite:///old.db",
    "GRAPHKEEP_STORE_OPTIONS": "more graphkeep.aconnect_store options, as a JSON object",
    "GRAPHKEEP_STORE_FALLBACK_URL": "the store the app used before (a live switch: each item"
    " graphkeep lacks read through from it and copied; docs/migrate.md), e.g."
    " postgresql://host/db or a rival's langgraph-redis://host:6379/0",
    "LANGGRAPH_AES_KEY": "LangGraph's AES key (16, 24 or 32 bytes): checkpoints are encrypted"
    " with EncryptedSerializer.from_pycryptodome_aes",
    "GRAPHKEEP_KEYS": "the checkpointer's key ring, k2:BASE64,k1:BASE64 (the first current):"
    " every checkpoint record and store item sealed with AES-256-GCM at its place"
    " (graphkeep.encryption)",
    "LANGGRAPH_CHECKPOINTER": "set by Agent Server from langgraph.json: serde, ttl",
    "LANGGRAPH_THREAD_TTL": "set by Agent Server: the thread ttl (minutes, or a JSON object)",
    "LANGGRAPH_STORE": "set by Agent Server from langgraph.json: index, ttl",
}

#: Agent Server's thread TTL strategies (none given: delete)
THREAD_TTL_STRATEGIES = (None, "delete", "keep_latest")
#: those graphkeep's native TTL honours: the whole thread expires
NATIVE_TTL_STRATEGIES = (None, "delete")


@asynccontextmanager
async def checkpointer() -> AsyncIterator[Any]:
    """A ready async saver on ``GRAPHKEEP_URL`` (``checkpointer.path`` in langgraph.json)."""
    url, options = checkpointer_settings(os.environ)
    async with aconnect(url, **options) as saver:
        yield saver


@asynccontextmanager
async def store() -> AsyncIterator[Any]:
    """A ready async store on ``GRAPHKEEP_STORE_URL`` or ``GRAPHKEEP_URL`` (``store.path``);
    its TTL sweeper runs when langgraph.json's ``store.ttl`` sets ``sweep_interval_minutes``
    (Agent Server runs its own sweeper only for its built-in store)."""
    url, options = store_settings(os.environ)
    async with aconnect_store(url, **options) as opened:
        if (options.get("ttl") or {}).get("sweep_interval_minutes"):
            await opened.start_ttl_sweeper()
        yield opened


# --------------------------------------------------------------------------- the environment


def checkpointer_settings(environ: Mapping[str, str]) -> tuple[str, dict[str, Any]]:
    """``(url, options)`` for :func:`graphkeep.aconnect`, from ``environ``."""
    url = _url(environ, "GRAPHKEEP_URL")
    options = _json_object(environ, "GRAPHKEEP_OPTIONS")
    _key_prefix(environ, url, options, "GRAPHKEEP_URL")
    agent = _json_object(environ, "LANGGRAPH_CHECKPOINTER")
    ttl = _ttl_seconds(environ, agent)
    if ttl is not None:
        _no_clash(options, "ttl", "GRAPHKEEP_OPTIONS", "GRAPHKEEP_TTL or the thread ttl")
        options["ttl"] = ttl
    serde = _serde(environ, agent.get("serde"))
    if serde is not None:
        _no_clash(options, "serde", "GRAPHKEEP_OPTIONS", "langgraph.json's serde")
        options["serde"] = serde
    if environ.get(KEYS_ENV, "").strip():
        options["encryption"] = KeyRing.from_env(environ=environ)
    _fallback(environ, "GRAPHKEEP_FALLBACK_URL", options, "GRAPHKEEP_OPTIONS")
    _known(url, "checkpoint", options, "GRAPHKEEP_OPTIONS")
    return url, options


def store_settings(environ: Mapping[str, str]) -> tuple[str, dict[str, Any]]:
    """``(url, options)`` for :func:`graphkeep.aconnect_store`, from ``environ``."""
    name = "GRAPHKEEP_STORE_URL" if environ.get("GRAPHKEEP_STORE_URL") else "GRAPHKEEP_URL"
    url = _url(environ, name)
    options = _json_object(environ, "GRAPHKEEP_STORE_OPTIONS")
    _key_prefix(environ, url, options, name)
    agent = _json_object(environ, "LANGGRAPH_STORE")
    for option, check in (("index", index_config), ("ttl", ttl_config)):
        if agent.get(option):
            _no_clash(
                options, option, "GRAPHKEEP_STORE_OPTIONS", f"langgraph.json's store.{option}"
            )
            try:
                check(agent[option])
            except ConfigurationError as exc:
                raise ConfigurationError(f"LANGGRAPH_STORE: store.{option}: {exc}") from exc
            options[option] = dict(agent[option])
    if "index" in options and isinstance(options["index"].get("embed"), str):
        options["index"]["embed"] = _embeddings(options["index"])
    if environ.get(KEYS_ENV, "").strip():  # the store's items sealed with the same ring
        options["encryption"] = KeyRing.from_env(environ=environ)
    _fallback(environ, "GRAPHKEEP_STORE_FALLBACK_URL", options, "GRAPHKEEP_STORE_OPTIONS")
    _known(url, "store", options, "GRAPHKEEP_STORE_OPTIONS or LANGGRAPH_STORE")
    return url, options


def _fallback(
    environ: Mapping[str, str], name: str, options: dict[str, Any], options_name: str
) -> None:
    """``fallback`` from the URL in ``name`` (a live switch), if it is set."""
    fallback = environ.get(name, "").strip()
    if fallback:
        _no_clash(options, "fallback", options_name, name)
        if "://" not in fallback:
            raise ConfigurationError(f"{name} must be a URL (scheme://…), got {mask_url(fallback)}")
        options["fallback"] = fallback


def _url(environ: Mapping[str, str], name: str) -> str:
    url = environ.get(name, "").strip()
    if not url:
        raise ConfigurationError(
            f"{name} is not set: graphkeep.server needs the URL of its backend in {name}"
            " (e.g. redis://host:6379/0, mongodb://host:27017/app, dynamodb://table?region=…)"
        )
    try:
        class_for(url)
    except ConfigurationError as exc:
        raise ConfigurationError(f"{name}: {exc}") from exc
    return url


def _json_object(environ: Mapping[str, str], name: str) -> dict[str, Any]:
    raw = environ.get(name, "").strip()
    if not raw:
        return {}
    try:
        value = json.loads(raw)
    except ValueError as exc:
        raise ConfigurationError(f"{name} is not JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise ConfigurationError(f"{name} must be a JSON object, got {type(value).__name__}")
    return value


def _key_prefix(environ: Mapping[str, str], url: str, options: dict[str, Any], name: str) -> None:
    prefix = environ.get("GRAPHKEEP_KEY_PREFIX")
    if prefix is None:
        return
    if not prefix.strip():
        raise ConfigurationError("GRAPHKEEP_KEY_PREFIX is empty")
    if any(f"{option}=" in url.partition("?")[2] for option in URL_OPTIONS):
        raise ConfigurationError(
            f"GRAPHKEEP_KEY_PREFIX and {name} ({mask_url(url)}) both give a key_prefix"
        )
    _no_clash(options, "key_prefix", "the options variable", "GRAPHKEEP_KEY_PREFIX")
    options["key_prefix"] = prefix.strip()


def _no_clash(options: Mapping[str, Any], option: str, where: str, other: str) -> None:
    if option in options:
        raise ConfigurationError(f"{option} is given both in {where} and by {other}")


def _known(url: str, product: str, options: Mapping[str, Any], name: str) -> None:
    try:
        class_for(url, product, is_async=True, options=options)
    except ConfigurationError as exc:
        raise ConfigurationError(f"{name}: {exc}") from exc


def _ttl_seconds(environ: Mapping[str, str], agent: Mapping[str, Any]) -> float | None:
    """GRAPHKEEP_TTL (seconds), else the thread TTL Agent Server was given (minutes)."""
    raw = environ.get("GRAPHKEEP_TTL", "").strip()
    if raw:
        try:
            seconds = float(raw)
        except ValueError:
            seconds = float("nan")
        if not seconds > 0 or seconds == float("inf"):
            raise ConfigurationError(
                f"GRAPHKEEP_TTL must be a positive number of seconds, got {raw!r}"
            )
        return seconds
    name, thread_ttl = "LANGGRAPH_THREAD_TTL", _thread_ttl(environ)
    if thread_ttl is None:
        name, thread_ttl = "LANGGRAPH_CHECKPOINTER", agent.get("ttl")
    if not thread_ttl:
        return None
    if not isinstance(thread_ttl, Mapping):
        raise ConfigurationError(f"{name}: ttl must be an object, got {thread_ttl!r}")
    strategy = thread_ttl.get("strategy")
    strategy = strategy.lower() if isinstance(strategy, str) else strategy
    if strategy not in THREAD_TTL_STRATEGIES:
        raise ConfigurationError(
            f"{name}: ttl.strategy must be delete or keep_latest, got {thread_ttl['strategy']!r}"
        )
    if strategy not in NATIVE_TTL_STRATEGIES:
        # keep_latest keeps a thread's latest checkpoint: the server's own sweeper does that
        # with aprune where its runtime runs one; graphkeep's native TTL would drop the thread
        return None
    minutes = thread_ttl.get("default_ttl")
    if minutes is None:
        return None
    if isinstance(minutes, bool) or not isinstance(minutes, (int, float)) or not minutes > 0:
        raise ConfigurationError(
            f"{name}: ttl.default_ttl must be a positive number of minutes, got {minutes!r}"
        )
    return float(minutes) * 60


def _thread_ttl(environ: Mapping[str, str]) -> Any:
    raw = environ.get("LANGGRAPH_THREAD_TTL", "").strip()
    if not raw:
        return None
    if raw.startswith("{"):
        return _json_object(environ, "LANGGRAPH_THREAD_TTL")
    try:
        return {"strategy": "delete", "default_ttl": float(raw)}
    except ValueError:
        raise ConfigurationError(
            f"LANGGRAPH_THREAD_TTL must be minutes or a JSON object, got {raw!r}"
        ) from None


def _serde(environ: Mapping[str, str], config: Any) -> Any:
    """langgraph.json's ``serde`` as LangGraph's JsonPlusSerializer, encrypted with
    LANGGRAPH_AES_KEY when it is set; None when neither is given (the saver's default)."""
    key = environ.get("LANGGRAPH_AES_KEY")
    if not config and key is None:
        return None
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

    serde: Any = JsonPlusSerializer(**_serde_options(config))
    if key is None:
        return serde
    if len(key.encode()) not in (16, 24, 32):
        raise ConfigurationError(
            f"LANGGRAPH_AES_KEY must be 16, 24 or 32 bytes long, got {len(key.encode())}"
        )
    from langgraph.checkpoint.serde.encrypted import EncryptedSerializer

    try:
        return EncryptedSerializer.from_pycryptodome_aes(serde, key=key.encode())
    except ImportError as exc:
        raise ConfigurationError(
            f"LANGGRAPH_AES_KEY needs pycryptodome: pip install pycryptodome ({exc})"
        ) from exc


def _serde_options(config: Any) -> dict[str, Any]:
    if not config:
        return {}
    if not isinstance(config, Mapping):
        raise ConfigurationError(f"LANGGRAPH_CHECKPOINTER: serde must be an object, got {config!r}")
    unknown = sorted(set(config) - {"allowed_json_modules", "pickle_fallback"})
    if unknown:
        raise ConfigurationError(
            f"LANGGRAPH_CHECKPOINTER: unknown serde option(s) {', '.join(unknown)};"
            " accepted: allowed_json_modules, pickle_fallback"
        )
    options: dict[str, Any] = {}
    if "pickle_fallback" in config:
        if not isinstance(config["pickle_fallback"], bool):
            raise ConfigurationError(
                "LANGGRAPH_CHECKPOINTER: serde.pickle_fallback must be true or false,"
                f" got {config['pickle_fallback']!r}"
            )
        options["pickle_fallback"] = config["pickle_fallback"]
    modules = config.get("allowed_json_modules")
    if modules is True or modules is None:
        options["allowed_json_modules"] = modules
    elif isinstance(modules, list) and all(
        isinstance(m, list) and m and all(isinstance(p, str) for p in m) for m in modules
    ):
        options["allowed_json_modules"] = [tuple(m) for m in modules]
    else:
        raise ConfigurationError(
            "LANGGRAPH_CHECKPOINTER: serde.allowed_json_modules must be true, null or a list"
            f" of module paths (lists of strings), got {modules!r}"
        )
    return options


def _embeddings(index: Mapping[str, Any]) -> Any:
    """``index.embed`` resolved, inside Agent Server, as the server resolves it for its own
    store (``./file.py:function``, ``package/module.py:function`` or ``provider:model``);
    elsewhere the string is left to LangGraph's ``init_embeddings`` (``provider:model``)."""
    if "langgraph_api" not in sys.modules:  # not in Agent Server: its config needs its env
        return index["embed"]
    resolve = importlib.import_module("langgraph_api.graph").resolve_embeddings
    try:
        return resolve(dict(index))
    except Exception as exc:  # noqa: BLE001 - whatever the model loader raises, named
        raise ConfigurationError(
            f"LANGGRAPH_STORE: index.embed {index['embed']!r} cannot be loaded: {exc}"
        ) from exc
