"""semantic_search: index fields, per-put index, scores as PostgresStore defines them.

The model is `fixtures.embed_text` (hashing bag of words, 32 dims); expected scores are
computed from it directly: cosine similarity, minus the L2 distance, the inner product.
"""

from __future__ import annotations

from typing import Any, cast

import pytest
from langgraph.store.memory import InMemoryStore

from conformance.store._registry import case
from conformance.store.api import StoreFactory
from conformance.store.fixtures import (
    DIMS,
    CountingEmbeddings,
    aembed_texts,
    embed_texts,
    expected_score,
    index,
    key_set,
    keys,
)

TOLERANCE = 1e-3
DOCS: dict[str, dict[str, Any]] = {
    "doc1": {"text": "red apple pie", "color": "red", "score": 4.5},
    "doc2": {"text": "red sports car", "color": "red", "score": 3.0},
    "doc3": {"text": "green apple tree", "color": "green", "score": 4.0},
    "doc4": {"text": "blue car wash", "color": "blue", "score": 3.5},
}


def _approx(value: float) -> object:
    return pytest.approx(value, abs=TOLERANCE)


@case("semantic_search")
def query_ranks_by_cosine_score(factory: StoreFactory) -> None:
    with factory.open(index=index(["text"])) as api:
        for key, value in DOCS.items():
            api.put(("docs",), key, value)
        found = api.search(("docs",), query="apple")
        assert keys(found)[:2] in (["doc1", "doc3"], ["doc3", "doc1"])
        assert len(found) == 4, "every embedded item is ranked"
        for item in found:
            assert item.score == _approx(expected_score("apple", item.value["text"], "cosine"))
        scores = [item.score for item in found]
        assert scores == sorted(scores, reverse=True)


@case("semantic_search")
def scores_follow_each_distance_type(factory: StoreFactory) -> None:
    for distance in ("cosine", "l2", "inner_product"):
        with factory.open(index=index(["text"], distance)) as api:
            for key, value in DOCS.items():
                api.put(("scores", distance), key, value)
            for query in ("red car", "apple", "nothing in common", "car car wash"):
                found = api.search(("scores", distance), query=query)
                expected = {k: expected_score(query, v["text"], distance) for k, v in DOCS.items()}
                got = {item.key: item.score for item in found}
                assert got == {k: _approx(s) for k, s in expected.items()}, (distance, query)
                assert [i.score for i in found] == sorted(got.values(), reverse=True)


@case("semantic_search")
def query_with_filter_prefix_and_paging(factory: StoreFactory) -> None:
    with factory.open(index=index(["text"])) as api:
        for key, value in DOCS.items():
            api.put(("docs", "a"), key, value)
        api.put(("docs", "b"), "other", {"text": "red apple", "color": "red"})
        api.put(("elsewhere",), "far", {"text": "apple apple", "color": "red"})
        found = api.search(("docs", "a"), query="apple", filter={"color": "red"})
        assert keys(found) == ["doc1", "doc2"]
        found = api.search(("docs",), query="apple", filter={"color": "red"})
        assert keys(found)[0] == "other" and key_set(found) == {"doc1", "doc2", "other"}
        found = api.search(("docs",), query="car", filter={"score": {"$gt": 3.2}})
        assert keys(found)[0] == "doc4" and key_set(found) == {"doc1", "doc3", "doc4"}
        found = api.search(
            ("docs",), query="apple", filter={"score": {"$gte": 4.0}, "color": "green"}
        )
        assert keys(found) == ["doc3"]
        everything = keys(api.search((), query="apple", limit=100))
        assert len(everything) == 6
        paged = [keys(api.search((), query="apple", limit=2, offset=o)) for o in (0, 2, 4, 6)]
        assert sum(paged, []) == everything and paged[-1] == []


@case("semantic_search")
def search_without_query_is_unscored_newest_first(factory: StoreFactory) -> None:
    with factory.open(index=index(["text"])) as api:
        api.put(("docs",), "a", {"text": "one"})
        api.put(("docs",), "b", {"text": "two"}, index=False)
        api.put(("docs",), "c", {"text": "three"})
        for found in (api.search(("docs",)), api.search(("docs",), query="")):
            assert keys(found) == ["c", "b", "a"]
            assert all(item.score is None for item in found)


@case("semantic_search")
def unindexed_items_are_left_out_of_a_query_search(factory: StoreFactory) -> None:
    with factory.open(index=index(["text"])) as api:
        api.put(("docs",), "indexed", {"text": "new text about dogs"})
        api.put(("docs",), "skipped", {"text": "new text about dogs"}, index=False)
        api.put(("docs",), "no-field", {"body": "new text about dogs"})
        assert keys(api.search(("docs",), query="new text about dogs")) == ["indexed"]
        assert api.get(("docs",), "skipped").value == {"text": "new text about dogs"}


@case("semantic_search")
def index_fields_and_per_put_paths(factory: StoreFactory) -> None:
    with factory.open(index=index(["key0", "key1", "key3"])) as api:
        api.put(("t",), "doc1", {"key1": "xxx", "key2": "yyy", "key3": "zzz"})  # no key0: fine
        api.put(("t",), "doc2", {"key0": "uuu", "key1": "vvv", "key2": "www", "key3": "xxx"})
        found = api.search(("t",), query="xxx")
        assert key_set(found) == {"doc1", "doc2"}
        assert found[0].score == _approx(1.0) and found[1].score == _approx(1.0)
        assert keys(api.search(("t",), query="uuu"))[0] == "doc2"
        assert keys(api.search(("t",), query="zzz"))[0] == "doc1"
        assert all(i.score < 0.5 for i in api.search(("t",), query="www")), "key2 not indexed"
        # a per-put index replaces the configured fields
        api.put(("p",), "doc3", {"key0": "aaa", "key1": "bbb", "key2": "ccc"}, index=["key2"])
        assert api.search(("p",), query="ccc")[0].score == _approx(1.0)
        assert api.search(("p",), query="aaa")[0].score < 0.5
        # per-put paths the value lacks are skipped while one of them holds text (SqliteStore)
        api.put(("q",), "doc4", {"key0": "aaa"}, index=["key0", "key1"])
        assert api.search(("q",), query="aaa")[0].score == _approx(1.0)


@case("semantic_search")
def wildcard_and_nested_index_paths(factory: StoreFactory) -> None:
    value = {
        "title": "garden notes",
        "meta": {"summary": "tomatoes and basil"},
        "sections": [{"text": "watering schedule"}, {"text": "pruning roses"}],
    }
    with factory.open(index=index(["sections[*].text"])) as api:
        api.put(("n",), "doc", value)
        api.put(("n",), "other", {"sections": [{"text": "car engines"}]})
        for query in ("watering schedule", "pruning roses"):
            found = api.search(("n",), query=query)
            assert keys(found)[0] == "doc" and found[0].score == _approx(1.0), query
        api.put(("m",), "doc", value, index=["meta.summary", "title"])
        for query in ("tomatoes and basil", "garden notes"):
            assert api.search(("m",), query=query)[0].score == _approx(1.0), query
        assert api.search(("m",), query="pruning roses")[0].score < 0.5


@case("semantic_search")
def updates_re_embed_only_changed_texts(factory: StoreFactory) -> None:
    model = CountingEmbeddings()
    with factory.open(index=index(["title", "body"], embed=model)) as api:
        api.put(("docs",), "k", {"title": "zany zebra", "body": "first body"})
        assert sorted(model.documents) == ["first body", "zany zebra"]
        model.documents.clear()
        api.put(("docs",), "k", {"title": "zany zebra", "body": "second body", "n": 1})
        assert model.documents == ["second body"], "an unchanged title is not embedded again"
        model.documents.clear()
        api.put(("docs",), "k", {"title": "zany zebra", "body": "second body", "n": 2})
        assert model.documents == []
        found = api.search(("docs",), query="second body")
        assert found[0].score == _approx(1.0)
        api.put(("docs",), "k", {"title": "calm horse", "body": "second body"})
        assert api.search(("docs",), query="zany zebra")[0].score < 0.5
        assert api.search(("docs",), query="calm horse")[0].score == _approx(1.0)


@case("semantic_search")
def plain_sync_and_async_callables_embed(factory: StoreFactory) -> None:
    embed = embed_texts if factory.mode == "sync" else aembed_texts
    with factory.open(index={"dims": DIMS, "embed": embed, "fields": ["text"]}) as api:
        api.put(("f",), "a", {"text": "the quick brown fox"})
        api.put(("f",), "b", {"text": "lazy dogs sleep"})
        found = api.search(("f",), query="quick fox")
        assert keys(found) == ["a", "b"]
        assert found[0].score == _approx(
            expected_score("quick fox", "the quick brown fox", "cosine")
        )


@case("semantic_search")
def non_ascii_texts_rank_themselves_first(factory: StoreFactory) -> None:
    texts = {
        "1": "这是中文",
        "2": "これは日本語です",
        "3": "이건 한국어야",
        "4": "Это русский",
        "5": "यह रूसी है",
    }
    with factory.open(index=index(["text"])) as api:
        for key, text in texts.items():
            api.put(("user_123", "memories"), key, {"text": text})
        for key, text in texts.items():
            assert api.search(("user_123", "memories"), query=text)[0].key == key, text


@case("semantic_search")
def top_k_matches_in_memory_store(factory: StoreFactory) -> None:
    corpus = [
        "the cat sat on the mat",
        "dogs chase cats",
        "a cat and a dog",
        "stock market news",
        "the market for cat food",
        "weather is sunny today",
        "sunny beaches and cats",
        "dog food recipes",
        "news about the weather",
        "mat cleaning tips",
    ]
    reference = InMemoryStore(index={"dims": DIMS, "embed": embed_texts, "fields": ["text"]})
    with factory.open(index=index(["text"])) as api:
        for i, text in enumerate(corpus):
            api.put(("c",), f"k{i}", {"text": text, "i": i})
            reference.put(("c",), f"k{i}", {"text": text, "i": i})
        for query in ("cat", "sunny weather", "dog food", "market news"):
            ours = api.search(("c",), query=query, limit=4)
            theirs = reference.search(("c",), query=query, limit=4)
            assert [i.score for i in ours] == [_approx(cast(float, t.score)) for t in theirs], query
            # equal scores may come in either order; the set of each score tier must agree
            assert {(round(cast(float, i.score), 3), i.key) for i in ours} <= {
                (round(cast(float, t.score), 3), t.key)
                for t in reference.search(("c",), query=query, limit=20)
            }, query


@case("semantic_search")
def index_config_is_exposed(factory: StoreFactory) -> None:
    model = CountingEmbeddings()
    with factory.open(index=index(["text"], "l2", embed=model)) as api:
        config = api.store.index_config
        assert config is not None
        assert config["dims"] == DIMS and config["embed"] is model
        assert config["fields"] == ["text"] and config["distance_type"] == "l2"
