"""A Redis Cluster made from cluster-enabled nodes on 127.0.0.1 ports, the same way for local
processes and for one container with its ports bound 1:1."""

from __future__ import annotations

from collections.abc import Callable

from graphkeep.testing.addresses import redis_cluster_url, redis_url
from graphkeep.testing.probes import (
    START_TIMEOUT,
    cluster_info,
    cluster_ok,
    not_exited,
    redis_ping,
    wait,
)

SLOTS = 16384


def form_cluster(
    what: str,
    ports: list[int],
    exited: Callable[[], str | None] = not_exited,
    timeout: float = START_TIMEOUT,
) -> str:
    """The cluster-enabled nodes on 127.0.0.1 ``ports`` (local processes, or one container with
    its ports bound 1:1) as one cluster: empty nodes get the slots split evenly and meet the
    first; nodes restarted from their ``nodes.conf`` re-form by themselves."""
    import redis

    nodes = [redis_url("127.0.0.1", p) for p in ports]
    wait(f"{what} nodes", lambda: all(map(redis_ping, nodes)), exited, timeout)
    blank = {"cluster_known_nodes": "1", "cluster_slots_assigned": "0"}
    if not cluster_ok(ports[0]) and all(blank.items() <= cluster_info(p).items() for p in ports):
        share = SLOTS // len(ports)
        for i, port in enumerate(ports):
            last = SLOTS if i == len(ports) - 1 else (i + 1) * share
            with redis.Redis(host="127.0.0.1", port=port) as node:
                node.execute_command("CLUSTER", "ADDSLOTS", *range(i * share, last))
                if i:
                    node.execute_command("CLUSTER", "MEET", "127.0.0.1", ports[0])
    wait(what, lambda: cluster_ok(ports[0]), exited, timeout)
    return redis_cluster_url(ports[0])
