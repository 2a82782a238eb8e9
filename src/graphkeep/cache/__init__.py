"""The node cache: LangGraph's ``BaseCache``, written once for every store.

The contract and both shells live here; a backend implements only the cache port (its
``cache`` module). See docs/architecture.md.
"""
