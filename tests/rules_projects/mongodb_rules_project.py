"""A user's project for tests/test_service_rules.py: each test breaks one MongoDB-family rule
on purpose (or none), on the real server; run by pytest with --graphkeep-rules."""

import os
import threading
import time
import uuid

import pymongo
import pytest

MONGODB_URI = os.environ["MONGODB_URI"]


@pytest.fixture
def db():
    name = f"gkrules_{uuid.uuid4().hex[:8]}"
    client = pymongo.MongoClient(MONGODB_URI)
    yield client[name]
    client.drop_database(name)
    client.close()


def attempt(call, *args, **kwargs):
    """The service (here FerretDB) may refuse it too: the rule fires all the same."""
    try:
        return call(*args, **kwargs)
    except pymongo.errors.PyMongoError:
        return None


def test_expr(db):
    attempt(db.c.find_one, {"$expr": {"$eq": ["$a", 1]}})


def test_where(db):
    attempt(db.c.find_one, {"$where": "this.a == 1"})


def test_json_schema(db):
    attempt(db.c.find_one, {"$jsonSchema": {"required": ["a"]}})


def test_pipeline_update(db):
    attempt(db.c.update_one, {"a": 1}, [{"$addFields": {"b": 1}}])


def test_now(db):
    attempt(lambda: list(db.c.aggregate([{"$addFields": {"t": "$$NOW"}}])))


@pytest.mark.parametrize(
    "stage",
    [
        {"$unionWith": "other"},
        {"$merge": {"into": "other"}},
        {
            "$graphLookup": {
                "from": "c",
                "startWith": "$a",
                "connectFromField": "a",
                "connectToField": "b",
                "as": "g",
            }
        },
        {"$setWindowFields": {"sortBy": {"a": 1}, "output": {"n": {"$sum": 1}}}},
        {"$set": {"b": 1}},
        {"$unset": "b"},
        {"$densify": {"field": "a", "range": {"step": 1, "bounds": "full"}}},
        {"$fill": {"output": {"a": {"value": 0}}}},
    ],
    ids=lambda s: next(iter(s)),
)
def test_stage(db, stage):
    attempt(lambda: list(db.c.aggregate([stage])))


def test_function(db):
    body = {"$function": {"body": "function() { return 1 }", "args": [], "lang": "js"}}
    attempt(lambda: list(db.c.aggregate([{"$project": {"x": body}}])))


def test_accumulator(db):
    acc = {
        "$accumulator": {
            "init": "function() { return 0 }",
            "accumulate": "function(s) { return s }",
            "accumulateArgs": [],
            "merge": "function(a) { return a }",
            "lang": "js",
        }
    }
    attempt(lambda: list(db.c.aggregate([{"$group": {"_id": None, "x": acc}}])))


@pytest.mark.parametrize(
    "keys, options",
    [
        ([("a", 1)], {"partialFilterExpression": {"a": {"$gt": 1}}}),
        ([("a", "hashed")], {}),
        ([("$**", 1)], {}),
        ([("a", "text")], {}),
        ([("a", 1)], {"sparse": True}),
    ],
    ids=["partial", "hashed", "wildcard", "text", "sparse"],
)
def test_index_kind(db, keys, options):
    attempt(db.c.create_index, keys, **options)


def test_ttl_collmod(db):
    attempt(db.c.create_index, "t", expireAfterSeconds=60)  # FerretDB 1.24 has no TTL index
    attempt(db.command, "collMod", "c", index={"keyPattern": {"t": 1}, "expireAfterSeconds": 30})


def test_two_index_builds_at_once(db):
    """Builds on one collection from several threads (a setup() that starts them at once):
    four, so that on a loaded machine at least two are still in flight together (CI saw two
    builds of 20,000 documents run one after the other)."""
    keys = ("a", "b", "c", "d")
    db.c.insert_many([dict.fromkeys(keys, i) for i in range(20000)])  # builds that take a while
    barrier = threading.Barrier(len(keys))

    def build(key):
        barrier.wait()
        attempt(db.c.create_index, key)

    threads = [threading.Thread(target=build, args=(k,)) for k in keys]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def test_unique_index_on_a_collection_with_data(db):
    db.c.insert_one({"k": 1})
    db.c.create_index("k", unique=True)


def test_transaction_over_30_seconds(db):
    db.c.insert_one({"k": 0})
    with db.client.start_session() as session:
        session.start_transaction()
        attempt(db.c.insert_one, {"k": 1}, session=session)
        time.sleep(31)
        attempt(db.c.insert_one, {"k": 2}, session=session)
        attempt(session.abort_transaction)


# -- what the services accept passes


def test_accepted_requests(db):
    db.c.create_index("k", unique=True)  # before any document: Cosmos RU accepts it
    db.c.create_index("t")  # one build after the other
    db.c.insert_one({"k": 1, "t": 1})
    db.c.update_one({"k": 1}, {"$set": {"b": 1}, "$unset": {"t": ""}})  # operators, not stages
    assert db.c.find_one({"k": {"$in": [1]}}, {"_id": 0, "k": 1}) == {"k": 1}
    list(db.c.aggregate([{"$match": {"k": 1}}, {"$project": {"k": 1}}, {"$sort": {"k": 1}}]))


async def test_async_client_is_checked_too():
    from pymongo import AsyncMongoClient

    client = AsyncMongoClient(MONGODB_URI)
    try:
        await client["gkrules_async"]["c"].find_one({"$where": "true"})
    except pymongo.errors.PyMongoError:
        pass
    await client.close()
