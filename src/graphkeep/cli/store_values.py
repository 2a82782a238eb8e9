"""What ``graphkeep store`` reads and prints: namespaces as text, ``--filter``, the embedding
flags, items as JSON, and a store's items page by page.

A namespace is written with its labels joined by ``/`` (``users/alice/memories``), or as a
JSON array of labels (``'["team/a", "notes"]'``) when a label holds a ``/`` or the text
starts with ``[``. ``/`` alone (or ``[]``) is the root: every namespace.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator, Sequence
from typing import Any

from langgraph.store.base import BaseStore, InvalidNamespaceError, Item

from graphkeep.cli.arguments import positive
from graphkeep.cli.console import UsageError, safe_url
from graphkeep.cli.endpoints import scheme_of
from graphkeep.errors import InvalidInput
from graphkeep.moving.openers import SQLITE_SCHEMES
from graphkeep.store.filters import compile_filter
from graphkeep.store.validation import DEFAULT_MAX_KEY_BYTES, check_namespace

Namespace = tuple[str, ...]
#: items read, compared and written per store round trip
PAGE_SIZE = 200
#: how much of a value a table row shows
VALUE_WIDTH = 60

NAMESPACE_HELP = 'labels joined by "/" (users/alice), or a JSON array of labels (\'["a/b","c"]\')'


# -- namespaces and filters ------------------------------------------------------------


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


def parse_filter(text: str | None) -> dict[str, Any] | None:
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


# -- embeddings ------------------------------------------------------------------------


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


def index_flags(parser: argparse.ArgumentParser, whose: str) -> None:
    """``--embed``, ``--dims``, ``--field`` (read back by :func:`index_options`)."""
    group = parser.add_argument_group(f"embeddings ({whose})")
    group.add_argument(
        "--embed",
        metavar="MODEL",
        help="provider:model for LangGraph's init_embeddings, or package.module:function",
    )
    group.add_argument("--dims", type=positive, metavar="N", help="the model's vector size")
    group.add_argument(
        "--field", action="append", metavar="PATH", help="value path to embed (repeatable)"
    )


# -- items -----------------------------------------------------------------------------


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


def short_value(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return text if len(text) <= VALUE_WIDTH else text[: VALUE_WIDTH - 3] + "..."


def store_label(url: str, key_prefix: str | None) -> str:
    # SQLite URLs carry no secret; printed as given (safe_url would re-assemble them)
    shown = url if scheme_of(url) in SQLITE_SCHEMES else safe_url(url)
    return shown + (f" (key prefix {key_prefix})" if key_prefix else "")
