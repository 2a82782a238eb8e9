"""The node cache: LangGraph's ``BaseCache``, written once for every store.

The port a backend implements, its records, key text and checks (:mod:`.port`) and the
contract with its sync and async shells (:mod:`.shells`); a backend implements only the
cache port (its ``cache`` module). See docs/architecture.md.
"""
