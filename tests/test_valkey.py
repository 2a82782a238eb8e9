"""Valkey as a first-class server: Valkey's URL forms (``valkey://``, ``valkeys://``,
``valkey+cluster://``, ``valkeys+cluster://``) open the same products as the Redis forms they
stand for, on real Valkey 8 servers (``./dev services`` valkey and valkey-cluster: VALKEY_URL,
VALKEY_CLUSTER_URL; a TLS one started here). The conformance matrix's ``valkey`` and
``valkey-cluster`` rows run every product's contract there; the plugin's valkey backends are
tests/test_testing_plugin.py's."""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from langgraph.checkpoint.base import empty_checkpoint

import graphkeep
from graphkeep.backends.redis.client import describe, sync_client
from graphkeep.cli import main as cli_main
from graphkeep.connect import PRODUCTS, SCHEMES, class_for
from graphkeep.errors import ConfigurationError, mask_url
from graphkeep.port.urls import VALKEY_SCHEMES, redis_form
from graphkeep.testing.addresses import free_ports
from graphkeep.testing.probes import wait
from graphkeep.testing.processes import Server

VALKEY_URL = os.environ.get("VALKEY_URL", "redis://127.0.0.1:16390/0")
VALKEY_CLUSTER_URL = os.environ.get("VALKEY_CLUSTER_URL", "redis+cluster://127.0.0.1:17101")
VALKEY_SERVER = shutil.which("valkey-server") or "valkey-server"

#: each Valkey server, its Redis-form URL and the same URL written as Valkey writes it
SERVERS = [
    pytest.param(VALKEY_URL, "valkey", id="valkey", marks=pytest.mark.valkey),
    pytest.param(
        VALKEY_CLUSTER_URL, "valkey+cluster", id="valkey-cluster", marks=pytest.mark.valkey_cluster
    ),
]


def as_valkey(url: str, scheme: str) -> str:
    return f"{scheme}://{url.partition('://')[2]}"


def server_info(url: str) -> dict[str, Any]:
    client = sync_client(url)
    try:
        info: Any = client.info("server")
    finally:
        client.close()
    if "valkey_version" not in info:  # a cluster client answers per node
        info = next(iter(info.values()))
    return dict(info)


@pytest.mark.parametrize(("url", "scheme"), SERVERS)
def test_the_servers_are_valkey_8(url: str, scheme: str) -> None:
    """What these tests and the matrix's valkey rows run on is Valkey, not a Redis."""
    for form in (url, as_valkey(url, scheme)):
        info = server_info(form)
        assert str(info.get("server_name")) == "valkey", info
        assert str(info["valkey_version"]).startswith("8."), info


def test_each_valkey_scheme_is_the_redis_form_it_stands_for() -> None:
    assert VALKEY_SCHEMES == {
        "valkey": "redis",
        "valkeys": "rediss",
        "valkey+cluster": "redis+cluster",
        "valkeys+cluster": "rediss+cluster",
    }
    assert redis_form("valkeys://:pw@h:6380/2?key_prefix=a") == "rediss://:pw@h:6380/2?key_prefix=a"
    assert redis_form("VALKEY+CLUSTER://h:7000") == "redis+cluster://h:7000"
    assert redis_form("redis://h/0") == "redis://h/0"
    assert redis_form("mongodb://valkey://x") == "mongodb://valkey://x"
    for alias, redis_scheme in VALKEY_SCHEMES.items():
        assert SCHEMES[alias] == SCHEMES[redis_scheme]
        for product in PRODUCTS:
            for is_async in (False, True):
                found = class_for(f"{alias}://h", product, is_async=is_async)
                assert found is class_for(f"{redis_scheme}://h", product, is_async=is_async)
    assert mask_url("valkeys://user:secret@h:6380/0") == "valkeys://user:***@h:6380/0"
    assert mask_url("valkey+cluster://:secret@h:7000") == "valkey+cluster://:***@h:7000"


def test_a_bad_valkey_url_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match=r"bad Redis URL valkey://:\*\*\*@h:port"):
        sync_client("valkey://:secret@h:port/0")
    with pytest.raises(ConfigurationError, match="unsupported URL scheme 'valkeyy'"):
        graphkeep.connect("valkeyy://h:6379/0")


def checkpoint_round_trip(write: str, read: str, prefix: str) -> None:
    config = {"configurable": {"thread_id": "t1", "checkpoint_ns": ""}}
    checkpoint = empty_checkpoint()
    with graphkeep.connect(write, key_prefix=prefix) as saver:
        saver.put(config, checkpoint, {"source": "input", "step": -1}, {})
    with graphkeep.connect(read, key_prefix=prefix) as saver:
        found = saver.get_tuple({"configurable": {"thread_id": "t1"}})
        assert found is not None and found.checkpoint["id"] == checkpoint["id"]


@pytest.mark.parametrize(("url", "scheme"), SERVERS)
def test_every_product_opens_the_same_on_the_valkey_form_as_on_the_redis_form(
    url: str, scheme: str
) -> None:
    alias, prefix = as_valkey(url, scheme), f"gk-valkey-{uuid.uuid4().hex[:10]}"
    openers = (
        graphkeep.connect,
        graphkeep.connect_store,
        graphkeep.connect_cache,
        graphkeep.connect_events,
        graphkeep.connect_effects,
    )
    for opener in openers:
        with opener(url, key_prefix=prefix) as on_redis, opener(alias, key_prefix=prefix) as on:
            assert type(on) is type(on_redis)
            assert describe(on.client) == describe(on_redis.client)
    # what one form writes, the other reads: the same server, the same keys
    checkpoint_round_trip(url, alias, prefix)
    checkpoint_round_trip(alias, url, prefix + "b")
    with graphkeep.connect_store(url, key_prefix=prefix) as store:
        store.put(("users", "a"), "prefs", {"theme": "dark"})
    with graphkeep.connect_store(alias, key_prefix=prefix) as store:
        item = store.get(("users", "a"), "prefs")
        assert item is not None and item.value == {"theme": "dark"}
    with graphkeep.connect_events(alias, key_prefix=prefix) as events:
        appended = events.append("run-1", {"event": "started"})
    with graphkeep.connect_events(url, key_prefix=prefix) as events:
        read = list(events.read("run-1", follow=False))
        assert read == [(appended, {"event": "started"})]
    drop(url, prefix)


@pytest.mark.valkey
@pytest.mark.valkey_cluster
async def test_the_async_products_open_on_the_valkey_forms() -> None:
    prefix = f"gk-valkey-{uuid.uuid4().hex[:10]}"
    for url, scheme in ((VALKEY_URL, "valkey"), (VALKEY_CLUSTER_URL, "valkey+cluster")):
        config = {"configurable": {"thread_id": "t1", "checkpoint_ns": ""}}
        checkpoint = empty_checkpoint()
        async with graphkeep.aconnect(as_valkey(url, scheme), key_prefix=prefix) as saver:
            await saver.aput(config, checkpoint, {"source": "input", "step": -1}, {})
        async with graphkeep.aconnect(url, key_prefix=prefix) as saver:
            found = await saver.aget_tuple({"configurable": {"thread_id": "t1"}})
            assert found is not None and found.checkpoint["id"] == checkpoint["id"]
        async with graphkeep.aconnect_store(as_valkey(url, scheme), key_prefix=prefix) as store:
            await store.aput(("ns",), "k", {"v": 1})
            item = await store.aget(("ns",), "k")
            assert item is not None and item.value == {"v": 1}
        drop(url, prefix)


@pytest.mark.valkey
@pytest.mark.valkey_cluster
def test_the_hot_layer_and_the_cli_take_the_valkey_form(
    capsys: pytest.CaptureFixture[str],
) -> None:
    prefix = f"gk-valkey-{uuid.uuid4().hex[:10]}"
    alias = as_valkey(VALKEY_URL, "valkey")
    checkpoint_round_trip(VALKEY_URL, alias, prefix)
    assert cli_main(["threads", f"{alias}?key_prefix={prefix}", "--json"]) == 0
    assert '"t1"' in capsys.readouterr().out
    assert cli_main(["threads", f"valkeyy://{alias.partition('://')[2]}"]) == 2
    assert "unsupported URL scheme 'valkeyy'" in capsys.readouterr().err
    # a hot layer on the valkey+cluster form, over DynamoDB: its reads are served by Valkey
    endpoint = os.environ.get("DYNAMODB_ENDPOINT_URL", "http://127.0.0.1:15000")
    durable = f"dynamodb://graphkeep_test?region=us-east-1&endpoint_url={endpoint}"
    hot = as_valkey(VALKEY_CLUSTER_URL, "valkey+cluster")
    config = {"configurable": {"thread_id": "hot-1", "checkpoint_ns": ""}}
    checkpoint = empty_checkpoint()
    with graphkeep.connect(durable, key_prefix=prefix, hot=hot) as saver:
        saver.put(config, checkpoint, {"source": "input", "step": -1}, {})
        for _ in range(3):
            found = saver.get_tuple({"configurable": {"thread_id": "hot-1"}})
            assert found is not None and found.checkpoint["id"] == checkpoint["id"]
        assert saver.reads["hit"] >= 2, saver.reads
        saver.delete_thread("hot-1")
    drop(VALKEY_URL, prefix)
    drop(VALKEY_CLUSTER_URL, prefix)


def drop(url: str, prefix: str) -> None:
    client = sync_client(url)
    try:
        kwargs = {"target_nodes": "all"} if "cluster" in url else {}
        for key in client.scan_iter(match=f"*{prefix}*", count=1000, **kwargs):
            client.delete(key)
    finally:
        client.close()


# -- valkeys:// : a Valkey server with TLS, started here ----------------------------------


@pytest.fixture
def tls_valkey(tmp_path: Path) -> Iterator[tuple[int, Path]]:
    """valkey-server on a TLS-only loopback port with a certificate of a CA made here: the
    port and the CA's certificate."""
    for name, subject in (("ca", "/CN=graphkeep test CA"), ("server", "/CN=127.0.0.1")):
        key, cert = tmp_path / f"{name}.key", tmp_path / f"{name}.crt"
        if name == "ca":
            command = ["req", "-x509", "-new", "-nodes", "-days", "1", "-subj", subject]
            command += ["-newkey", "rsa:2048", "-keyout", key, "-out", cert]
        else:
            request = tmp_path / "server.csr"
            subprocess.run(
                ["openssl", "req", "-new", "-nodes", "-subj", subject, "-newkey", "rsa:2048"]
                + ["-keyout", str(key), "-out", str(request)],
                check=True,
                capture_output=True,
            )
            (tmp_path / "san.ext").write_text("subjectAltName=IP:127.0.0.1\n")
            command = ["x509", "-req", "-in", request, "-CA", tmp_path / "ca.crt"]
            command += ["-CAkey", tmp_path / "ca.key", "-CAcreateserial", "-days", "1"]
            command += ["-extfile", tmp_path / "san.ext", "-out", cert]
        subprocess.run(["openssl", *map(str, command)], check=True, capture_output=True)
    port = free_ports(1)[0]
    command = [VALKEY_SERVER, "--port", "0", "--tls-port", str(port), "--bind", "127.0.0.1"]
    command += ["--tls-cert-file", str(tmp_path / "server.crt")]
    command += ["--tls-key-file", str(tmp_path / "server.key")]
    command += ["--tls-ca-cert-file", str(tmp_path / "ca.crt"), "--tls-auth-clients", "no"]
    command += ["--save", "", "--appendonly", "no", "--dir", str(tmp_path)]
    ca = tmp_path / "ca.crt"

    def ready() -> bool:
        with redis.Redis(host="127.0.0.1", port=port, ssl=True, ssl_ca_certs=str(ca)) as client:
            return bool(client.ping())

    server = Server("valkey-tls", port, command, ready, tmp_path, session=True)
    server.up()
    try:
        wait("valkey-server with TLS", ready)
        yield port, ca
    finally:
        server.down()


@pytest.mark.valkey
def test_valkeys_is_rediss_on_a_valkey_server_with_tls(tls_valkey: tuple[int, Path]) -> None:
    port, ca = tls_valkey
    query = f"ssl_ca_certs={ca}"
    prefix = f"gk-valkey-{uuid.uuid4().hex[:10]}"
    rediss, valkeys = (f"{s}://127.0.0.1:{port}/0?{query}" for s in ("rediss", "valkeys"))
    assert server_info(valkeys)["server_name"] == "valkey"
    checkpoint_round_trip(rediss, valkeys, prefix)
    checkpoint_round_trip(valkeys, rediss, prefix + "b")
    # the alias keeps the TLS of its Redis form: the same port in clear text does not answer
    with pytest.raises(graphkeep.errors.StorageUnavailable):
        with graphkeep.connect(f"valkey://127.0.0.1:{port}/0", setup=True) as saver:
            saver.get_tuple({"configurable": {"thread_id": "t1"}})
