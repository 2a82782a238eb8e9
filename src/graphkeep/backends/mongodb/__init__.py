"""graphkeep on MongoDB (PyMongo ``>=4.13.2``): savers, store, node cache and run event log.

Each product runs on ``pymongo.MongoClient`` (sync) or PyMongo's native
``pymongo.AsyncMongoClient`` (async; no motor, no thread hops). Construct from an existing
client or with ``from_url`` as a context manager::

    with MongoDBSaver.from_url("mongodb://localhost:27017/mydb") as saver:
        graph = builder.compile(checkpointer=saver)

    async with AsyncMongoDBSaver.from_url("mongodb+srv://user:pw@cluster0.example.net/") as saver:
        ...

    saver = MongoDBSaver(MongoClient(...), db_name="graphkeep", ttl=86400)
    saver.setup()

The database comes from the URL path (default ``graphkeep``); query-string options go
to the client. The mapping: :mod:`.checkpoint` (the saver's layout, its port and the
savers), :mod:`.store`, :mod:`.cache`, :mod:`.events`; the driver side in :mod:`.client`.
See docs/architecture.md.
"""

from graphkeep.backends.mongodb.cache import AsyncMongoDBCache, MongoDBCache
from graphkeep.backends.mongodb.checkpoint import (
    AsyncMongoDBSaver,
    MongoDBCheckpointPort,
    MongoDBSaver,
)
from graphkeep.backends.mongodb.events import AsyncMongoDBEventLog, MongoDBEventLog
from graphkeep.backends.mongodb.requests import Command
from graphkeep.backends.mongodb.schema import index_specs
from graphkeep.backends.mongodb.store import AsyncMongoDBStore, MongoDBStore

__all__ = [
    "AsyncMongoDBCache",
    "AsyncMongoDBEventLog",
    "AsyncMongoDBSaver",
    "AsyncMongoDBStore",
    "Command",
    "MongoDBCache",
    "MongoDBCheckpointPort",
    "MongoDBEventLog",
    "MongoDBSaver",
    "MongoDBStore",
    "index_specs",
]
