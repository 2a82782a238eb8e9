"""bad_input: every invalid call raises (graphkeep.errors or InvalidNamespaceError) and a batch
holding one bad op writes nothing at all."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from langgraph.store.base import InvalidNamespaceError, PutOp, SearchOp

from conformance.store._registry import case
from conformance.store.api import StoreApi, StoreFactory
from conformance.store.fixtures import DIMS, CountingEmbeddings, index
from graphkeep.errors import GraphkeepError

REJECTED = (GraphkeepError, InvalidNamespaceError)
GOOD = PutOp(("ok",), "good", {"v": 1})


def _rejects(api: StoreApi, bad: Any, errors: tuple[type[Exception], ...] = REJECTED) -> None:
    """`bad` (an op, or a call) is rejected, and the good put batched before it not written."""
    call: Callable[[], Any] = bad if callable(bad) else lambda: api.batch([GOOD, bad])
    try:
        call()
    except errors:
        pass
    else:
        raise AssertionError(f"accepted bad input {bad!r}")
    assert api.get(("ok",), "good") is None, f"{bad!r}: the batch wrote before failing"
    assert api.list_namespaces() == [], f"{bad!r}: something was written"


@case("bad_input")
def bad_namespaces_are_rejected(factory: StoreFactory) -> None:
    with factory.open() as api:
        namespaces: list[Any] = [
            (),
            ("a.b",),
            ("ok", 1),
            ("ok", None),
            ("",),
            ("ok", ""),
            "string",
            None,
            ("nul\x00",),
        ]
        for namespace in namespaces:
            _rejects(api, PutOp(namespace, "k", {"v": 1}), (InvalidNamespaceError,))
        _rejects(api, lambda: api.get(("a.b",), "k"), (InvalidNamespaceError,))
        # the reserved root is refused by put only, as LangGraph's BaseStore does: a batch
        # may write under it (tests/test_store_langgraph_root.py)
        _rejects(api, lambda: api.put(("langgraph", "x"), "k", {"v": 1}), (InvalidNamespaceError,))
        _rejects(api, lambda: api.search(("ok", 2)), (InvalidNamespaceError,))


@case("bad_input")
def bad_keys_and_values_are_rejected(factory: StoreFactory) -> None:
    with factory.open() as api:
        bad_keys: list[Any] = [1, None, b"bytes", ("t",), ""]
        bad_values: list[Any] = ["text", 1, ["list"], ("tuple",), {"v": object()}, {"v": {1, 2}}]
        for key in bad_keys:
            _rejects(api, PutOp(("ok", "x"), key, {"v": 1}))
        for value in bad_values:
            _rejects(api, PutOp(("ok", "x"), "k", value))
        _rejects(api, PutOp(("ok", "x"), "k", {"v": 1}, ttl=-1))
        _rejects(api, PutOp(("ok", "x"), "k", {"v": 1}, index="text"))  # type: ignore[arg-type]


@case("bad_input")
def bad_filters_are_rejected(factory: StoreFactory) -> None:
    with factory.open() as api:
        filters: list[Any] = [
            {"score": {"$regex": "x"}},
            {"score": {"$in": [1, 2]}},
            {"$or": [{"a": 1}]},
            {"$eq": 1},
            {"score": {"$gt": [1]}},
            {"score": {"$lt": None}},
            {"a..b": 1},
        ]
        for filter in filters:
            _rejects(api, SearchOp(("ok",), filter=filter))
        pages: list[dict[str, Any]] = [{"limit": -1}, {"offset": -1}, {"limit": "10"}]
        for page in pages:
            _rejects(api, SearchOp(("ok",), **page))


@case("bad_input")
def bad_index_paths_and_embeddings_are_rejected(factory: StoreFactory) -> None:
    with factory.open(index=index(["text"])) as api:
        _rejects(api, PutOp(("ok", "x"), "k", {"text": "hello"}, index=["missing.path"]))
    wrong = CountingEmbeddings(dims=DIMS + 3)
    with factory.open(index={"dims": DIMS, "embed": wrong, "fields": ["text"]}) as api:
        _rejects(api, PutOp(("ok", "x"), "k", {"text": "hello"}))
        _rejects(api, lambda: api.search(("ok",), query="hello"))


@case("bad_input")
def bad_options_are_rejected_when_the_store_is_made(factory: StoreFactory) -> None:
    bad_options: list[dict[str, Any]] = [
        {"index": {"dims": 0, "embed": CountingEmbeddings()}},
        {"index": {"dims": DIMS}},
        {"index": {"dims": DIMS, "embed": CountingEmbeddings(), "distance_type": "hamming"}},
        {"ttl": {"default_ttl": -5}},
        {"ttl": {"refresh": True}},
    ]
    for options in bad_options:
        try:
            with factory.open(**options):
                pass
        except REJECTED:
            continue
        raise AssertionError(f"accepted bad options {options!r}")
