"""The effect ledger: side effects (tool calls, API requests) that happen once per key,
recorded next to the checkpoints. Open one with ``graphkeep.connect_effects(url)`` or use
``saver.effects``; see :mod:`graphkeep.effects.ledger`."""

from graphkeep.effects.keys import current_idempotency_key

__all__ = ["current_idempotency_key"]
