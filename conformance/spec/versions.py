"""versions: `get_next_version` strings (contract s6) and fork safety of blob keys (invariant 3)."""

from __future__ import annotations

from typing import Any

from conformance.factory import SaverFactory
from conformance.spec._registry import case
from conformance.spec.fixtures import (
    checkpoint,
    checkpoint_id_of,
    config,
    metadata,
    must_get,
    new_thread,
)


def _number(version: Any) -> int:
    assert isinstance(version, str), f"versions must be str, got {type(version).__name__}"
    return int(version.split(".")[0])


@case("versions")
def next_version_strings_sort_lexicographically_in_numeric_order(factory: SaverFactory) -> None:
    with factory.open() as api:
        assert _number(api.next_version(None)) == 1
        assert _number(api.next_version("00000000000000000000000000000001.0.123")) == 2
        assert _number(api.next_version(5)) == 6
        chain = [api.next_version(None)]
        for _ in range(11):  # past 9 -> 10, where unpadded strings would sort wrong
            chain.append(api.next_version(chain[-1]))
        assert [_number(v) for v in chain] == list(range(1, 13))
        assert sorted(chain) == chain, f"string order differs from numeric order: {chain}"
        assert api.next_version(chain[-1]) > chain[-1]


@case("versions")
def forks_of_one_checkpoint_get_distinct_versions_and_keep_their_values(
    factory: SaverFactory,
) -> None:
    thread = new_thread()
    with factory.open() as api:
        base_version = api.next_version(None)
        base = api.put(
            config(thread),
            checkpoint({"x": "base"}, {"x": base_version}),
            metadata(0),
            {"x": base_version},
        )
        forks = []
        for value in ("fork-1", "fork-2"):
            version = api.next_version(base_version)
            parent = config(thread, "", checkpoint_id_of(base))
            cp = checkpoint({"x": value}, {"x": version})
            forks.append((api.put(parent, cp, metadata(1), {"x": version}), version, value))
        assert forks[0][1] != forks[1][1], "two forks of one checkpoint got the same version"
        for stored, _, value in forks:
            assert must_get(api, stored).checkpoint["channel_values"] == {"x": value}
        assert must_get(api, base).checkpoint["channel_values"] == {"x": "base"}
