"""Checkpoint identifiers: validation of thread ids, namespaces and names; version strings.

Thread ids are normalised to ``str`` (``7`` and ``"7"`` are the same thread) and
checked before any I/O, so a bad id never reaches a driver.
"""

from __future__ import annotations

import random
import re
from collections.abc import Mapping
from typing import Any

from langchain_core.runnables import RunnableConfig

from graphkeep.errors import InvalidNamespace, InvalidThreadId
from graphkeep.port.checks import short

DEFAULT_MAX_ID_BYTES = 1024


def normalize_thread_id(value: Any, *, max_bytes: int = DEFAULT_MAX_ID_BYTES) -> str:
    """Return the canonical ``str`` form of a thread id, or raise :class:`InvalidThreadId`."""
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise InvalidThreadId(
            f"thread_id must be a non-empty str or an int, got {type(value).__name__}"
            f" ({short(value)}); pass config={{'configurable': {{'thread_id': ...}}}}"
        )
    text = str(value)
    if not text:
        raise InvalidThreadId("thread_id must not be empty")
    _check_text(text, "thread_id", max_bytes, InvalidThreadId)
    return text


def normalize_namespace(value: Any, *, max_bytes: int = DEFAULT_MAX_ID_BYTES) -> str:
    """Return a checkpoint namespace (``""`` is the root graph)."""
    if value is None:
        return ""
    if not isinstance(value, str):
        raise InvalidNamespace(
            f"checkpoint_ns must be a str, got {type(value).__name__} ({short(value)})"
        )
    _check_text(value, "checkpoint_ns", max_bytes, InvalidNamespace)
    return value


def normalize_checkpoint_id(value: Any, *, max_bytes: int = DEFAULT_MAX_ID_BYTES) -> str | None:
    """Return a checkpoint id, or ``None`` when absent (a falsy id means "latest")."""
    if not value:
        return None
    if not isinstance(value, str):
        raise InvalidNamespace(
            f"checkpoint_id must be a str, got {type(value).__name__} ({short(value)})"
        )
    _check_text(value, "checkpoint_id", max_bytes, InvalidNamespace)
    return value


def check_name(value: Any, what: str, *, max_bytes: int = DEFAULT_MAX_ID_BYTES) -> str:
    """Check a task id, task path or channel name that becomes part of a storage key."""
    if not isinstance(value, str):
        raise InvalidNamespace(f"{what} must be a str, got {type(value).__name__}")
    _check_text(value, what, max_bytes, InvalidNamespace)
    return value


def _check_text(text: str, what: str, max_bytes: int, error: type[Exception]) -> None:
    if "\x00" in text:
        raise error(f"{what} must not contain NUL characters: {short(text)}")
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise error(f"{what} is not valid unicode (lone surrogate): {short(text)}") from exc
    if size > max_bytes:
        raise error(
            f"{what} is {size} bytes long; the limit is {max_bytes} bytes"
            " (raise it with the max_id_bytes option)"
        )


def next_version(current: str | int | float | None) -> str:
    """Next channel version: zero-padded integer part plus a random fraction.

    String order equals numeric order, and the random part keeps versions of
    two forks of one checkpoint distinct, so (channel, version) blob keys never
    collide across branches.
    """
    if current is None:
        number = 0
    elif isinstance(current, (int, float)):
        number = int(current)
    else:
        number = int(current.split(".", 1)[0])
    return f"{number + 1:032}.{random.random():016}"


#: a version as :func:`next_version` (and LangGraph's own savers' ``get_next_version``) makes it:
#: 32 digits, a dot, a random float of at least 16 characters (``0.123…``, ``00.5``, ``4.8e-05``)
_MADE_VERSION = re.compile(r"\d{32}\.(?=[0-9.e-]{16,}$)\d*\.?\d+(e-\d+)?")


def unique_version(version: str) -> bool:
    """``version`` carries :func:`next_version`'s random fraction, so only the put that made
    it writes a value under it. A caller's own versions (LangGraph's conformance suite stores
    several values under ``1``) may name several values over time: the last one stored is
    the value, for every checkpoint naming it."""
    return _MADE_VERSION.fullmatch(version) is not None


def version_key(version: Any) -> str:
    """The storage form of a channel version (``1`` and ``"1"`` are one key)."""
    return str(version)


def checkpoint_config(thread_id: str, ns: str, checkpoint_id: str) -> RunnableConfig:
    """The ``RunnableConfig`` naming one checkpoint, as the savers return and accept it."""
    return {
        "configurable": {
            "thread_id": thread_id,
            "checkpoint_ns": ns,
            "checkpoint_id": checkpoint_id,
        }
    }


def configurable(config: RunnableConfig | Mapping[str, Any] | None) -> Mapping[str, Any]:
    """``config["configurable"]``, or an empty mapping when there is none (or not a mapping)."""
    if not config:
        return {}
    conf = config.get("configurable")
    return conf if isinstance(conf, Mapping) else {}


def address(
    config: RunnableConfig | None, *, max_bytes: int = DEFAULT_MAX_ID_BYTES
) -> tuple[str, str, str | None]:
    """``(thread_id, checkpoint_ns, checkpoint_id)`` of the checkpoint ``config`` names,
    normalised (checkpoint_id None: the latest), or :class:`~graphkeep.errors.InvalidInput`."""
    conf = configurable(config)
    thread_id = normalize_thread_id(conf.get("thread_id"), max_bytes=max_bytes)
    ns = normalize_namespace(conf.get("checkpoint_ns"), max_bytes=max_bytes)
    checkpoint_id = normalize_checkpoint_id(conf.get("checkpoint_id"), max_bytes=max_bytes)
    return thread_id, ns, checkpoint_id


#: 100 ns ticks between the Gregorian epoch (uuid1/uuid6 time) and the Unix epoch
GREGORIAN_OFFSET = 0x01B21DD213814000


def id_time(checkpoint_id: str) -> float | None:
    """The creation time (POSIX seconds) in a uuid6 checkpoint id, or None."""
    text = checkpoint_id.replace("-", "")
    if len(text) != 32 or text[12] != "6":
        return None
    try:
        value = int(text, 16)
    except ValueError:
        return None
    ticks = ((value >> 80) << 12) | ((value >> 64) & 0x0FFF)
    seconds = (ticks - GREGORIAN_OFFSET) / 10_000_000
    return seconds if seconds > 0 else None


def id_at(seconds: float) -> str:
    """The lowest uuid6 checkpoint id of the instant ``seconds``: every id LangGraph makes
    from then on sorts above it (ids compare as text, time first)."""
    ticks = int(seconds * 10_000_000) + GREGORIAN_OFFSET
    value = ((ticks >> 12) << 80) | (0x6 << 76) | ((ticks & 0x0FFF) << 64)
    text = f"{value:032x}"
    return f"{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}"
