"""Backend set-ups the matrix runs against, and which of them are enabled.

A set-up is a saver URL plus the pytest marker of the service it needs, and the rules sets of
the managed services its server stands for (MongoDB: DocumentDB and Cosmos DB; Valkey: Azure
Managed Redis OSS, and ElastiCache Serverless on the cluster).
URLs come from the environment, defaulting to the project's local services (`./dev services up`).
`GRAPHKEEP_SETUPS` (comma list) overrides `DEFAULT_ENABLED`; the "reference" set-up is the
in-process reference saver used to validate the harness itself and is never enabled by default.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

REFERENCE_URL = "memory://"
#: the managed MongoDB services whose rules the MongoDB rows follow
MONGODB_RULES = ("documentdb", "cosmos-mongodb-vcore", "cosmos-mongodb-ru")


@dataclass(frozen=True)
class Setup:
    name: str
    url: str
    marker: str | None
    #: a Redis URL: the set-up's saver is ``connect(url, hot=hot)``, the durable store behind
    #: graphkeep's Redis hot layer (a checkpoint row of the matrix only)
    hot: str | None = None
    #: the rules sets (``graphkeep.testing.rules.RULE_SETS``) of the managed services this
    #: set-up's server stands for: every request of its rows is checked against them, and a
    #: case that sends one a service refuses fails (``$GRAPHKEEP_RULES`` adds to every row)
    rules: tuple[str, ...] = ()

    @property
    def options(self) -> dict[str, str]:
        """What ``connect`` gets besides the URL and the key prefix."""
        return {} if self.hot is None else {"hot": self.hot}


def _dynamodb_url() -> str:
    endpoint = os.environ.get("DYNAMODB_ENDPOINT_URL", "http://127.0.0.1:15000")
    return f"dynamodb://graphkeep_test?region=us-east-1&endpoint_url={endpoint}"


def all_setups() -> list[Setup]:
    """Every known set-up, URLs read from the environment now."""
    return [
        Setup("redis", os.environ.get("REDIS_URL", "redis://127.0.0.1:16379/0"), "redis"),
        Setup(
            "redis-cluster",
            os.environ.get("REDIS_CLUSTER_URL", "redis+cluster://127.0.0.1:17001"),
            "cluster",
        ),
        Setup(
            "mongodb",
            os.environ.get("MONGODB_URI", "mongodb://127.0.0.1:27117/graphkeep_test"),
            "mongodb",
            rules=MONGODB_RULES,
        ),
        Setup("dynamodb", _dynamodb_url(), "dynamodb"),
        # Valkey 8 (./dev services valkey, valkey-cluster): the Redis backend on the server
        # ElastiCache and MemoryDB now run; as Azure Managed Redis (OSS policy) and ElastiCache
        # Serverless (always a cluster) run it, under their rules
        Setup(
            "valkey",
            os.environ.get("VALKEY_URL", "redis://127.0.0.1:16390/0"),
            "valkey",
            rules=("azure-redis-oss",),
        ),
        Setup(
            "valkey-cluster",
            os.environ.get("VALKEY_CLUSTER_URL", "redis+cluster://127.0.0.1:17101"),
            "valkey_cluster",
            rules=("elasticache-serverless",),
        ),
        Setup("reference", REFERENCE_URL, None),
    ]


def hot_setups() -> list[Setup]:
    """The durable savers behind a Redis hot layer: checkpoint rows of the matrix."""
    redis = os.environ.get("REDIS_URL", "redis://127.0.0.1:16379/0")
    durable = {s.name: s for s in all_setups()}
    return [
        Setup(
            f"{name}+hot",
            durable[name].url,
            durable[name].marker,
            hot=redis,
            rules=durable[name].rules,
        )
        for name in ("mongodb", "dynamodb")
    ]


# Every backend set-up runs by default; GRAPHKEEP_SETUPS narrows it.
DEFAULT_ENABLED: tuple[str, ...] = (
    "redis",
    "redis-cluster",
    "mongodb",
    "dynamodb",
    "valkey",
    "valkey-cluster",
    "mongodb+hot",
    "dynamodb+hot",
)


def enabled_names() -> list[str]:
    raw = os.environ.get("GRAPHKEEP_SETUPS", "")
    names = [n.strip() for n in raw.split(",") if n.strip()]
    return names or list(DEFAULT_ENABLED)


def by_name(name: str) -> Setup:
    for setup in [*all_setups(), *hot_setups()]:
        if setup.name == name:
            return setup
    known = ", ".join(s.name for s in [*all_setups(), *hot_setups()])
    raise KeyError(f"unknown set-up {name!r}; known: {known}")


def selected(names: list[str] | None = None) -> list[Setup]:
    """The named set-ups (any known one), or the enabled ones when no names are given."""
    return [by_name(n) for n in (names or enabled_names())]


#: the enabled set-ups of the checkpoint matrix (hot-layer rows included)
SAVER_ENABLED: list[Setup] = selected()
#: the enabled backends, for every other product (a hot layer is a saver's only)
ENABLED: list[Setup] = [s for s in SAVER_ENABLED if s.hot is None]
