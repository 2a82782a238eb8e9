"""The public home of :func:`stream_run` (``from graphkeep.streaming import stream_run``).

The code lives in :mod:`graphkeep.events.streaming`.
"""

from __future__ import annotations

from graphkeep.events.streaming import RunStream, jsonable, stream_run

__all__ = ["RunStream", "jsonable", "stream_run"]
