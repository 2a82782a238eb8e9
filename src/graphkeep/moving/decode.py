"""Stored values as plain JSON, without importing the application's classes.

LangGraph's serializer writes msgpack with extension types (``jsonplus.py``):
0-2 "call this constructor" (single arg, positional args, keyword args), 3 "call
this class method", 4/5 pydantic v1/v2 models, 6 numpy arrays, 7 DeltaChannel
snapshots. :func:`typed_to_json` reads the raw ``(tag, bytes)`` a store holds and
turns each extension into data: UUIDs become strings, ``Send`` becomes
``{"__send__": ...}``, models (langchain messages included) become their field
dicts, numpy arrays ``{"__numpy_array__": {dtype, shape, order, data_b64}}``,
bytes ``{"__bytes__": <base64>}``, snapshots are unwrapped. Nothing is imported
and nothing is executed, so a dump works on a machine without the app.

:class:`LosslessSerde` is the serializer the CLI gives savers when it copies
between stores: it loads values with their extensions kept as opaque
:class:`RawExt` and writes them back byte for byte.
"""

from __future__ import annotations

import base64
import json
import math
import os
import zlib
from dataclasses import dataclass
from typing import Any

import ormsgpack

from graphkeep.checkpoint.records import Typed
from graphkeep.errors import GraphkeepError
from graphkeep.port import codec

EXT_CONSTRUCTOR_SINGLE_ARG = 0
EXT_CONSTRUCTOR_POS_ARGS = 1
EXT_CONSTRUCTOR_KW_ARGS = 2
EXT_METHOD_SINGLE_ARG = 3
EXT_PYDANTIC_V1 = 4
EXT_PYDANTIC_V2 = 5
EXT_NUMPY_ARRAY = 6
EXT_DELTA_SNAPSHOT = 7

#: same options as LangGraph's encoder, so re-encoded values are byte-identical
MSGPACK_OPTIONS = (
    ormsgpack.OPT_NON_STR_KEYS
    | ormsgpack.OPT_PASSTHROUGH_DATACLASS
    | ormsgpack.OPT_PASSTHROUGH_DATETIME
    | ormsgpack.OPT_PASSTHROUGH_ENUM
    | ormsgpack.OPT_PASSTHROUGH_UUID
    | ormsgpack.OPT_REPLACE_SURROGATES
)
AES_KEY_ENV = "LANGGRAPH_AES_KEY"


@dataclass(frozen=True, slots=True)
class RawExt:
    """A msgpack extension value kept as stored (code and payload)."""

    code: int
    data: bytes


@dataclass(frozen=True, slots=True)
class Encrypted:
    """A value whose cipher key is not configured (or did not decrypt it)."""

    tag: str
    error: str | None = None


class EncryptedValueError(GraphkeepError):
    pass


def _keep_ext(code: int, data: bytes) -> RawExt:
    return RawExt(code, data)


def unpack(data: bytes) -> Any:
    """msgpack -> Python values with every extension kept as :class:`RawExt`."""
    return ormsgpack.unpackb(data, ext_hook=_keep_ext, option=ormsgpack.OPT_NON_STR_KEYS)


# -- decryption ------------------------------------------------------------------------

_cipher: Any = None
_cipher_key: str | None = None


def cipher() -> Any:
    """The AES cipher of ``LANGGRAPH_AES_KEY`` (EncryptedSerializer), or None when unset."""
    global _cipher, _cipher_key
    key = os.environ.get(AES_KEY_ENV)
    if not key:
        return None
    if _cipher is None or key != _cipher_key:
        from langgraph.checkpoint.serde.encrypted import EncryptedSerializer

        _cipher = EncryptedSerializer.from_pycryptodome_aes().cipher
        _cipher_key = key
    return _cipher


def app_serde() -> Any:
    """The serializer of a command that writes what the app reads (``materialize``,
    ``migrate``): LangGraph's, encrypting as the app does when ``LANGGRAPH_AES_KEY`` is set
    (None: the saver's default)."""
    if not os.environ.get(AES_KEY_ENV):
        return None
    from langgraph.checkpoint.serde.encrypted import EncryptedSerializer

    return EncryptedSerializer.from_pycryptodome_aes()


def decrypt(tag: str, data: bytes) -> tuple[str, bytes] | Encrypted:
    """``("msgpack+aes", ct)`` -> ``("msgpack", plaintext)``, or :class:`Encrypted`."""
    inner, _, ciphername = tag.partition("+")
    try:
        active = cipher()
    except (ImportError, ValueError) as exc:
        return Encrypted(tag, f"{AES_KEY_ENV} is not usable: {exc}")
    if active is None:
        return Encrypted(tag)
    try:
        return inner, bytes(active.decrypt(ciphername, data))
    except Exception as exc:  # wrong key, corrupt data, unknown cipher
        return Encrypted(tag, f"cannot decrypt ({type(exc).__name__}: {exc})")


def load_plain(tag: str, data: bytes) -> Any:
    """A stored value as Python data with extensions kept raw (never imports classes).

    A compressed payload (tag ``z:<tag>``, see :func:`graphkeep.port.codec.squeeze`)
    is decompressed first.
    """
    if tag.startswith(codec.COMPRESSED_PREFIX):
        try:
            inflated = codec.unsqueeze(Typed(tag, bytes(data)))
        except zlib.error:
            return Unreadable(tag, bytes(data))
        tag, data = inflated.tag, inflated.data
    if "+" in tag:
        opened = decrypt(tag, data)
        if isinstance(opened, Encrypted):
            return opened
        tag, data = opened
    if tag == "null":
        return None
    if tag == "bytes":
        return bytes(data)
    if tag == "bytearray":
        return bytearray(data)
    if tag == "msgpack":
        return unpack(data)
    if tag == "json":
        return json.loads(data)
    return Unreadable(tag, bytes(data))


@dataclass(frozen=True, slots=True)
class Unreadable:
    """A tag the CLI does not decode (``pickle`` is never unpickled)."""

    tag: str
    data: bytes


# -- to JSON ---------------------------------------------------------------------------


def typed_to_json(value: Typed | tuple[str, bytes]) -> Any:
    tag, data = (value.tag, value.data) if isinstance(value, Typed) else value
    return to_json(load_plain(tag, bytes(data)))


def is_snapshot(value: Typed) -> bool:
    """Is this stored value a DeltaChannel snapshot (ext 7 at the top)?"""
    loaded = load_plain(value.tag, value.data)
    return isinstance(loaded, RawExt) and loaded.code == EXT_DELTA_SNAPSHOT


def to_json(value: Any) -> Any:
    """Python data (with :class:`RawExt`) -> JSON-compatible data."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"__bytes__": _b64(bytes(value))}
    if isinstance(value, dict):
        return {_key(k): to_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [to_json(v) for v in value]
    if isinstance(value, RawExt):
        return _ext_to_json(value)
    if isinstance(value, Encrypted):
        out: dict[str, Any] = {"__encrypted__": value.tag}
        if value.error:
            out["error"] = value.error
        return out
    if isinstance(value, Unreadable):
        return {"__undecoded__": value.tag, "data_b64": _b64(value.data)}
    return {"__repr__": repr(value)}


def _key(key: Any) -> str:
    if isinstance(key, str):
        return key
    if isinstance(key, (bytes, bytearray)):
        return _b64(bytes(key))
    converted = to_json(key)
    return converted if isinstance(converted, str) else json.dumps(converted)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _ext_to_json(ext: RawExt) -> Any:
    try:
        inner = unpack(ext.data)
    except Exception:
        return {"__ext__": ext.code, "data_b64": _b64(ext.data)}
    if ext.code == EXT_DELTA_SNAPSHOT:
        return to_json(inner)
    if ext.code == EXT_NUMPY_ARRAY:
        return _numpy(inner)
    if not isinstance(inner, (list, tuple)) or len(inner) < 3:
        return {"__ext__": ext.code, "value": to_json(inner)}
    module, name, arg = inner[0], inner[1], inner[2]
    qualified = f"{module}.{name}"
    if ext.code == EXT_CONSTRUCTOR_SINGLE_ARG:
        if qualified == "uuid.UUID" and isinstance(arg, str) and len(arg) == 32:
            return f"{arg[:8]}-{arg[8:12]}-{arg[12:16]}-{arg[16:20]}-{arg[20:]}"
        if name in ("SecretStr", "SecretBytes"):
            return {"__secret__": qualified}
        return to_json(arg)
    if ext.code == EXT_CONSTRUCTOR_POS_ARGS:
        return _positional(module, name, arg)
    if ext.code == EXT_CONSTRUCTOR_KW_ARGS:
        if qualified == "datetime.time" and isinstance(arg, dict):
            return _time(arg)
        return to_json(arg)
    # EXT_METHOD_SINGLE_ARG (datetime.fromisoformat...), pydantic v1/v2: the data
    return to_json(arg)


def _positional(module: Any, name: Any, args: Any) -> Any:
    qualified = f"{module}.{name}"
    items = list(args) if isinstance(args, (list, tuple)) else [args]
    if name == "Send" and len(items) >= 2:
        send: dict[str, Any] = {"node": to_json(items[0]), "arg": to_json(items[1])}
        if len(items) > 2:
            send["timeout"] = to_json(items[2])
        return {"__send__": send}
    if qualified == "datetime.timedelta" and len(items) == 3:
        days, seconds, micros = (float(x) for x in items)
        return days * 86400 + seconds + micros / 1e6
    if qualified == "datetime.date" and len(items) == 3:
        return f"{int(items[0]):04d}-{int(items[1]):02d}-{int(items[2]):02d}"
    if str(module).startswith("pathlib"):
        parts = [str(p) for p in items]
        if not parts:
            return "."
        head = parts[0]
        rest = "/".join(parts[1:])
        return head + rest if head.endswith("/") else "/".join(parts)
    if qualified == "re.compile" and items:
        return to_json(items[0])
    return to_json(items)


def _time(fields: dict[str, Any]) -> str:
    text = (
        f"{int(fields.get('hour', 0)):02d}:{int(fields.get('minute', 0)):02d}:"
        f"{int(fields.get('second', 0)):02d}"
    )
    micro = int(fields.get("microsecond", 0) or 0)
    return f"{text}.{micro:06d}" if micro else text


def _numpy(inner: Any) -> Any:
    try:
        dtype, shape, order, buf = inner
    except (TypeError, ValueError):
        return {"__numpy_array__": to_json(inner)}
    return {
        "__numpy_array__": {
            "dtype": dtype,
            "shape": list(shape),
            "order": order,
            "data_b64": _b64(bytes(buf)),
        }
    }


# -- the serializer used for copies ----------------------------------------------------


def _lossless_default(obj: Any) -> Any:
    if isinstance(obj, RawExt):
        return ormsgpack.Ext(obj.code, obj.data)
    if isinstance(obj, (Encrypted, Unreadable)):
        raise EncryptedValueError(_unreadable_message(obj))
    from langgraph.checkpoint.serde import jsonplus

    return jsonplus._msgpack_default(obj)


def _unreadable_message(obj: Encrypted | Unreadable) -> str:
    if isinstance(obj, Encrypted):
        return obj.error or (
            f"a value is encrypted ({obj.tag}); set {AES_KEY_ENV} to the key the app uses"
        )
    return f"a value has serialization type {obj.tag!r}, which graphkeep does not read"


class LosslessSerde:
    """Loads values with their msgpack extensions kept raw; dumps them back unchanged.

    Used by ``copy`` (on both savers) so that values of classes this machine does
    not have travel byte for byte. Encrypted values are decrypted with
    ``LANGGRAPH_AES_KEY`` (and stored in plaintext on the destination); without
    the key, loading one raises a clear error when ``strict``, or yields an
    :class:`Encrypted` marker otherwise (inspection).
    """

    def __init__(self, *, strict: bool = True) -> None:
        self.strict = strict

    def dumps_typed(self, obj: Any) -> tuple[str, bytes]:
        if obj is None:
            return "null", b""
        if isinstance(obj, bytes):
            return "bytes", obj
        if isinstance(obj, bytearray):
            return "bytearray", bytes(obj)
        if isinstance(obj, Unreadable):
            return obj.tag, obj.data
        if isinstance(obj, Encrypted):
            raise EncryptedValueError(_unreadable_message(obj))
        return "msgpack", ormsgpack.packb(obj, default=_lossless_default, option=MSGPACK_OPTIONS)

    def loads_typed(self, data: tuple[str, bytes]) -> Any:
        tag, raw = data
        if tag == "json":  # legacy rows: revive as LangGraph would, re-stored as msgpack
            from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

            return JsonPlusSerializer().loads_typed((tag, bytes(raw)))
        value = load_plain(tag, bytes(raw))
        if self.strict and isinstance(value, Encrypted):
            raise EncryptedValueError(_unreadable_message(value))
        return value


def inspection_serde() -> LosslessSerde:
    """Read-only commands decode with this: no class imports, encrypted values as markers."""
    return LosslessSerde(strict=False)
