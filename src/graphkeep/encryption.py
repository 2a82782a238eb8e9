"""``graphkeep.encryption``: authenticated encryption of stored records, bound to their place.

``graphkeep.connect(url, encryption=KeyRing.from_env())`` (or ``encryption=`` on a saver
class) seals every checkpoint, channel value, list element and pending write with AES-256-GCM
under the ring's current key, bound to the thread, namespace, checkpoint, channel, version,
task and index it lives at; reads fail closed with :class:`~graphkeep.errors.CorruptData`
(``kind`` ``plaintext``, ``unknown_key`` or ``tampered``). The envelope is
:mod:`graphkeep.port.encryption`; see docs/security.md for the threat model and rotation.
"""

from __future__ import annotations

from graphkeep.port.encryption import ENVELOPE_TAG, KEY_BYTES, KEYS_ENV, KeyRing

__all__ = ["ENVELOPE_TAG", "KEYS_ENV", "KEY_BYTES", "KeyRing"]
