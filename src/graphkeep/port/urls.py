"""The Redis family's URL schemes, for everything that takes a Redis URL (``connect``, the hot
layer, the Redis backend's clients, the CLI): Valkey's forms are aliases of Redis's."""

from __future__ import annotations

#: the Redis backend's own schemes (``unix://`` is a socket path; ``+cluster`` a cluster seed)
REDIS_SCHEMES = ("redis", "rediss", "unix", "redis+cluster", "rediss+cluster")
#: Valkey's forms (AWS's ElastiCache and MemoryDB documentation writes them; ``s``: TLS) and the
#: Redis form each stands for: the same server, the same products
VALKEY_SCHEMES = {
    "valkey": "redis",
    "valkeys": "rediss",
    "valkey+cluster": "redis+cluster",
    "valkeys+cluster": "rediss+cluster",
}


def redis_form(url: str) -> str:
    """``url`` with a Valkey scheme (:data:`VALKEY_SCHEMES`) written as its Redis form (what
    redis-py reads); any other URL unchanged."""
    scheme, sep, rest = url.partition("://")
    redis = VALKEY_SCHEMES.get(scheme.lower()) if sep else None
    return f"{redis}://{rest}" if redis else url
