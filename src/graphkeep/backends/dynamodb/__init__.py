"""The DynamoDB backend: savers, store, node cache and run event log on one DynamoDB table.

Re-exports only: the savers and the checkpoint port (:mod:`.checkpoint`), the BaseStore
(:mod:`.store`), the node cache (:mod:`.cache`), the event log (:mod:`.events`) and the client
helpers (:mod:`.client`: ``parse_url``, ``sync_client``, ``async_client``). The table is
described in :mod:`.schema`; how each product maps onto it is in its module's docstring and
in docs/architecture.md.
"""

from __future__ import annotations

from graphkeep.backends.dynamodb.cache import AsyncDynamoDBCache, DynamoDBCache
from graphkeep.backends.dynamodb.checkpoint import (
    SAVER_OPTIONS,
    AsyncDynamoDBSaver,
    DynamoDBCheckpointPort,
    DynamoDBSaver,
)
from graphkeep.backends.dynamodb.client import (
    CLIENT_OPTIONS,
    async_client,
    client_options,
    parse_url,
    sync_client,
)
from graphkeep.backends.dynamodb.events import AsyncDynamoDBEventLog, DynamoDBEventLog
from graphkeep.backends.dynamodb.schema import table_definition
from graphkeep.backends.dynamodb.store import AsyncDynamoDBStore, DynamoDBStore

__all__ = [
    "CLIENT_OPTIONS",
    "SAVER_OPTIONS",
    "AsyncDynamoDBCache",
    "AsyncDynamoDBEventLog",
    "AsyncDynamoDBSaver",
    "AsyncDynamoDBStore",
    "DynamoDBCache",
    "DynamoDBCheckpointPort",
    "DynamoDBEventLog",
    "DynamoDBSaver",
    "DynamoDBStore",
    "async_client",
    "client_options",
    "parse_url",
    "sync_client",
    "table_definition",
]
