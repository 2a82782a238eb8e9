"""The long-lived servers of ``./dev services`` (tools/devenv.py on graphkeep.testing's
:class:`~graphkeep.testing.processes.Server`), on real processes: fixed ports (free ones here),
their files under one directory (a temporary one here, not .services/), recognised by their pid
file by the next invocation; a port held by another process is refused and left alone."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pymongo
import pytest
import redis

from graphkeep.testing.addresses import free_ports
from graphkeep.testing.cluster import form_cluster
from graphkeep.testing.errors import PortInUse
from graphkeep.testing.local import backend_servers
from graphkeep.testing.processes import Server, alive, port_taken
from tools import devenv

REDIS_SERVER = shutil.which("redis-server") or "redis-server"
REPO = Path(__file__).resolve().parents[1]


def ferretdb_program() -> str:
    """The FerretDB of ``./dev services`` (a git worktree has no .services/bin of its own)."""
    program = os.environ.get("GRAPHKEEP_MONGODB_SERVER", "")
    return program if "ferretdb" in program else str(REPO / ".services" / "bin" / "ferretdb")


def redis_service(home: Path, port: int) -> tuple[str, Server]:
    """``./dev services``' Redis (its server as a new invocation of ./dev builds it)."""
    url, [server] = backend_servers("redis", [REDIS_SERVER], [port], home, session=False)
    return url, server


@pytest.fixture
def started() -> Iterator[list[Server]]:
    """Servers a test starts, stopped at its end whatever happens."""
    servers: list[Server] = []
    yield servers
    for server in servers:
        server.down()


@pytest.fixture
def foreign() -> Iterator[tuple[int, subprocess.Popen[bytes]]]:
    """A process that is not ours listening on a free port (its command line does not name it)."""
    port = free_ports(1)[0]
    listen = (
        "import os, socket, time\n"
        "s = socket.create_server(('127.0.0.1', int(os.environ['FOREIGN_PORT'])))\n"
        "time.sleep(300)\n"
    )
    process = subprocess.Popen(
        [sys.executable, "-c", listen], env={**os.environ, "FOREIGN_PORT": str(port)}
    )
    deadline = time.monotonic() + 20
    while not port_taken(port):
        assert process.poll() is None and time.monotonic() < deadline, "the listener did not start"
        time.sleep(0.05)
    yield port, process
    process.kill()
    process.wait()


def test_up_is_idempotent_and_a_restart_keeps_the_data(
    tmp_path: Path, started: list[Server]
) -> None:
    url, server = redis_service(tmp_path, free_ports(1)[0])
    started.append(server)
    assert server.up() is True
    pid = server.pid()
    assert pid is not None and server.pidfile.read_text().strip() == str(pid)
    with redis.Redis.from_url(url) as client:
        client.set("kept", "yes")

    _, again = redis_service(tmp_path, server.port)  # the next ./dev invocation
    assert again.up() is False and again.pid() == pid, "a second up started another server"
    assert again.down() is True
    assert not alive(pid) and again.pid() is None and not again.pidfile.exists()
    assert again.down() is False  # nothing of ours runs: nothing to stop

    assert again.up() is True and again.pid() != pid
    started.append(again)
    with redis.Redis.from_url(url) as client:
        assert client.get("kept") == b"yes", "the append-only file did not survive the restart"


def test_a_server_outlives_the_process_that_started_it(
    tmp_path: Path, started: list[Server]
) -> None:
    port = free_ports(1)[0]
    script = (
        "import sys\nfrom pathlib import Path\n"
        "from graphkeep.testing.local import backend_servers\n"
        "_, [server] = backend_servers('redis', [sys.argv[1]], [int(sys.argv[2])],"
        " Path(sys.argv[3]), session=False)\n"
        "assert server.up()\n"
    )
    subprocess.run(
        [sys.executable, "-c", script, REDIS_SERVER, str(port), str(tmp_path)], check=True
    )
    _, server = redis_service(tmp_path, port)
    started.append(server)
    pid = server.pid()
    assert pid is not None and server.ready()
    assert server.down() is True and not alive(pid)


def test_a_foreign_process_on_the_port_is_refused_and_never_stopped(
    tmp_path: Path, foreign: tuple[int, subprocess.Popen[bytes]]
) -> None:
    port, process = foreign
    _, server = redis_service(tmp_path, port)
    with pytest.raises(PortInUse) as refused:
        server.up()
    assert str(refused.value).startswith(
        f"port {port} (for redis) is already in use by a process that is not ours:"
        f" pid {process.pid} ({sys.executable} -c"
    )
    # a pid file naming it (a stale one whose pid was reused) does not make it ours
    server.pidfile.parent.mkdir(parents=True, exist_ok=True)
    server.pidfile.write_text(f"{process.pid}\n")
    assert server.pid() is None
    assert server.down() is False
    assert process.poll() is None, "down stopped a process that is not ours"


def test_dev_services_up_says_what_it_did_and_status_sees_only_ours(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    foreign: tuple[int, subprocess.Popen[bytes]],
) -> None:
    monkeypatch.setattr(devenv, "SVC", tmp_path)
    monkeypatch.delenv("REDIS_URL", raising=False)
    port = free_ports(1)[0]
    monkeypatch.setenv("GK_REDIS_PORT", str(port))
    assert devenv.status("redis") == "down"
    try:
        devenv.service_up("redis")
        devenv.service_up("redis")
        assert capsys.readouterr().err.splitlines() == [
            f"==> redis up on 127.0.0.1:{port}",
            f"==> redis already running on 127.0.0.1:{port}",
        ]
        [server] = devenv.servers("redis")
        assert devenv.status("redis") == f"up    pid {server.pid()}"
        assert (tmp_path / "logs" / "redis.log").is_file()
        assert (tmp_path / "run" / f"redis-{port}.pid").is_file()
    finally:
        devenv.servers("redis")[0].down()
    assert devenv.status("redis") == "down"

    monkeypatch.setenv("GK_REDIS_PORT", str(foreign[0]))
    with pytest.raises(devenv.Failed) as refused:
        devenv.service_up("redis")
    assert "is already in use by a process that is not ours" in str(refused.value)
    assert str(refused.value).endswith(
        "Stop it, pick another port (GK_REDIS_PORT), or point REDIS_URL at that server yourself."
    )
    assert devenv.status("redis") == "down"
    monkeypatch.setenv("REDIS_URL", "redis://elsewhere:6379/0")  # the user's own server
    devenv.service_up("redis")
    assert "using REDIS_URL=redis://elsewhere:6379/0 (set by you;" in capsys.readouterr().err


def test_a_cluster_restarted_from_its_files_forms_again(
    tmp_path: Path, started: list[Server]
) -> None:
    ports = free_ports(3)
    url, nodes = backend_servers("redis-cluster", [REDIS_SERVER], ports, tmp_path, session=False)
    started += nodes
    assert all(node.up() for node in nodes)
    assert form_cluster("cluster", ports) == url
    with redis.RedisCluster(host="127.0.0.1", port=ports[0]) as cluster:
        cluster.set("kept", "yes")
    for node in nodes:
        node.down()
    assert all(node.up() for node in nodes)
    form_cluster("cluster", ports)  # the nodes' nodes.conf: no slots handed out again
    with redis.RedisCluster(host="127.0.0.1", port=ports[0]) as cluster:
        assert cluster.get("kept") == b"yes"


def test_a_server_that_ignores_its_stop_signals_is_killed(tmp_path: Path) -> None:
    port = free_ports(1)[0]
    ignore = f"trap '' INT TERM; while :; do sleep 0.1; done # {port}"
    server = Server("sh", port, ["sh", "-c", ignore], lambda: True, tmp_path)
    server.stop_signals = ((signal.SIGINT, 0.5), (signal.SIGTERM, 0.5))  # PostgreSQL's kind
    server.spawn()
    pid = server.pid()
    assert pid is not None
    time.sleep(0.2)  # the traps are set
    assert server.down() is True and not alive(pid)


def test_the_default_ports_and_the_cluster_bus_ports_never_collide() -> None:
    """Every service's default port, the clusters' next two and each cluster node's bus port
    (port + 10000) are distinct: the valkey services start beside all the others."""
    taken: list[int] = []
    for name, service in devenv.SERVICES.items():
        ports = [service.default_port + i for i in range(3 if name in devenv.CLUSTERS else 1)]
        taken += ports + [p + 10000 for p in ports if name in devenv.CLUSTERS]
    assert len(taken) == len(set(taken)), sorted(taken)
    assert devenv.SERVICES["valkey"].default_port == 16390
    assert devenv.SERVICES["valkey-cluster"].default_port == 17101
    assert {"valkey", "valkey-cluster"} <= set(devenv.resolve([]))  # started by default


def free_cluster_base() -> int:
    """A port whose next two and the three bus ports (+10000) are free too."""
    while True:
        base = free_ports(1)[0]
        wanted = [base + i for i in range(3)]
        if not any(map(port_taken, [*wanted, *(p + 10000 for p in wanted)])):
            return base


def test_dev_services_run_valkey_and_a_valkey_cluster_and_export_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(devenv, "SVC", tmp_path)
    for variable in ("VALKEY_URL", "VALKEY_CLUSTER_URL"):
        monkeypatch.delenv(variable, raising=False)
    single, base = free_ports(1)[0], free_cluster_base()
    monkeypatch.setenv("GK_VALKEY_PORT", str(single))
    monkeypatch.setenv("GK_VALKEY_CLUSTER_PORT", str(base))
    try:
        devenv.service_up("valkey")
        devenv.service_up("valkey-cluster")
        err = capsys.readouterr().err
        assert f"==> valkey up on 127.0.0.1:{single}" in err
        assert (
            f"==> valkey-cluster up (cluster_state:ok) on 127.0.0.1:{base} {base + 1} {base + 2}"
            in err
        )
        assert devenv.status("valkey") == f"up    pid {devenv.servers('valkey')[0].pid()}"
        assert devenv.status("valkey-cluster") == "up    3/3 nodes, cluster_state:ok"
        exports = devenv.env_exports()
        assert exports["VALKEY_URL"] == exports["GRAPHKEEP_VALKEY_URL"]
        assert exports["VALKEY_URL"] == f"redis://127.0.0.1:{single}/0"
        assert exports["GRAPHKEEP_VALKEY_CLUSTER_URL"] == f"redis+cluster://127.0.0.1:{base}"
        with redis.Redis(host="127.0.0.1", port=single) as client:
            assert client.info("server")["server_name"] == "valkey"
        with redis.RedisCluster(host="127.0.0.1", port=base) as cluster:
            cluster.set("kept", "yes")
            assert cluster.get("kept") == b"yes"
        assert (tmp_path / "valkey-cluster" / str(base) / "nodes.conf").is_file()
    finally:
        for name in ("valkey", "valkey-cluster"):
            for server in devenv.servers(name):
                server.down()
    assert devenv.status("valkey") == devenv.status("valkey-cluster") == "down"


def environment_of(pid: int) -> dict[str, str]:
    entries = Path(f"/proc/{pid}/environ").read_bytes().decode().split("\0")
    return dict(entry.split("=", 1) for entry in entries if "=" in entry)


def test_ferretdb_collects_garbage_near_a_memory_limit_unless_the_environment_says_otherwise(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, started: list[Server]
) -> None:
    """FerretDB (the MongoDB tests' server: ./dev services and the plugin's local mode) runs
    with GOGC=off and GOMEMLIMIT=1GiB (graphkeep.testing.local.FERRETDB_ENVIRONMENT: a third
    less of its CPU); a value this process's environment sets wins."""
    monkeypatch.delenv("GOGC", raising=False)
    monkeypatch.setenv("GOMEMLIMIT", "768MiB")
    port = free_ports(1)[0]
    url, [server] = backend_servers("mongodb", [ferretdb_program()], [port], tmp_path, session=True)
    started.append(server)
    assert server.up() is True
    pid = server.pid()
    assert pid is not None
    environment = environment_of(pid)
    assert environment["GOGC"] == "off"
    assert environment["GOMEMLIMIT"] == "768MiB"  # the environment's, not the default 1GiB
    assert environment["PATH"] == os.environ["PATH"]  # the rest of the environment is kept
    with pymongo.MongoClient(url, serverSelectionTimeoutMS=10_000) as client:
        client.gk_env.probe.insert_one({"_id": "x"})
        assert client.gk_env.probe.find_one({"_id": "x"}) == {"_id": "x"}
    monkeypatch.delenv("GOMEMLIMIT")
    server.down()
    assert server.up() is True
    pid = server.pid()
    assert pid is not None
    assert environment_of(pid)["GOMEMLIMIT"] == "1GiB"


def test_ferretdb_finds_a_document_by_id_through_its_id_index(
    tmp_path: Path, started: list[Server]
) -> None:
    """FerretDB as ./dev builds it (tools/devenv.py FERRETDB_PATCHES) looks a document up by
    ``_id`` through the collection's ``_id`` index, not by parsing every document of the table,
    also when the filter names more fields than ``_id``: its ``explain`` gives SQLite's plan of
    the lookup (FerretDB 1.24.2 as released: ``SCAN``). What the lookups find is unchanged:
    string and ObjectId ids, a find, a conditional update, an upsert, a delete."""
    port = free_ports(1)[0]
    url, [server] = backend_servers("mongodb", [ferretdb_program()], [port], tmp_path, session=True)
    started.append(server)
    assert server.up() is True
    with pymongo.MongoClient(url, serverSelectionTimeoutMS=10_000) as client:
        probe = client.gk_index.probe
        probe.insert_many([{"_id": f"k{i}", "n": i} for i in range(50)])
        oid = probe.insert_one({"n": "oid"}).inserted_id
        for query in ({"_id": "k7"}, {"_id": oid}, {"_id": "k7", "n": 7}, {"n": 7, "_id": "k7"}):
            find = {"find": "probe", "filter": query}
            explained = client.gk_index.command("explain", find)
            plan = " | ".join(explained["queryPlanner"]["Plan"])
            assert "SEARCH" in plan and "USING INDEX" in plan and "__id_" in plan, plan
            assert "SCAN" not in plan, plan
        assert probe.find_one({"_id": "k7"}) == {"_id": "k7", "n": 7}
        assert probe.find_one({"_id": oid}) == {"_id": oid, "n": "oid"}
        assert probe.find_one({"_id": "k70"}) is None
        assert probe.find_one({"_id": "k7", "n": 7}) == {"_id": "k7", "n": 7}
        assert probe.find_one({"_id": "k7", "n": 8}) is None
        assert probe.find_one({"_id": "k7", "n": {"$gt": 6}, "$or": [{"n": 7}]}) is not None
        assert probe.find_one({"_id": "k7", "n": {"$gt": 7}}) is None
        assert probe.update_one({"_id": "k6", "n": 5}, {"$set": {"n": 60}}).matched_count == 0
        assert probe.update_one({"_id": "k6", "n": 6}, {"$set": {"n": 60}}).matched_count == 1
        assert probe.delete_one({"_id": "k5", "n": 6}).deleted_count == 0
        probe.update_one({"_id": "k8"}, {"$set": {"n": 80}})
        probe.update_one({"_id": "k99"}, {"$set": {"n": 99}}, upsert=True)
        probe.update_one({"_id": "k98", "n": 98}, {"$set": {"m": 1}}, upsert=True)
        assert probe.find_one({"_id": "k98"}) == {"_id": "k98", "n": 98, "m": 1}
        probe.delete_one({"_id": "k9"})
        assert {
            d["_id"]: d["n"] for d in probe.find({"_id": {"$in": ["k6", "k8", "k9", "k99"]}})
        } == {
            "k6": 60,
            "k8": 80,
            "k99": 99,
        }
        assert probe.count_documents({}) == 52
