"""Scenario suite (issue #5): real graphs, concurrency, faults and bad input on every backend.

Set-ups live in :mod:`tests.scenarios.backends`; graphs with deterministic nodes in
:mod:`tests.scenarios.graphs`; :mod:`tests.scenarios.worker` runs them in a separate process;
:mod:`tests.scenarios.servers` starts private servers for the restart tests.
"""
