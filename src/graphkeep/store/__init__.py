"""The store: LangGraph's ``BaseStore`` (long-term memory), written once for every store.

The port a backend implements and its records (:mod:`.port`), the value codec
(:mod:`.values`), input checks (:mod:`.validation`), filters (:mod:`.filters`), ranking and
paging (:mod:`.ranking`), the contract with its sync and async shells (:mod:`.shells`) and
the TTL sweepers (:mod:`.sweeper`); a backend implements only the store port (its ``store``
module). See docs/architecture.md.
"""
