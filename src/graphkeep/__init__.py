"""graphkeep: production LangGraph checkpoint savers for Redis, MongoDB and DynamoDB.

import graphkeep

with graphkeep.connect("redis://localhost:6379/0", ttl=86400) as saver:
    graph = builder.compile(checkpointer=saver)

async with graphkeep.aconnect("redis+cluster://10.0.0.5:7000") as saver:
    graph = builder.compile(checkpointer=saver)
"""

from __future__ import annotations

from graphkeep.connect import (
    BACKENDS,
    aconnect,
    aconnect_cache,
    aconnect_events,
    aconnect_store,
    connect,
    connect_cache,
    connect_events,
    connect_store,
)
from graphkeep.errors import GraphkeepError

__version__ = "0.1.0"

__all__ = [
    "BACKENDS",
    "GraphkeepError",
    "__version__",
    "aconnect",
    "aconnect_cache",
    "aconnect_events",
    "aconnect_store",
    "connect",
    "connect_cache",
    "connect_events",
    "connect_store",
]
