"""A user's project for tests/test_service_rules.py: each test breaks one Redis-family rule on
purpose (or none), on the real servers; run by pytest with --graphkeep-rules."""

import os
import subprocess
import sys

import pytest
import redis
import redis.asyncio as aredis
from redis.cluster import RedisCluster

REDIS_URL = os.environ["REDIS_URL"]
STACK_URL = os.environ["REDIS_STACK_URL"]
CLUSTER_URL = os.environ["REDIS_CLUSTER_URL"].replace("redis+cluster://", "redis://")
UNDECLARED = "redis.call('SET', KEYS[1], '1'); return redis.call('GET', KEYS[1] .. ':built')"


@pytest.fixture(scope="session", autouse=True)
def session_request():
    """A request outside any test: fails the session, not the first test."""
    with redis.Redis.from_url(REDIS_URL) as r:
        r.eval("return 1", 0)
    yield


@pytest.fixture
def r():
    with redis.Redis.from_url(REDIS_URL) as client:
        yield client


def test_script_without_keys(r):
    r.eval("return 1", 0)


def test_function_without_keys(r):
    r.function_load(
        "#!lua name=gkrules\nredis.register_function('gkrules_f', function() return 1 end)",
        replace=True,
    )
    r.fcall("gkrules_f", 0)


def test_undeclared_key_in_script(r):
    r.eval(UNDECLARED, 1, "gkrules:{a}")


def test_undeclared_key_in_script_error_swallowed(r):
    try:  # graphkeep may swallow the service's error: the test fails all the same
        r.eval(UNDECLARED.replace("return ", "") + "; error('refused')", 1, "gkrules:{a}")
    except redis.ResponseError:
        pass


def test_undeclared_key_on_a_cluster_node():
    with RedisCluster.from_url(CLUSTER_URL) as c:
        c.eval(UNDECLARED, 1, "gkrules:{c}")  # same slot: the cluster itself allows it


async def test_undeclared_key_async():
    client = aredis.Redis.from_url(REDIS_URL)
    await client.eval(UNDECLARED, 1, "gkrules:{b}")
    await client.aclose()


def test_cross_slot_command(r):
    r.mget("gkrules:a", "gkrules:b")


def test_cross_slot_transaction(r):
    with r.pipeline(transaction=True) as p:
        p.set("gkrules:a", 1).set("gkrules:b", 1).execute()


async def test_cross_slot_transaction_async():
    client = aredis.Redis.from_url(REDIS_URL)
    async with client.pipeline(transaction=True) as p:
        await p.set("gkrules:a", 1).set("gkrules:b", 1).execute()
    await client.aclose()


def test_argument_limit(r):
    r.rpush("gkrules:list", *range(3998))  # 4,000 arguments
    r.delete("gkrules:list")


def test_restricted_command(r):
    r.config_get("maxmemory")


def test_search_command():
    with redis.Redis.from_url(STACK_URL) as stack:
        stack.execute_command("FT._LIST")


def test_json_command():
    with redis.Redis.from_url(STACK_URL) as stack:
        stack.execute_command("JSON.SET", "gkrules:j", "$", "1")
        stack.delete("gkrules:j")


# -- what the services accept passes


def test_accepted_requests(r):
    r.eval("return redis.call('GET', KEYS[1])", 1, "gkrules:{a}")
    r.eval(
        "redis.call('SET', KEYS[1], 1); return redis.call('GET', KEYS[2])",
        2,
        "gkrules:{a}1",
        "gkrules:{a}2",
    )
    r.mget("gkrules:{a}1", "gkrules:{a}2")
    with r.pipeline(transaction=False) as p:  # independent commands may span slots
        p.set("gkrules:a", 1).set("gkrules:b", 1).execute()
    with r.pipeline(transaction=True) as p:
        p.set("gkrules:{a}1", 1).set("gkrules:{a}2", 1).execute()
    r.rpush("gkrules:list", *range(3997))  # 3,999 arguments
    for key in ("gkrules:list", "gkrules:a", "gkrules:b"):
        r.delete(key)
    r.delete("gkrules:{a}1", "gkrules:{a}2")


def test_another_process_breaking_rules_is_not_ours(r):
    """Two lanes share the servers: scripts of another process are not this test's."""
    other = subprocess.Popen(
        [
            sys.executable,
            "-c",
            (
                "import redis, time\n"
                f"r = redis.Redis.from_url({REDIS_URL!r})\n"
                "end = time.time() + 2\n"
                "while time.time() < end:\n"
                f"    r.eval({UNDECLARED!r}, 1, 'gkrules:other')\n"
            ),
        ],
    )
    while other.poll() is None:
        r.eval("return redis.call('GET', KEYS[1])", 1, "gkrules:{a}")
    assert other.wait() == 0


def test_undeclared_key_behind_a_translated_address():
    """A container's published port: the server sees another address than our socket's."""
    import socket
    import threading
    from urllib.parse import urlsplit

    target = urlsplit(REDIS_URL)
    listener = socket.create_server(("127.0.0.1", 0))

    def pipe(src, dst):
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            dst.close()

    def serve():
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            upstream = socket.create_connection((target.hostname, target.port))
            threading.Thread(target=pipe, args=(client, upstream), daemon=True).start()
            threading.Thread(target=pipe, args=(upstream, client), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    port = listener.getsockname()[1]
    with redis.Redis(host="127.0.0.1", port=port) as proxied:
        proxied.eval(UNDECLARED, 1, "gkrules:{p}")
