"""metadata: what `put` stores as metadata and how `list(filter=)` matches it (contract s2, s5)."""

from __future__ import annotations

from typing import Any

from langchain_core.runnables import RunnableConfig

from conformance.factory import SaverFactory
from conformance.spec._registry import case
from conformance.spec.fixtures import (
    checkpoint,
    config,
    ids,
    metadata,
    must_get,
    new_thread,
    put_one,
)


@case("metadata")
def put_merges_scalar_config_entries_that_are_not_excluded_or_private(
    factory: SaverFactory,
) -> None:
    thread = new_thread()
    conf: RunnableConfig = config(thread)
    conf["configurable"].update(
        {
            "run_id": "run-123",  # run_id reaches metadata only this way
            "tenant": "acme\x00corp",
            "n": 1.5,
            "flag": True,
            "__secret": "hidden",
            "checkpoint_map": {"": "x"},
            "langgraph_step": 3,
            "nested": {"not": "scalar"},
            "source": "from-configurable",  # present in metadata already: not overridden
        }
    )
    conf["metadata"] = {"user": "u1", "score": 7, "step": 99, "items": [1]}
    with factory.open() as api:
        stored = api.put(conf, checkpoint(), metadata(1, "loop"), {})
        got = must_get(api, stored).metadata
    expected = {
        "source": "loop",
        "step": 1,
        "parents": {},
        "run_id": "run-123",
        "tenant": "acmecorp",
        "n": 1.5,
        "flag": True,
        "user": "u1",
        "score": 7,
    }
    assert dict(got) == expected, got


def _round_trip(factory: SaverFactory, meta: dict[str, Any]) -> dict[str, Any]:
    with factory.open() as api:
        stored = put_one(api, new_thread(), meta=meta)  # type: ignore[arg-type]
        return dict(must_get(api, stored).metadata)


@case("metadata")
def put_strips_nul_from_top_level_strings(factory: SaverFactory) -> None:
    got = _round_trip(factory, {"source": "lo\x00op", "step": 0, "note": "a\x00b\x00"})
    assert got["source"] == "loop" and got["note"] == "ab", got


@case("metadata")
def metadata_without_source_round_trips(factory: SaverFactory) -> None:
    assert _round_trip(factory, {"step": -2}) == {"step": -2}


@case("metadata")
def metadata_numbers_come_back_as_int_and_float(factory: SaverFactory) -> None:
    meta = {"source": "loop", "step": -1, "big": 2**53 + 1, "ratio": 0.25, "whole": 3.0}
    got = _round_trip(factory, meta)
    assert got == meta
    for key, value in meta.items():
        assert type(got[key]) is type(value), f"{key}: {got[key]!r} is {type(got[key]).__name__}"


NESTED = {"a": 1, "b": [1, 2, {"c": "d"}], "e": {"f": None, "g": {"h": [True, 1.5]}}}


@case("metadata")
def metadata_nested_values_round_trip(factory: SaverFactory) -> None:
    meta = {"source": "loop", "step": 0, "nested": NESTED, "parents": {"": "x", "a:1": "y"}}
    assert _round_trip(factory, meta) == meta


@case("metadata")
def list_filter_matches_a_custom_top_level_key(factory: SaverFactory) -> None:
    thread = new_thread()
    with factory.open() as api:
        wanted = put_one(api, thread, meta=metadata(0, tenant="acme", tier=2))
        put_one(api, thread, meta=metadata(1, tenant="other", tier=2))
        assert ids(api.list(config(thread), filter={"tenant": "acme"})) == ids([wanted])
        assert ids(api.list(None, filter={"tenant": "acme", "tier": 2})) == ids([wanted])
        assert api.list(config(thread), filter={"tenant": "nobody"}) == []


@case("metadata")
def list_filter_matches_a_nested_value_by_deep_equality(factory: SaverFactory) -> None:
    thread = new_thread()
    other = {**NESTED, "a": 2}
    with factory.open() as api:
        wanted = put_one(api, thread, meta=metadata(0, nested=NESTED))
        put_one(api, thread, meta=metadata(1, nested=other))
        assert ids(api.list(config(thread), filter={"nested": NESTED})) == ids([wanted])
        assert len(api.list(config(thread), filter={"nested": other})) == 1
        assert api.list(config(thread), filter={"nested": {**NESTED, "a": 3}}) == []
