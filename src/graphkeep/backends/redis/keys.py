"""What every Redis product's key names share: the checked ``key_prefix``, hash-tag escaping
and the escaping of a prefix inside a SCAN pattern."""

from __future__ import annotations

import re

from graphkeep.errors import ConfigurationError

__all__ = ["check_prefix", "decode_thread", "encode_thread", "pattern_prefix"]


def encode_thread(thread_id: str) -> str:
    """Percent-escape the characters that would end or confuse the ``{hash tag}``."""
    return thread_id.replace("%", "%25").replace("{", "%7B").replace("}", "%7D")


#: the saver's key layout version (``P:<format>:{<thread>}:…``); bump when the layout changes
CHECKPOINT_FORMAT = "1"


def fence_key(prefix: str, thread_id: str) -> str:
    """The thread's fencing token (the last lease's ``saver.lock`` granted) under ``prefix``:
    apart from the thread's data keys, so ``delete_thread`` or a TTL refresh leaves it, and
    in the thread's hash slot, where the saver's and the effect ledger's fenced scripts
    check it (see :mod:`graphkeep.port.fence`)."""
    return f"{prefix}:{CHECKPOINT_FORMAT}:{{{encode_thread(thread_id)}}}:fence"


def decode_thread(text: str) -> str:
    return text.replace("%7D", "}").replace("%7B", "{").replace("%25", "%")


def check_prefix(prefix: str) -> str:
    if not isinstance(prefix, str) or not prefix:
        raise ConfigurationError("key_prefix must be a non-empty string")
    if any(c in prefix for c in "{}\x00"):
        raise ConfigurationError(
            f"key_prefix {prefix!r} must not contain '{{', '}}' or NUL (they define"
            " Redis Cluster hash tags)"
        )
    return prefix


def pattern_prefix(prefix: str) -> str:
    """``prefix`` with SCAN's glob characters escaped, to start a ``MATCH`` pattern."""
    return re.sub(r"([*?\[\]\\])", r"\\\1", prefix)
