"""The ``ag-ui-langgraph`` agent the endpoint runs: :class:`~ag_ui_langgraph.LangGraphAgent`,
with a compiled graph's schema keys worked out once per graph instead of once per run.

``LangGraphAgent.prepare_stream`` asks ``get_schema_keys`` at the start of every run, which
builds the graph's input, output, config and context JSON schemas with pydantic — tens of
milliseconds of CPU before a run's first event, the same answer each time. A
``CompiledStateGraph`` builds those schemas from its builder alone (the config is not read),
so the keys are kept per graph; any other graph is asked each run, as before.
"""

from __future__ import annotations

import weakref
from typing import Any

from ag_ui_langgraph import LangGraphAgent
from langgraph.graph.state import CompiledStateGraph

__all__ = ["Agent"]

#: compiled graph -> its schema keys (dropped with the graph)
_schema_keys: weakref.WeakKeyDictionary[Any, dict[str, list[str]]] = weakref.WeakKeyDictionary()


class Agent(LangGraphAgent):  # type: ignore[misc]
    """``LangGraphAgent`` whose ``get_schema_keys`` answers a compiled graph from a cache;
    ``clone()`` (one per run) keeps the class, so every run's agent shares it."""

    def get_schema_keys(self, config: Any) -> Any:
        graph = self.graph
        if not isinstance(graph, CompiledStateGraph):
            return super().get_schema_keys(config)
        keys = _schema_keys.get(graph)
        if keys is None:
            keys = _schema_keys[graph] = super().get_schema_keys(config)
        return {name: list(values) for name, values in keys.items()}  # callers' own lists
