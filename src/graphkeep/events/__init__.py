"""Run event logs: resumable, ordered event streams per run, written once for every store.

The log's contract and both shells (:mod:`.log`) and :func:`~.streaming.stream_run`, which
keeps a graph's stream in a log; a backend implements only the events port (its ``events``
module). See docs/architecture.md.
"""
