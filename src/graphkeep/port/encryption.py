"""The encryption envelope: AES-256-GCM bound to each record's place, written once.

A :class:`KeyRing` holds 256-bit keys by id and names the current one. :meth:`KeyRing.seal`
turns a payload (a :class:`~graphkeep.port.codec.Typed`, already serialized and compressed)
into an envelope, :meth:`KeyRing.open` back; a product hands both the record's *place*: a
tuple naming what the record is and where it lives (``("value", thread, ns, channel,
version)``, ``("write", thread, ns, checkpoint, task, idx, channel)``, …). The place is the
GCM associated data, so an envelope copied onto another thread, checkpoint, channel or key
does not open there.

The envelope is a payload of tag :data:`ENVELOPE_TAG` (the inner tag is encrypted with the
value, so not even the value's type is readable) whose bytes are::

    0x01 | len(key id) | key id (UTF-8) | nonce (12 random bytes) | ciphertext + tag (16)

with associated data ``ENVELOPE_TAG, header (version, key id), place`` (msgpack). The
plaintext is the inner payload packed as :func:`~graphkeep.port.codec.pack_typed` does.

Reads fail closed (:class:`~graphkeep.errors.CorruptData`, never state): a payload that is not
an envelope (``kind="plaintext"``, unless the ring was made with ``allow_plaintext=True`` for
a migration window: such reads are logged and counted in :attr:`KeyRing.plaintext_reads`),
an envelope under a key id the ring does not hold (``"unknown_key"``), or one whose tag does
not verify here (``"tampered"``). Writes are always sealed with the current key.

:meth:`KeyRing.sign` / :meth:`KeyRing.verify` authenticate a record that must stay readable
to the store (a shared list's manifest names only element keys, which the backends read to
expire and fetch elements): a GMAC over its bytes and place.
"""

from __future__ import annotations

import base64
import binascii
import logging
import os
import threading
from collections.abc import Mapping
from typing import Any

from graphkeep.errors import PLAINTEXT, TAMPERED, UNKNOWN_KEY, ConfigurationError, CorruptData
from graphkeep.port import codec
from graphkeep.port.codec import Typed

log = logging.getLogger("graphkeep.encryption")

#: the tag of every sealed payload (the format's version is its trailing number)
ENVELOPE_TAG = codec.ENVELOPE_TAG
#: the environment variable :meth:`KeyRing.from_env` reads: ``k2:BASE64,k1:BASE64``
KEYS_ENV = "GRAPHKEEP_KEYS"
#: the envelope's header version byte
_VERSION = codec.ENVELOPE_VERSION
_NONCE = 12
_TAG = 16
KEY_BYTES = 32
#: a key id's bounds (it is stored in every record and written in ``GRAPHKEEP_KEYS``)
MAX_KEY_ID_BYTES = 64
_KEY_ID_FORBIDDEN = frozenset(":,= \t\r\n\x00")

#: a record's place: what it is, then the ids that say where it lives
PlaceKey = tuple[Any, ...]


def _aead(key: bytes) -> Any:
    try:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    except ImportError as exc:  # pragma: no cover - a dependency of graphkeep
        raise ConfigurationError(
            "encryption needs the 'cryptography' package: pip install cryptography"
        ) from exc
    return AESGCM(key)


def check_key_id(key_id: Any) -> str:
    if not isinstance(key_id, str) or not key_id:
        raise ConfigurationError(f"a key id must be a non-empty string, got {key_id!r}")
    if len(key_id.encode()) > MAX_KEY_ID_BYTES or _KEY_ID_FORBIDDEN.intersection(key_id):
        raise ConfigurationError(
            f"key id {key_id!r} must be at most {MAX_KEY_ID_BYTES} bytes, without ':', ',',"
            " '=', spaces or NUL"
        )
    return key_id


class KeyRing:
    """AES-256-GCM keys by id; ``current`` encrypts every write, every key decrypts.

    ``KeyRing({"k2": key2, "k1": key1}, current="k2")``: each key is 32 bytes (``bytes``, or
    its standard base64 as ``str``); a bad key or id is a
    :class:`~graphkeep.errors.ConfigurationError` (its message never shows a key).
    ``allow_plaintext=True`` reads payloads that are not encrypted (logged, counted in
    :attr:`plaintext_reads`) for a migration window; writes are encrypted all the same.
    Rotation: make a ring with the new key current and the old ones beside it; records
    written under an old key keep reading until it leaves the ring.
    """

    def __init__(
        self,
        keys: Mapping[str, bytes | str],
        current: str | None = None,
        *,
        allow_plaintext: bool = False,
    ) -> None:
        if not isinstance(keys, Mapping) or not keys:
            raise ConfigurationError("KeyRing needs at least one key: {key_id: 32-byte key}")
        if not isinstance(allow_plaintext, bool):
            raise ConfigurationError(
                f"allow_plaintext must be True or False, got {allow_plaintext!r}"
            )
        self._ciphers: dict[str, Any] = {}
        for key_id, key in keys.items():
            self._ciphers[check_key_id(key_id)] = _aead(_key_bytes(key_id, key))
        #: per key id's header bytes: its cipher and the associated data's packed start
        self._by_header: dict[bytes, tuple[Any, bytes]] = {
            _header(key_id): (cipher, _associated_start(_header(key_id)))
            for key_id, cipher in self._ciphers.items()
        }
        if current is None:
            if len(self._ciphers) != 1:
                raise ConfigurationError("KeyRing of several keys needs current= (a key id)")
            current = next(iter(self._ciphers))
        self.current = current  # checked: one of the ring's key ids
        self.allow_plaintext = allow_plaintext
        #: how many plaintext payloads were read under ``allow_plaintext``
        self.plaintext_reads = 0
        self._lock = threading.Lock()

    @classmethod
    def from_env(
        cls, name: str = KEYS_ENV, *, allow_plaintext: bool = False, environ: Any = None
    ) -> KeyRing:
        """The ring ``$GRAPHKEEP_KEYS`` names: ``k2:BASE64,k1:BASE64``, the first current."""
        env = os.environ if environ is None else environ
        text = env.get(name, "")
        if not text.strip():
            raise ConfigurationError(f"{name} is not set (k2:BASE64,k1:BASE64; the first current)")
        keys: dict[str, str] = {}
        for part in text.split(","):
            key_id, sep, key = part.strip().partition(":")
            if not sep:
                raise ConfigurationError(
                    f"{name} takes key_id:BASE64 entries separated by ',' (an entry has no ':')"
                )
            if key_id in keys:
                raise ConfigurationError(f"{name} names key id {key_id!r} twice")
            keys[key_id] = key.strip()
        try:
            return cls(keys, current=next(iter(keys)), allow_plaintext=allow_plaintext)
        except ConfigurationError as exc:
            raise ConfigurationError(f"{name}: {exc}") from None

    @property
    def current(self) -> str:
        """The key id every write is sealed under (set it to another id of the ring to
        rotate: ``bench/rekey_cost.py`` does)."""
        return self._current

    @current.setter
    def current(self, key_id: str) -> None:
        if key_id not in self._ciphers:
            raise ConfigurationError(
                f"KeyRing current={key_id!r} is not one of its key ids {sorted(self._ciphers)}"
            )
        header = _header(key_id)
        #: what a seal needs, set at once: key id, header, cipher, associated data's start
        self._sealing: tuple[str, bytes, Any, bytes] = (key_id, header, *self._by_header[header])
        self._current = key_id

    @property
    def key_ids(self) -> list[str]:
        return list(self._ciphers)

    def __repr__(self) -> str:  # never a key
        return f"KeyRing(key_ids={self.key_ids!r}, current={self.current!r})"

    def seal(self, value: Typed, place: PlaceKey) -> Typed:
        """``value`` encrypted under the current key, bound to ``place``."""
        _, header, cipher, start = self._sealing
        nonce = os.urandom(_NONCE)
        sealed = cipher.encrypt(nonce, codec.pack_typed(value), start + codec.packb(place))
        return Typed(ENVELOPE_TAG, b"".join((header, nonce, sealed)))

    def open(self, value: Typed, place: PlaceKey) -> Typed:
        """The payload ``value`` sealed at ``place``, or :class:`CorruptData` (no place
        named: the caller adds it)."""
        if value.tag != ENVELOPE_TAG:
            self._plaintext()
            return value
        data = value.data
        # the header read once, its cipher and associated data's start looked up by its bytes
        end = 2 + data[1] if len(data) >= 2 and data[0] == _VERSION else 0
        found = self._by_header.get(data[:end]) if end else None
        if found is None:
            self._cipher(_parse_header(data)[0])  # unknown_key, or tampered: no header
            raise _tampered()  # pragma: no cover - a held key id's header is in the table
        cipher, start = found
        if len(data) < end + _NONCE + _TAG:
            raise _tampered()
        body = memoryview(data)[end:]  # no copies: the cipher reads the buffer
        try:
            plain = cipher.decrypt(body[:_NONCE], body[_NONCE:], start + codec.packb(place))
        except Exception:  # cryptography's InvalidTag
            raise _tampered() from None
        return codec.unpack_typed(plain)

    def key_id(self, value: Typed) -> str | None:
        """The key id an envelope names (None: not an envelope)."""
        return envelope_key_id(value)

    def sign(self, data: bytes, place: PlaceKey) -> list[Any]:
        """A GMAC of ``data`` at ``place`` under the current key: ``[key id, nonce + tag as
        hex]`` — text, not bytes, so that a store's own script can still unpack the record
        that carries it (Redis's ``cmsgpack`` has no bin type)."""
        key_id, _, cipher, start = self._sealing
        nonce = os.urandom(_NONCE)
        tag = cipher.encrypt(nonce, b"", start + codec.packb((*place, data)))
        return [key_id, (nonce + tag).hex()]

    def verify(self, data: bytes, place: PlaceKey, signature: Any) -> None:
        """Check :meth:`sign`'s ``signature`` of ``data`` at ``place`` (None: unsigned)."""
        if signature is None:
            self._plaintext()
            return
        if not isinstance(signature, list) or len(signature) != 2:
            raise _tampered()
        key_id, mac = signature[0], _mac_bytes(signature[1])
        if not isinstance(key_id, str) or len(mac) != _NONCE + _TAG:
            raise _tampered()
        cipher = self._cipher(key_id)
        try:
            cipher.decrypt(mac[:_NONCE], mac[_NONCE:], _associated(_header(key_id), (*place, data)))
        except Exception:
            raise _tampered() from None

    def _cipher(self, key_id: str) -> Any:
        cipher = self._ciphers.get(key_id)
        if cipher is None:
            raise CorruptData(
                reason=f"it is encrypted under key id {key_id!r}, which the key ring does not hold",
                kind=UNKNOWN_KEY,
                advice="Add that key to the ring (GRAPHKEEP_KEYS) to read it; nothing is returned",
            )
        return cipher

    def _plaintext(self) -> None:
        if not self.allow_plaintext:
            raise CorruptData(
                reason="it is not encrypted, and encryption is on",
                kind=PLAINTEXT,
                advice="A record written in plaintext is not trusted: rewrite it encrypted, or"
                " read it during a migration window with KeyRing(..., allow_plaintext=True)",
            )
        with self._lock:
            self.plaintext_reads += 1
        log.warning("graphkeep read a plaintext record under allow_plaintext=True")


def _key_bytes(key_id: str, key: Any) -> bytes:
    if isinstance(key, str):
        try:
            key = base64.b64decode(key.strip(), validate=True)
        except (binascii.Error, ValueError):
            raise ConfigurationError(f"key {key_id!r} is not valid base64") from None
    if not isinstance(key, (bytes, bytearray)):
        raise ConfigurationError(
            f"key {key_id!r} must be 32 bytes (or their base64), got {type(key).__name__}"
        )
    if len(key) != KEY_BYTES:
        raise ConfigurationError(
            f"key {key_id!r} is {len(key)} bytes; AES-256 needs {KEY_BYTES}"
            " (make one with: python -c 'import os,base64;"
            " print(base64.b64encode(os.urandom(32)).decode())')"
        )
    return bytes(key)


def _header(key_id: str) -> bytes:
    raw = key_id.encode()
    return bytes((_VERSION, len(raw))) + raw


def _parse_header(data: bytes) -> tuple[str, bytes]:
    parsed = codec.envelope_header(data)
    if parsed is None:
        raise _tampered()
    return parsed


def _mac_bytes(mac: Any) -> bytes:
    """A signature's MAC as bytes: hex text (as :meth:`KeyRing.sign` writes it) or the raw
    bytes earlier signatures held (b"": neither)."""
    if isinstance(mac, bytes):
        return mac
    if isinstance(mac, str):
        try:
            return bytes.fromhex(mac)
        except ValueError:
            return b""
    return b""


def _associated(header: bytes, place: PlaceKey) -> bytes:
    """The associated data: ``[ENVELOPE_TAG, header, place]`` packed (msgpack)."""
    return _associated_start(header) + codec.packb(place)


def _associated_start(header: bytes) -> bytes:
    """The associated data's bytes before the place's: a 3-array's marker, the tag and the
    header packed (msgpack packs a tuple as it packs a list, so the place is packed alone)."""
    return b"\x93" + codec.packb(ENVELOPE_TAG) + codec.packb(header)


def _tampered() -> CorruptData:
    return CorruptData(
        reason="its encryption does not verify at this place (changed bytes, or a record"
        " copied from elsewhere)",
        kind=TAMPERED,
        advice="Nothing of it is returned. Check that the key ring holds the writer's key under"
        " this key id; if it does, the record was changed or moved: restore it from a backup",
    )


def envelope_key_id(value: Typed) -> str | None:
    """The key id an envelope names (None: not an envelope; a header that does not parse:
    :class:`CorruptData` ``tampered``)."""
    if value.tag != ENVELOPE_TAG:
        return None
    return _parse_header(value.data)[0]


def check_encryption(value: Any) -> KeyRing | None:
    """The ``encryption=`` option checked: a :class:`KeyRing` or None."""
    if value is None or isinstance(value, KeyRing):
        return value
    raise ConfigurationError(
        f"encryption= takes a graphkeep.encryption.KeyRing, got {type(value).__name__}"
    )
