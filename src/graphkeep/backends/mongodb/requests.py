"""The requests the MongoDB ports yield: :class:`Command`, one driver call, and :func:`find`.

The executors of :mod:`graphkeep.backends.mongodb.client` run them on a ``MongoClient``
or an ``AsyncMongoClient``; see docs/architecture.md ("The port and its executors").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

#: first-batch size of unbounded finds (the server still caps a batch at 16 MiB)
FIND_BATCH = 100_000
NO_ID: dict[str, Any] = {"_id": 0}


@dataclass(frozen=True, slots=True)
class Command:
    """One driver call: ``db[collection].<method>(*args, **kwargs)`` (``db`` when None).

    Cursors (``find``, ``aggregate``, ``list_indexes``) are materialised by the
    executor; every other method returns the driver's result object.
    """

    collection: str | None
    method: str
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    #: re-send on a duplicate-key error (an upsert race); False where a conflict is an answer
    retry_conflicts: bool = True


def find(
    collection: str,
    filter: Mapping[str, Any],
    *,
    projection: Mapping[str, Any] | None = None,
    sort: list[tuple[str, int]] | None = None,
    limit: int = 0,
) -> Command:
    """A ``find`` read in one reply where the server allows (``batch_size`` = ``limit``, or
    :data:`FIND_BATCH`), without ``_id`` unless ``projection`` says otherwise."""
    kwargs: dict[str, Any] = {
        "projection": dict(projection or NO_ID),
        "batch_size": limit or FIND_BATCH,
    }
    if sort:
        kwargs["sort"] = sort
    if limit:
        kwargs["limit"] = limit
    return Command(collection, "find", (dict(filter),), kwargs)
