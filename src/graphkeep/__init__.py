"""graphkeep: production LangGraph checkpoint savers for Redis, MongoDB and DynamoDB.

import graphkeep

with graphkeep.connect("redis://localhost:6379/0", ttl=86400) as saver:
    graph = builder.compile(checkpointer=saver)

async with graphkeep.aconnect("redis+cluster://10.0.0.5:7000") as saver:
    graph = builder.compile(checkpointer=saver)
"""

from __future__ import annotations

from typing import Any

from graphkeep.connect import (
    BACKENDS,
    aconnect,
    aconnect_cache,
    aconnect_effects,
    aconnect_events,
    aconnect_store,
    connect,
    connect_cache,
    connect_effects,
    connect_events,
    connect_store,
)
from graphkeep.errors import GraphkeepError
from graphkeep.hot import hot_layer

__version__ = "0.1.0"


def _server_checkpointer() -> Any:
    from graphkeep.server import checkpointer

    return checkpointer()


def _server_store() -> Any:
    from graphkeep.server import store

    return store()


# langgraph.json's "graphkeep.server:checkpointer" / "graphkeep.server:store": Agent Server
# (langgraph-api 0.16) reads a path without "/" or ".py:" as module "graphkeep" and the
# attribute "server:checkpointer", looked up in this module's __dict__ (so not through a
# module __getattr__). Each is a function that imports graphkeep.server only when the server
# calls it, so `import graphkeep` stays cheap. "graphkeep.server.checkpointer" loads too.
globals()["server:checkpointer"] = _server_checkpointer
globals()["server:store"] = _server_store

__all__ = [
    "BACKENDS",
    "GraphkeepError",
    "__version__",
    "aconnect",
    "aconnect_cache",
    "aconnect_effects",
    "aconnect_events",
    "aconnect_store",
    "connect",
    "connect_cache",
    "connect_effects",
    "connect_events",
    "connect_store",
    "hot_layer",
]
