"""TLS, tested (docs/security.md, "TLS"): every product, sync and async, over TLS-only servers
the tests start with certificates they make (tests/tls_servers.py) — Redis 7 and Valkey 8
(``rediss://…?ssl_ca_certs=…&ssl_certfile=…&ssl_keyfile=…&ssl_cert_reqs=required``), a TLS
Redis Cluster and Valkey Cluster (``rediss+cluster://``), FerretDB's TLS listener
(``tls=true&tlsCAFile=…``) and moto_server over HTTPS (``verify=`` the CA bundle).

A certificate the client does not trust, a wrong host name, or TLS against a plain port is
``StorageUnavailable`` saying TLS and what failed (never "is the server running?", never a
driver's exception), at the first attempt (not retried) and within the connect timeout; a
misspelt TLS option is a ``ConfigurationError`` naming the known ones; passwords stay masked.

The servers are the module's (started once, on first use: about 8 s for all six).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Callable, Iterator
from urllib.parse import quote, urlsplit, urlunsplit

import pytest

import graphkeep
from graphkeep.errors import ConfigurationError, StorageUnavailable
from graphkeep.testing.rules import unchecked
from tests.conftest import REDIS_CLUSTER_URL, REDIS_URL, unique_prefix
from tests.least_privilege_workload import PRODUCTS, run_async, run_sync
from tests.tls_servers import TlsServers

VALKEY_URL = os.environ.get("VALKEY_URL", "redis://127.0.0.1:16390/0")
VALKEY_CLUSTER_URL = os.environ.get("VALKEY_CLUSTER_URL", "redis+cluster://127.0.0.1:17101")
DYNAMODB_ENDPOINT_URL = os.environ.get("DYNAMODB_ENDPOINT_URL", "http://127.0.0.1:15000")

BACKENDS = [
    pytest.param("redis", id="redis", marks=pytest.mark.redis),
    pytest.param("valkey", id="valkey", marks=pytest.mark.valkey),
    pytest.param("redis-cluster", id="redis-cluster", marks=pytest.mark.cluster),
    pytest.param("valkey-cluster", id="valkey-cluster", marks=pytest.mark.valkey_cluster),
    pytest.param("mongodb", id="mongodb", marks=pytest.mark.mongodb),
    pytest.param("dynamodb", id="dynamodb", marks=pytest.mark.dynamodb),
]
#: the plain (non-TLS) port of each Redis family backend: the session's own servers
PLAIN_REDIS = {
    "redis": REDIS_URL,
    "valkey": VALKEY_URL,
    "redis-cluster": REDIS_CLUSTER_URL,
    "valkey-cluster": VALKEY_CLUSTER_URL,
}
#: a connect timeout the plain-port cases set (the failure must come within it, once)
CONNECT_TIMEOUT_S = 1.0
#: how long a failure that needs no timeout may take on a loaded machine
QUICK_S = 4.0
SECRET = "s3cret-pw"


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsServers]:
    servers = TlsServers(tmp_path_factory.mktemp("tls"))
    try:
        yield servers
    finally:
        servers.close()


# -- every product, sync and async, over TLS ---------------------------------------------


@pytest.mark.parametrize("product", PRODUCTS)
@pytest.mark.parametrize("backend", BACKENDS)
def test_every_product_runs_sync_and_async_over_tls(
    tls: TlsServers, backend: str, product: str
) -> None:
    url = tls.url(backend)
    prefix = unique_prefix("tls")
    # the managed services' rules (the MongoDB lane's --graphkeep-rules) are not checked on the
    # TLS listener: the rules checker's own probes reach it without TLS; every other MongoDB
    # test checks the same requests
    with unchecked() if backend == "mongodb" else contextlib.nullcontext():
        run_sync(product, url, prefix)
        asyncio.run(run_async(product, url, prefix))


# -- failures: untrusted certificate, wrong host name, TLS against a plain port ------------


def _with_password(url: str) -> str:
    """``url`` with a user and :data:`SECRET` (the failures come before authentication; a
    DynamoDB endpoint takes none: its URL is as it was)."""
    parts = urlsplit(url)
    if parts.scheme == "dynamodb":
        return url
    return urlunsplit(parts._replace(netloc=f"app:{SECRET}@{parts.netloc}"))


def _untrusted(tls: TlsServers, backend: str) -> str:
    url = tls.url(backend)
    for safe in ("", "/"):  # the CA's path as the URL spells it (quoted, or with its slashes)
        url = url.replace(
            quote(str(tls.certs.ca), safe=safe), quote(str(tls.certs.other_ca), safe=safe)
        )
    assert str(tls.certs.other_ca.name) in url
    return url


def _wrong_host(tls: TlsServers, backend: str) -> str:
    """The same server by a name its certificate (127.0.0.1 only) does not list: 127.0.0.2
    for the Redis family (a Cluster client reads ``localhost`` as 127.0.0.1), else
    localhost."""
    other = "127.0.0.2" if backend in PLAIN_REDIS else "localhost"
    return tls.url(backend).replace("127.0.0.1", other)


def _plain_port(tls: TlsServers, backend: str) -> str:
    """TLS (the same options) against a port that speaks the protocol without TLS."""
    url = tls.url(backend)
    parts = urlsplit(url)
    if backend in PLAIN_REDIS:
        plain = urlsplit(PLAIN_REDIS[backend]).netloc
        # redis-py shakes hands under socket_timeout (after socket_connect_timeout's connect)
        timeout = CONNECT_TIMEOUT_S
        query = f"{parts.query}&socket_connect_timeout={timeout}&socket_timeout={timeout}"
        return urlunsplit(parts._replace(netloc=plain, query=query))
    if backend == "mongodb":
        query = f"{parts.query}&connectTimeoutMS={int(CONNECT_TIMEOUT_S * 1000)}"
        return urlunsplit(parts._replace(netloc=tls.plain["mongodb"], query=query))
    https = DYNAMODB_ENDPOINT_URL.replace("http://", "https://")
    return url.split("&endpoint_url=")[0] + f"&endpoint_url={quote(https, safe='')}"


FAILURES: dict[str, tuple[Callable[[TlsServers, str], str], str, float]] = {
    "untrusted": (_untrusted, "certificate is not trusted", QUICK_S),
    "wrong-host": (_wrong_host, "wrong host name", QUICK_S),
    # retried, it would take 4 connect timeouts and 0.75 s of pauses (Redis; MongoDB more)
    "plain-port": (_plain_port, "a plain, non-TLS port?", CONNECT_TIMEOUT_S + 2.5),
}


def _check(exc: BaseException, expected: str, took: float, within: float) -> None:
    message = str(exc)
    assert type(exc) is StorageUnavailable, repr(exc)
    assert "TLS connection failed" in message and expected in message, message
    assert "running and reachable" not in message, message
    assert SECRET not in message, message
    assert took < within, f"took {took:.2f}s: {message}"


@pytest.mark.parametrize("failure", list(FAILURES))
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_tls_failure_says_tls_and_what_failed_at_once(
    tls: TlsServers, backend: str, failure: str
) -> None:
    make, expected, within = FAILURES[failure]
    url = _with_password(make(tls, backend))
    started = time.monotonic()
    with pytest.raises(StorageUnavailable) as raised:
        with graphkeep.connect(url, key_prefix=unique_prefix("tlsbad")):
            pass
    _check(raised.value, expected, time.monotonic() - started, within)

    async def open_async() -> None:
        async with graphkeep.aconnect_store(url, key_prefix=unique_prefix("tlsbad")):
            pass

    started = time.monotonic()
    with pytest.raises(StorageUnavailable) as raised:
        asyncio.run(open_async())
    _check(raised.value, expected, time.monotonic() - started, within)


# -- misspelt TLS options --------------------------------------------------------------


def _misspelt(tls: TlsServers, backend: str) -> tuple[str, str, str]:
    """``backend``'s TLS URL with one TLS option misspelt: (url, the misspelling, the right
    name the error must offer)."""
    url = tls.url(backend)
    if backend in PLAIN_REDIS:
        return url.replace("ssl_ca_certs=", "ssl_ca_cert="), "ssl_ca_cert", "ssl_ca_certs"
    if backend == "mongodb":
        return url.replace("tlsCAFile=", "tlsCAFiel="), "tlsCAFiel", "tlsCAFile"
    return url.replace("&verify=", "&verfy="), "verfy", "verify"


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_misspelt_tls_option_is_a_configuration_error_naming_the_known_ones(
    tls: TlsServers, backend: str
) -> None:
    url, wrong, right = _misspelt(tls, backend)
    url = _with_password(url).replace("?", f"?ssl_password={SECRET}&", 1)
    if backend == "mongodb":  # PyMongo's own spelling of a key file password
        url = url.replace("ssl_password=", "tlsCertificateKeyFilePassword=")
    if backend == "dynamodb":  # its password: the endpoint URL's, inside the query
        url = url.replace(f"ssl_password={SECRET}&", "")
        url = url.replace("https%3A%2F%2F", f"https%3A%2F%2Fapp%3A{SECRET}%40")
        assert SECRET in url
    with pytest.raises(ConfigurationError) as raised:
        with graphkeep.connect_cache(url):
            pass
    _check_refusal(raised.value, wrong, right)
    with pytest.raises(ConfigurationError) as raised:
        asyncio.run(_aopen(url))
    _check_refusal(raised.value, wrong, right)


def _check_refusal(exc: BaseException, wrong: str, right: str) -> None:
    message = str(exc)
    assert repr(wrong) in message and right in message, message
    assert SECRET not in message, message


async def _aopen(url: str) -> None:
    async with graphkeep.aconnect_cache(url):
        pass


@pytest.mark.redis
def test_tls_options_on_a_plain_redis_url_are_refused() -> None:
    url = f"{REDIS_URL}?ssl_ca_certs=/nonexistent/ca.pem"
    with pytest.raises(ConfigurationError, match="rediss://"):
        with graphkeep.connect_cache(url):
            pass


@pytest.mark.dynamodb
def test_a_verify_naming_no_file_is_a_configuration_error(tls: TlsServers) -> None:
    url = tls.url("dynamodb").split("&verify=")[0] + "&verify=/nonexistent/ca.pem"
    with pytest.raises(ConfigurationError, match="names no file"):
        with graphkeep.connect_cache(url):
            pass


@pytest.mark.redis
def test_a_tls_server_restarted_under_open_connections_is_reconnected_not_a_tls_failure(
    tls: TlsServers,
) -> None:
    """A TLS connection the restart dropped is a dropped connection (retried), not a
    handshake failure: the next call reconnects and succeeds, sync and async."""
    url = tls.url("redis")
    prefix = unique_prefix("tlsrestart")
    with graphkeep.connect_cache(url, key_prefix=prefix) as cache:
        cache.set({(("n",), "k"): ({"v": 1}, 60)})
        tls.restart("redis")
        cache.set({(("n",), "k"): ({"v": 2}, 60)})
        assert cache.get([(("n",), "k")]) == {(("n",), "k"): {"v": 2}}

    async def run_async() -> None:
        async with graphkeep.aconnect_cache(url, key_prefix=prefix) as cache:
            await cache.aset({(("n",), "k"): ({"v": 3}, 60)})
            tls.restart("redis")
            await cache.aset({(("n",), "k"): ({"v": 4}, 60)})
            assert await cache.aget([(("n",), "k")]) == {(("n",), "k"): {"v": 4}}

    asyncio.run(run_async())
