"""The Redis family's rules sets, as data: what each service refuses and the page that says so.

Sources (read December 2026):

- ElastiCache Serverless, "Valkey and Redis OSS configuration and limits": "clients cannot
  issue a request with more than 3,999 arguments"; all serverless caches are cluster mode
  enabled (so keys of one request in one hash slot).
  https://docs.aws.amazon.com/AmazonElastiCache/latest/dg/RedisConfiguration.html
- ElastiCache, "Lua scripts": "keys must be provided ... ERR Lua scripts without any input keys
  are not supported".
  https://docs.aws.amazon.com/AmazonElastiCache/latest/dg/BestPractices.Clients.Redis.LuaScripts.html
- ElastiCache, "Supported and restricted Valkey, Memcached, and Redis OSS commands" (the
  commands a serverless cache offers: the core ones, JSON and Bloom filters, no search, which
  runs on node-based Valkey 8.2+ clusters only, "Search features and limits") and
  "Restricted commands" (bgrewriteaof, bgsave, config, debug, migrate, replicaof, save, slaveof,
  shutdown, sync).
  https://docs.aws.amazon.com/AmazonElastiCache/latest/dg/SupportedCommands.html
  https://docs.aws.amazon.com/AmazonElastiCache/latest/dg/ClientConfig.RestrictedCommands.html
  https://docs.aws.amazon.com/AmazonElastiCache/latest/dg/search-features-limits.html
- Azure Managed Redis, "Choose a clustering policy": under the OSS policy the keys of a
  multi-key command must map to one hash slot, and the RediSearch module is not supported
  (modules are chosen when the cache is created, "Architecture"); blocked commands are those
  of Redis Enterprise's "Cluster management commands compatibility" page.
  https://learn.microsoft.com/en-us/azure/redis/choose-clustering-policy
  https://learn.microsoft.com/en-us/azure/redis/architecture
  https://redis.io/docs/latest/operate/rs/references/compatibility/commands/cluster/
- Redis, "Scripting with Lua": "all names of keys that a script accesses must be explicitly
  provided as input key arguments" (what ElastiCache Serverless relies on to route a script).
  https://redis.io/docs/latest/develop/interact/programmability/eval-intro/
"""

from __future__ import annotations

from dataclasses import dataclass

AWS = "https://docs.aws.amazon.com/AmazonElastiCache/latest/dg/"
ELASTICACHE_LIMITS = AWS + "RedisConfiguration.html"
ELASTICACHE_LUA = AWS + "BestPractices.Clients.Redis.LuaScripts.html"
ELASTICACHE_COMMANDS = AWS + "SupportedCommands.html"
ELASTICACHE_RESTRICTED = AWS + "ClientConfig.RestrictedCommands.html"
ELASTICACHE_SEARCH = AWS + "search-features-limits.html"
AZURE_POLICY = "https://learn.microsoft.com/en-us/azure/redis/choose-clustering-policy"
AZURE_ARCHITECTURE = "https://learn.microsoft.com/en-us/azure/redis/architecture"
REDIS_ENTERPRISE_CLUSTER = (
    "https://redis.io/docs/latest/operate/rs/references/compatibility/commands/cluster/"
)
REDIS_SCRIPT_KEYS = "https://redis.io/docs/latest/develop/interact/programmability/eval-intro/"


@dataclass(frozen=True)
class RedisRules:
    """What one service refuses. ``max_arguments`` counts the command name too (what the
    server's ``argc`` counts); ``None``: no published limit."""

    name: str
    max_arguments: int | None
    scripts_need_keys: bool
    #: keys of one request (or of one MULTI…EXEC) must share a hash slot
    one_slot: bool
    #: every key a script touches must be one it declared in KEYS
    declared_script_keys: bool
    #: commands refused by name (lower case; ``cluster|addslots`` for a subcommand)
    refused: frozenset[str]
    #: module commands (the server's ``module`` flag) the service offers anyway, by prefix
    modules_offered: tuple[str, ...]
    #: module commands refused by prefix even on a server without the module loaded
    refused_prefixes: tuple[str, ...]
    urls: dict[str, str]


ELASTICACHE_SERVERLESS = RedisRules(
    name="elasticache-serverless",
    max_arguments=3999,
    scripts_need_keys=True,
    one_slot=True,
    declared_script_keys=True,
    refused=frozenset(
        {"bgrewriteaof", "bgsave", "config", "debug", "migrate", "replicaof", "save"}
        | {"slaveof", "shutdown", "sync", "psync", "module"}
    ),
    # JSON and Bloom filter commands are in the serverless command reference; search is not
    modules_offered=("json.", "bf."),
    refused_prefixes=("ft.", "ts.", "cf.", "cms.", "topk.", "tdigest.", "graph."),
    urls={
        "argument-limit": ELASTICACHE_LIMITS,
        "script-without-keys": ELASTICACHE_LUA,
        "cross-slot": ELASTICACHE_LIMITS,
        "undeclared-script-key": ELASTICACHE_LUA,
        "restricted-command": ELASTICACHE_RESTRICTED,
        "module-command": ELASTICACHE_SEARCH,
    },
)

AZURE_REDIS_OSS = RedisRules(
    name="azure-redis-oss",
    max_arguments=None,
    scripts_need_keys=False,
    one_slot=True,
    declared_script_keys=True,
    refused=frozenset(
        {"config", "debug", "migrate", "module", "replicaof", "slaveof", "shutdown", "sync"}
        | {"psync", "bgrewriteaof", "bgsave", "save"}
        | {
            f"cluster|{sub}"
            for sub in (
                "addslots addslotsrange bumpepoch count-failure-reports countkeysinslot"
                " delslots delslotsrange failover flushslots forget getkeysinslot meet"
                " replicate reset saveconfig set-config-epoch setslot"
            ).split()
        }
    ),
    modules_offered=(),
    refused_prefixes=("ft.", "json.", "ts.", "bf.", "cf.", "cms.", "topk.", "tdigest."),
    urls={
        "cross-slot": AZURE_POLICY,
        "undeclared-script-key": REDIS_SCRIPT_KEYS,
        "restricted-command": REDIS_ENTERPRISE_CLUSTER,
        "module-command": AZURE_POLICY,
    },
)

REDIS_RULES = {r.name: r for r in (ELASTICACHE_SERVERLESS, AZURE_REDIS_OSS)}

DETAILS = {
    "argument-limit": "a request of {n} arguments; the service refuses more than {limit}",
    "script-without-keys": "a script call that declares no key (ERR Lua scripts without any"
    " input keys are not supported)",
    "cross-slot": "keys in {n} hash slots in one request; the service answers CROSSSLOT",
    "undeclared-script-key": "the script touched {key!r} with {command}, a key it did not"
    " declare in KEYS",
    "restricted-command": "a command the service does not offer",
    "module-command": "a module command the service does not offer",
}
