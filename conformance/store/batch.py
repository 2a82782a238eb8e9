"""batch: results in op order, reads see the store as it was before the batch's puts."""

from __future__ import annotations

from langgraph.store.base import GetOp, Item, ListNamespacesOp, PutOp, SearchOp

from conformance.store._registry import case
from conformance.store.api import StoreFactory
from conformance.store.fixtures import keys


@case("batch")
def results_come_back_in_op_order(factory: StoreFactory) -> None:
    with factory.open() as api:
        api.put(("test", "foo"), "key1", {"data": "value1"})
        api.put(("test", "bar"), "key2", {"data": "value2"})
        results = api.batch(
            [
                GetOp(("test", "foo"), "key1"),
                PutOp(("test", "bar"), "key2", {"data": "value2"}),
                SearchOp(("test",), filter={"data": "value1"}, limit=10, offset=0),
                ListNamespacesOp(match_conditions=None, max_depth=None, limit=10, offset=0),
                GetOp(("test",), "key3"),
            ]
        )
        assert len(results) == 5
        assert isinstance(results[0], Item) and results[0].value == {"data": "value1"}
        assert results[1] is None
        assert keys(results[2]) == ["key1"]
        assert sorted(results[3]) == [("test", "bar"), ("test", "foo")]
        assert results[4] is None


@case("batch")
def reads_in_a_batch_do_not_see_its_puts(factory: StoreFactory) -> None:
    with factory.open() as api:
        api.put(("ns",), "old", {"v": 1})
        results = api.batch(
            [
                PutOp(("ns",), "old", {"v": 2}),
                PutOp(("ns",), "new", {"v": 3}),
                GetOp(("ns",), "old"),
                GetOp(("ns",), "new"),
                SearchOp(("ns",), limit=10),
                ListNamespacesOp(limit=10),
                PutOp(("other",), "k", {"v": 4}),
            ]
        )
        assert results[2].value == {"v": 1}
        assert results[3] is None
        assert keys(results[4]) == ["old"]
        assert results[5] == [("ns",)]
        assert api.get(("ns",), "old").value == {"v": 2}
        assert api.get(("ns",), "new").value == {"v": 3}
        assert api.get(("other",), "k").value == {"v": 4}


@case("batch")
def the_last_put_of_a_key_in_a_batch_wins(factory: StoreFactory) -> None:
    with factory.open() as api:
        api.batch([PutOp(("ns",), "k", {"v": 1}), PutOp(("ns",), "k", {"v": 2})])
        assert api.get(("ns",), "k").value == {"v": 2}
        api.batch([PutOp(("ns",), "k", {"v": 3}), PutOp(("ns",), "k", None)])
        assert api.get(("ns",), "k") is None
        api.batch([PutOp(("ns",), "k", None), PutOp(("ns",), "k", {"v": 4})])
        assert api.get(("ns",), "k").value == {"v": 4}


@case("batch")
def puts_and_deletes_in_one_batch(factory: StoreFactory) -> None:
    with factory.open() as api:
        api.put(("test",), "key3", {"data": "value3"})
        results = api.batch(
            [
                PutOp(("test",), "key1", {"data": "value1"}),
                PutOp(("test",), "key2", {"data": "value2"}),
                PutOp(("test",), "key3", None),
            ]
        )
        assert results == [None, None, None]
        assert api.get(("test",), "key1").value == {"data": "value1"}
        assert api.get(("test",), "key2").value == {"data": "value2"}
        assert api.get(("test",), "key3") is None


@case("batch")
def a_batch_of_100_gets_answers_each_in_order(factory: StoreFactory) -> None:
    with factory.open() as api:
        api.batch([PutOp(("many", f"n{i % 7}"), f"k{i}", {"i": i}) for i in range(0, 100, 2)])
        results = api.batch([GetOp(("many", f"n{i % 7}"), f"k{i}") for i in range(100)])
        assert len(results) == 100
        for i, item in enumerate(results):
            if i % 2:
                assert item is None, (i, item)
            else:
                assert item is not None and item.key == f"k{i}" and item.value == {"i": i}


@case("batch")
def several_searches_in_one_batch(factory: StoreFactory) -> None:
    with factory.open() as api:
        api.put(("test", "foo"), "key1", {"data": "value1", "tag": "a"})
        api.put(("test", "bar"), "key2", {"data": "value2", "tag": "a"})
        api.put(("test", "baz"), "key3", {"data": "value3", "tag": "b"})
        results = api.batch(
            [
                SearchOp(("test",), filter={"tag": "a"}, limit=10, offset=0),
                SearchOp(("test",), filter=None, limit=2, offset=0),
                SearchOp(("test", "foo"), filter=None, limit=10, offset=0),
                GetOp(("test", "baz"), "key3"),
            ]
        )
        assert sorted(keys(results[0])) == ["key1", "key2"]
        assert keys(results[1]) == ["key3", "key2"]
        assert keys(results[2]) == ["key1"]
        assert results[3].value == {"data": "value3", "tag": "b"}
