"""The managed services' rules in ``./dev test`` (docs/development.md): the rules sets of the
MongoDB lane, and the Valkey rules run — the Redis products' suites (saver, store, cache,
event log, effect ledger, locks, watch, hot layer, the CLI's check/prune/copy, the request
audits) a second time, their Redis URLs on the Valkey server and cluster, every request
checked against ElastiCache Serverless's and Azure Managed Redis OSS's rules at once.

    python tools/rules_lanes.py mongodb-rules    the MongoDB lane's --graphkeep-rules value
    python tools/rules_lanes.py main-lane-k      the main lane's -k: these files' Valkey cases
                                                  left out (the Valkey rules run runs them)
    python tools/rules_lanes.py valkey           the Valkey rules run (pytest's exit code)
    python tools/rules_lanes.py beside-mongodb   ``--backend`` arguments of the conformance
                                                  rows not on the MongoDB server (taken while
                                                  the MongoDB lane still loads it)

Left out of the Valkey run: the store's Query Engine vector-index tests (``FT.*`` is what
neither service offers; they run on redis-stack in the main lane);
tests/test_redis_script_keys.py (the same checks as a MONITOR audit of its own that breaks
them on purpose: main lane); the tests parametrized over set-ups, which run on Valkey in the
main lane; these files' DynamoDB cases, which send Redis nothing (the hot layer's over
DynamoDB do: they run). Run it on the servers of ``.services/env`` (``./dev`` sources it).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

MONGODB_RULES = "documentdb,cosmos-mongodb-vcore,cosmos-mongodb-ru"
REDIS_RULES = "elasticache-serverless,azure-redis-oss"
FILES = (
    "test_redis.py",
    "test_store_redis.py",
    "test_store_shared.py",
    "test_cache.py",
    "test_events_redis.py",
    "test_effects.py",
    "test_lock.py",
    "test_redis_watch.py",
    "test_hot.py",
    "test_check.py",
    "test_cli.py",
    "test_cli_store.py",
    "test_redis_requests.py",
)


def main_lane_k() -> str:
    """``-k`` of the main lane: not the Valkey cases of FILES (a module's file name matches
    only its own tests: ``test_cli.py`` is no part of ``test_cli_store.py``)."""
    return f"not (valkey and ({' or '.join(FILES)}))"


def valkey() -> int:
    env = dict(os.environ)
    for name in ("REDIS_URL", "GRAPHKEEP_REDIS_URL"):
        env[name] = os.environ["VALKEY_URL"]
    for name in ("REDIS_CLUSTER_URL", "GRAPHKEEP_REDIS_CLUSTER_URL"):
        env[name] = os.environ["VALKEY_CLUSTER_URL"]
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    command += ["--graphkeep-servers=env", "--graphkeep-backends=redis,redis-cluster,dynamodb"]
    command += [f"--graphkeep-rules={REDIS_RULES}", "--durations=10"]
    command += ["-m", "not mongodb and not valkey and not valkey_cluster"]
    command += ["-k", "not vector_index and (test_hot or not dynamodb)"]
    return subprocess.call(command + [f"tests/{name}" for name in FILES], env=env)


def beside_mongodb() -> str:
    """The conformance matrix's set-ups not on the MongoDB server, as ``--backend`` arguments:
    the rows a taker runs while the MongoDB lane still loads FerretDB (a row's timing cases,
    e.g. a watch's ``timeout`` between checkpoints, assume a server that answers in time;
    the MongoDB rows are taken by the lanes once their tests end)."""
    sys.path.insert(0, str(ROOT))  # run as a script: the repository's packages
    from conformance.setups import selected  # noqa: PLC0415 - only this subcommand needs it

    return " ".join(f"--backend {s.name}" for s in selected() if s.marker != "mongodb")


def main() -> int:
    what = sys.argv[1] if len(sys.argv) == 2 else ""
    if what == "mongodb-rules":
        print(MONGODB_RULES)
    elif what == "main-lane-k":
        print(main_lane_k())
    elif what == "valkey":
        return valkey()
    elif what == "beside-mongodb":
        print(beside_mongodb())
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
