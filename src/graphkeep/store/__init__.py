"""The store: LangGraph's ``BaseStore`` (long-term memory), written once for every store.

Validation, filters, ranking, the value codec, TTL and both shells live here; a backend
implements only the store port (its ``store`` module). See docs/architecture.md.
"""
