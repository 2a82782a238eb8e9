"""Ranking and paging: PostgresStore's scores, the order and slice of a search page
(:func:`rank`) and of a namespace listing (:func:`list_page`).
"""

from __future__ import annotations

import math
import operator
from collections.abc import Iterable, Sequence
from typing import cast

from langgraph.store.base import ListNamespacesOp

from graphkeep.store.filters import matches
from graphkeep.store.port import Namespace, SearchQuery, StoredItem
from graphkeep.store.values import unpack_vector


def in_prefix(namespace: Namespace, prefix: Namespace) -> bool:
    """Whether ``namespace`` starts with the labels of ``prefix`` (``()`` prefixes all)."""
    return namespace[: len(prefix)] == prefix


def score(query: Sequence[float], vector: Sequence[float], distance: str) -> float:
    """PostgresStore's score conventions: cosine similarity, minus the L2 distance, or the
    inner product."""
    if distance == "l2":
        return -math.sqrt(sum((q - v) ** 2 for q, v in zip(query, vector, strict=False)))
    dot: float = sum(map(operator.mul, query, vector))
    if distance == "inner_product":
        return float(dot)
    norm = math.sqrt(sum(map(operator.mul, query, query))) * math.sqrt(
        sum(map(operator.mul, vector, vector))
    )
    return dot / norm if norm else 0.0


def best_score(item: StoredItem, query: SearchQuery) -> float | None:
    """The best score among the item's embedded texts (None when it has none)."""
    assert query.vector is not None
    scores = [score(query.vector, unpack_vector(v.data), query.distance) for v in item.vectors]
    return max(scores) if scores else None


def rank(candidates: Iterable[StoredItem], query: SearchQuery) -> list[StoredItem]:
    """The page a search returns from candidates already limited to the prefix.

    Filters and expiry are applied here too (cheap, and exact whatever a backend
    pre-filtered). Without a vector: newest ``updated_us`` first, ties by namespace and
    key. With one: best score first; unembedded items are left out.
    """
    live = [
        c
        for c in candidates
        if c.live(query.now_ms)
        and in_prefix(c.namespace, query.prefix)
        and matches(c.value, query.conditions)
    ]
    if query.vector is None:
        live.sort(key=lambda c: (c.namespace, c.key))
        live.sort(key=lambda c: c.updated_us, reverse=True)
        return live[query.offset : query.offset + query.limit]
    scored = []
    for item in live:
        item.score = best_score(item, query)
        if item.score is not None:
            scored.append(item)
    scored.sort(key=lambda c: (c.namespace, c.key))
    scored.sort(key=lambda c: cast(float, c.score), reverse=True)
    return scored[query.offset : query.offset + query.limit]


def namespace_matches(namespace: Namespace, op: ListNamespacesOp) -> bool:
    for condition in op.match_conditions or ():
        path = tuple(condition.path)
        if not path:
            continue
        if len(namespace) < len(path):
            return False
        if condition.match_type == "prefix":
            part = namespace[: len(path)]
        else:
            part = namespace[-len(path) :]
        if any(p != "*" and p != n for p, n in zip(path, part, strict=True)):
            return False
    return True


def literal_prefix(op: ListNamespacesOp) -> Namespace:
    """The leading labels every listed namespace must start with (up to a wildcard)."""
    for condition in op.match_conditions or ():
        if condition.match_type == "prefix":
            labels = []
            for label in condition.path:
                if label == "*":
                    break
                labels.append(label)
            return tuple(labels)
    return ()


def list_page(namespaces: Iterable[Namespace], op: ListNamespacesOp) -> list[Namespace]:
    found = {
        ns[: op.max_depth] if op.max_depth is not None else ns
        for ns in namespaces
        if namespace_matches(ns, op)
    }
    return sorted(found)[op.offset : op.offset + op.limit]
