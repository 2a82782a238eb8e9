"""``rekey_items``: a store's items rewritten under its key ring's current key (issue 47's
rotation for the long-term store; ``graphkeep rekey --store`` calls it).

Open the store with ``encryption=KeyRing({"k2": new, "k1": old}, current="k2")`` (add
``allow_plaintext=True`` to encrypt items written before encryption was on), then
``rekey_items(store)``: every item under ``k1`` (or in plaintext) is written again under
``k2`` in place — same namespace, key, ``created_at``, ``updated_at`` and expiry — and read
back. A run stopped halfway is resumed by running it again; ``by_key_id`` of a run (or of a
``dry_run=True`` one) says when an old key can leave the ring. The op is
:func:`graphkeep.store.sealed.rekey`.
"""

from __future__ import annotations

from typing import Any

from graphkeep.errors import ConfigurationError
from graphkeep.store.sealed import RekeyCounts
from graphkeep.store.shells import AsyncStore, SyncStore

__all__ = ["RekeyCounts", "arekey_items", "rekey_items"]


def rekey_items(store: Any, *, dry_run: bool = False) -> RekeyCounts:
    """Rewrite every item of a sync ``store`` (from ``connect_store(url, encryption=…)``)
    under an older key id, or in plaintext when the ring allows it, under the current key;
    ``dry_run=True`` only counts. Returns :class:`RekeyCounts` (``scanned``, ``stale``,
    ``rewritten``, ``by_key_id`` before the run)."""
    if not isinstance(store, SyncStore):
        raise ConfigurationError(
            f"rekey_items takes a sync graphkeep store, got {type(store).__name__}"
            " (an async store: await arekey_items(store))"
        )
    return store.rekey_items(dry_run=dry_run)


async def arekey_items(store: Any, *, dry_run: bool = False) -> RekeyCounts:
    """:func:`rekey_items` for an async store (from ``aconnect_store(url, encryption=…)``)."""
    if not isinstance(store, AsyncStore):
        raise ConfigurationError(
            f"arekey_items takes an async graphkeep store, got {type(store).__name__}"
            " (a sync store: rekey_items(store))"
        )
    return await store.rekey_items(dry_run=dry_run)
