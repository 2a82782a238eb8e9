"""Run event logs: resumable, ordered event streams per run, written once for every store.

The port a backend implements, its records, the retention policy and the input checks
(:mod:`.port`), the log's contract with its sync and async shells (:mod:`.log`) and
:func:`~.streaming.stream_run`, which keeps a graph's stream in a log; a backend implements
only the events port (its ``events`` module). See docs/architecture.md.
"""
