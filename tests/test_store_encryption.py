"""``connect_store(url, encryption=KeyRing)`` (issue 47, item 1, the long-term store): each
item's value and embeddings sealed at ``("item", namespace, key)``, reads that fail closed,
nothing of a value readable on the server, searches ranked in the client, ``rekey_items`` —
on real servers, every backend (``graphkeep_url``), sync and async.

Stored items are found and edited with each backend's own client (redis-py, pymongo, boto3,
through ``tests.scenarios.backends.DAMAGE``): a sealed value is the JSON string
``{"__graphkeep_sealed__": "<base64 envelope>"}``, whose first base64 characters name the key
id (``AQFh``: version 1, a one-letter id ``a``), so the test writes each item under a ring
whose current key id names it (all ids hold one key: only the place can fail).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import importlib
import os
import re
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import pytest

import graphkeep
from conformance.setups import Setup
from conformance.store import StoreFactory, runs, store_connector_for
from conformance.store.api import StoreConnector
from graphkeep.encryption import KeyRing
from graphkeep.errors import ConfigurationError, CorruptData
from graphkeep.store.rekey import arekey_items, rekey_items
from graphkeep.store.values import pack_vector
from tests.scenarios.backends import DAMAGE, dynamodb_client, mongodb_documents, redis_client
from tests.test_encryption import entered_on_a_loop
from tests.test_store_mongodb import INDEX, embed

MODES = ("sync", "async")
KEY = os.urandom(32)
OTHER_KEY = os.urandom(32)
IDS = ("a", "b", "c", "d")
MARKER = "plaintext-marker-7c2f"


@pytest.fixture(params=MODES)
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def ring(current: str, *others: str, key: bytes = KEY, **options: Any) -> KeyRing:
    """A ring whose key ids ``current`` and ``others`` all hold ``key``."""
    return KeyRing({k: key for k in (current, *others)}, current=current, **options)


def options_of(backend: str) -> dict[str, Any]:
    # DynamoDB compresses its values by default: the envelopes must stay findable on the server
    return {"compress": False} if backend == "dynamodb" else {}


# -- a store, sync or async, called from the test's thread ------------------------------------


@dataclass
class Api:
    store: Any
    loop: asyncio.AbstractEventLoop | None

    def __call__(self, name: str, *args: Any, **kwargs: Any) -> Any:
        if self.loop is None:
            return getattr(self.store, name)(*args, **kwargs)
        coro = getattr(self.store, "a" + name)(*args, **kwargs)
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(120)

    def rekey(self, **kwargs: Any) -> Any:
        if self.loop is None:
            return rekey_items(self.store, **kwargs)
        coro = arekey_items(self.store, **kwargs)
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(120)


@contextmanager
def opened(
    mode: str, url: str, backend: str, keys: KeyRing | None, **options: Any
) -> Iterator[Api]:
    options = {**options_of(backend), **options}
    if keys is not None:
        options["encryption"] = keys
    if mode == "sync":
        with graphkeep.connect_store(url, **options) as store:
            yield Api(store, None)
        return
    with entered_on_a_loop(graphkeep.aconnect_store(url, **options)) as (store, loop):
        yield Api(store, loop)


def raises_kind(kind: str, call: Callable[[], Any]) -> CorruptData:
    with pytest.raises(CorruptData) as raised:
        call()
    assert raised.value.kind == kind, raised.value
    return raised.value


# -- the stored envelopes, read and edited with the backend's own client ----------------------


def sealed_string(key_id: str) -> re.Pattern[bytes]:
    """A sealed value's JSON string under the one-letter ``key_id``."""
    head = base64.b64encode(b"\x01\x01" + key_id.encode()).decode()
    return re.compile(rb'"' + head.encode() + rb'[A-Za-z0-9+/=]*"')


def collect(backend: str, url: str, key_id: str) -> list[bytes]:
    found: list[bytes] = []

    def look(data: bytes) -> None:
        found.extend(sealed_string(key_id).findall(data))

    DAMAGE[backend](url, look)  # type: ignore[arg-type]
    return found


def rewrite(backend: str, url: str, key_id: str, new: Callable[[bytes], bytes]) -> int:
    pattern = sealed_string(key_id)

    def change(data: bytes) -> bytes | None:
        changed = pattern.sub(lambda m: new(m.group(0)), data)
        return None if changed == data else changed

    return DAMAGE[backend](url, change)


def flipped(string: bytes) -> bytes:
    """A sealed string with one base64 character of its ciphertext changed."""
    at = len(string) // 2
    swap = b"B" if string[at : at + 1] != b"B" else b"C"
    return string[:at] + swap + string[at + 1 :]


def key_ids_stored(backend: str, url: str) -> dict[str, int]:
    """How many sealed values the server holds under each key id (their headers)."""
    counts: dict[str, int] = {}

    def look(data: bytes) -> None:
        for string in re.findall(rb'"(AQ[A-Za-z0-9+/=]+)"', data):
            raw = base64.b64decode(string)
            key_id = raw[2 : 2 + raw[1]].decode()
            counts[key_id] = counts.get(key_id, 0) + 1

    DAMAGE[backend](url, look)  # type: ignore[arg-type]
    return counts


def dynamodb_bytes(value: Any) -> list[bytes]:
    """Every name, string, number and binary of a DynamoDB item as it is stored."""
    if isinstance(value, bytes):
        return [value]
    if isinstance(value, (str, bool)):
        return [str(value).encode()]
    if isinstance(value, list):
        return [b for v in value for b in dynamodb_bytes(v)]
    if isinstance(value, dict):
        return [b for k, v in value.items() for b in (k.encode(), *dynamodb_bytes(v))]
    return []


def everything_stored(backend: str, url: str) -> bytes:
    """Every byte the backend holds for the test (keys, members, fields and values)."""
    out: list[bytes] = []
    if backend == "mongodb":
        import bson

        out += [bson.encode(doc) for _, doc in mongodb_documents(url)]
    elif backend == "dynamodb":
        client, table_name = dynamodb_client(url)
        for table in client.list_tables()["TableNames"]:
            if table.startswith(table_name):
                for page in client.get_paginator("scan").paginate(TableName=table):
                    out += [b"\n".join(dynamodb_bytes(item)) for item in page["Items"]]
    else:
        prefix = dict(parse_qsl(urlsplit(url).query))["key_prefix"]
        client = redis_client(url)
        try:
            keys = set(client.scan_iter(match=f"{prefix}*")) | set(
                client.scan_iter(match=f"*{{{prefix}*")
            )
            for key in keys:
                out.append(key)
                kind = client.type(key)
                if kind == b"hash":
                    out += [f + b"=" + v for f, v in client.hgetall(key).items()]
                elif kind == b"zset":
                    out += [m for m, _ in client.zrange(key, 0, -1, withscores=True)]
                elif kind == b"set":
                    out += list(client.smembers(key))
                elif kind == b"string":
                    out.append(client.get(key) or b"")
        finally:
            client.close()
    assert out, "nothing found on the server"
    return b"\n".join(out)


# -- the tamper cases ----------------------------------------------------------------------------


def two_items(mode: str, url: str, backend: str) -> None:
    with opened(mode, url, backend, ring("a", *IDS)) as api:
        api("put", ("users", "u1"), "profile", {"name": "first", "n": 1})
    with opened(mode, url, backend, ring("b", *IDS)) as api:
        api("put", ("users", "u2"), "profile", {"name": "second", "n": 2})


def test_an_item_copied_to_another_namespace_or_key_is_tampered_in_get_search_and_batch(
    graphkeep_backend: str, graphkeep_url: str, mode: str
) -> None:
    from langgraph.store.base import GetOp

    two_items(mode, graphkeep_url, graphkeep_backend)
    (source,) = collect(graphkeep_backend, graphkeep_url, "a")
    assert rewrite(graphkeep_backend, graphkeep_url, "b", lambda _: source) == 1
    with opened(mode, graphkeep_url, graphkeep_backend, ring("a", *IDS)) as api:
        assert api("get", ("users", "u1"), "profile").value == {"name": "first", "n": 1}
        exc = raises_kind("tampered", lambda: api("get", ("users", "u2"), "profile"))
        assert exc.namespace == ("users", "u2") and exc.key == "profile"
        raises_kind("tampered", lambda: api("search", ("users",)))
        raises_kind("tampered", lambda: api("search", ("users",), filter={"n": 1}))
        raises_kind("tampered", lambda: api("batch", [GetOp(("users", "u2"), "profile")]))
        assert "first" not in str(exc) and source.decode() not in str(exc)


def test_a_flipped_byte_is_tampered(graphkeep_backend: str, graphkeep_url: str, mode: str) -> None:
    two_items(mode, graphkeep_url, graphkeep_backend)
    assert rewrite(graphkeep_backend, graphkeep_url, "a", flipped) == 1
    with opened(mode, graphkeep_url, graphkeep_backend, ring("a", *IDS)) as api:
        raises_kind("tampered", lambda: api("get", ("users", "u1"), "profile"))
        assert api("get", ("users", "u2"), "profile").value == {"name": "second", "n": 2}
        raises_kind("tampered", lambda: api("search", ("users",), filter={"n": 2}))


def test_plaintext_is_refused_unless_allowed_and_writes_are_always_sealed(
    graphkeep_backend: str, graphkeep_url: str, mode: str
) -> None:
    with opened(mode, graphkeep_url, graphkeep_backend, None) as api:
        api("put", ("users", "u1"), "planted", {"role": "admin"})
    with opened(mode, graphkeep_url, graphkeep_backend, ring("a")) as api:
        exc = raises_kind("plaintext", lambda: api("get", ("users", "u1"), "planted"))
        assert exc.key == "planted" and "admin" not in str(exc)
        raises_kind("plaintext", lambda: api("search", ("users",)))
        raises_kind("plaintext", lambda: api("search", ("users",), filter={"role": "admin"}))
    allowing = ring("a", allow_plaintext=True)
    with opened(mode, graphkeep_url, graphkeep_backend, allowing) as api:
        assert api("get", ("users", "u1"), "planted").value == {"role": "admin"}
        found = api("search", ("users",), filter={"role": "admin"})
        assert [i.key for i in found] == ["planted"]
        assert allowing.plaintext_reads == 2
        api("put", ("users", "u1"), "written", {"role": MARKER})
    assert MARKER.encode() not in everything_stored(graphkeep_backend, graphkeep_url)
    assert len(collect(graphkeep_backend, graphkeep_url, "a")) == 1


def test_an_item_under_a_dropped_key_is_unknown_key(
    graphkeep_backend: str, graphkeep_url: str, mode: str
) -> None:
    two_items(mode, graphkeep_url, graphkeep_backend)
    with opened(mode, graphkeep_url, graphkeep_backend, KeyRing({"z": KEY})) as api:
        exc = raises_kind("unknown_key", lambda: api("get", ("users", "u1"), "profile"))
        assert exc.namespace == ("users", "u1")
        raises_kind("unknown_key", lambda: api("search", ("users",)))
    with opened(mode, graphkeep_url, graphkeep_backend, KeyRing({"a": OTHER_KEY})) as api:
        raises_kind("tampered", lambda: api("get", ("users", "u1"), "profile"))  # a wrong key
    # a store opened without encryption= never passes an envelope off as the item's value
    with opened(mode, graphkeep_url, graphkeep_backend, None) as api:
        exc = raises_kind("unknown_key", lambda: api("get", ("users", "u1"), "profile"))
        assert "key id 'a'" in str(exc) and "no key ring" in str(exc)
        raises_kind("unknown_key", lambda: api("search", ("users",)))


def test_store_reads_that_fail_closed_are_counted_by_reason_in_store_read_failures(
    graphkeep_backend: str, graphkeep_url: str, mode: str
) -> None:
    """Each refused read (``get``, ``search``, ``batch``) adds 1 to
    ``graphkeep.store.read.failures`` under its kind; a read that succeeds adds nothing, and
    no value or key reaches a data point."""
    from langgraph.store.base import GetOp
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    two_items(mode, graphkeep_url, graphkeep_backend)
    with opened(mode, graphkeep_url, graphkeep_backend, None) as api:
        api("put", ("users", "u3"), "planted", {"role": MARKER})
    reader = InMemoryMetricReader()
    meters = MeterProvider(metric_readers=[reader])
    telemetry = {"meter_provider": meters}

    def points() -> list[Any]:
        data = reader.get_metrics_data()
        return [
            point
            for resource in (data.resource_metrics if data else [])
            for scope in resource.scope_metrics
            for metric in scope.metrics
            if metric.name == "graphkeep.store.read.failures"
            for point in metric.data.data_points
        ]

    try:
        keys = ring("a", *IDS)
        with opened(mode, graphkeep_url, graphkeep_backend, keys, telemetry=telemetry) as api:
            assert api("get", ("users", "u1"), "profile").value == {"name": "first", "n": 1}
            assert points() == []  # a read that opens counts nothing
            raises_kind("plaintext", lambda: api("get", ("users", "u3"), "planted"))
            raises_kind("plaintext", lambda: api("search", ("users", "u3")))
        dropped = KeyRing({"z": KEY})
        with opened(mode, graphkeep_url, graphkeep_backend, dropped, telemetry=telemetry) as api:
            raises_kind("unknown_key", lambda: api("batch", [GetOp(("users", "u1"), "profile")]))
        wrong = KeyRing({"a": OTHER_KEY})
        with opened(mode, graphkeep_url, graphkeep_backend, wrong, telemetry=telemetry) as api:
            raises_kind("tampered", lambda: api("get", ("users", "u1"), "profile"))
        counted = {
            (p.attributes["graphkeep.reason"], p.attributes["db.operation.name"]): p.value
            for p in points()
        }
        assert counted == {
            ("plaintext", "store.get"): 1,
            ("plaintext", "store.search"): 1,
            ("unknown_key", "store.get"): 1,
            ("tampered", "store.get"): 1,
        }, counted
        for point in points():
            assert point.attributes["error.type"] == "graphkeep.errors.CorruptData"
            assert point.attributes["db.system.name"]
            assert MARKER not in str(point.attributes) and "u3" not in str(point.attributes)
    finally:
        meters.shutdown()


# -- nothing readable, searches in the client ---------------------------------------------------


def test_nothing_of_a_value_or_its_embeddings_is_stored_readable_and_searches_still_answer(
    graphkeep_backend: str, graphkeep_url: str, mode: str
) -> None:
    texts = {
        "k1": f"apples and pears {MARKER}",
        "k2": "red cars and blue boats",
        "k3": "apples apples apples",
    }
    with opened(mode, graphkeep_url, graphkeep_backend, ring("a"), index=INDEX) as api:
        for n, (key, text) in enumerate(texts.items()):
            value = {"text": text, "n": n, "tags": {"colour": f"{MARKER}-{n}"}}
            api("put", ("docs", "team"), key, value)
        api("put", ("docs", "other"), "k4", {"text": "apples", "n": 9})
        got = api("get", ("docs", "team"), "k1")
        assert got.value["tags"]["colour"] == f"{MARKER}-0"
        # filters, semantic ranking, offsets and limits: in the client, as the backends rank
        assert [i.key for i in api("search", ("docs",), filter={"n": {"$gte": 1}})] == [
            "k4",
            "k3",
            "k2",
        ]
        assert [i.key for i in api("search", ("docs",), filter={"tags.colour": f"{MARKER}-2"})] == [
            "k3"
        ]
        ranked = api("search", ("docs", "team"), query="apples", limit=2)
        assert [i.key for i in ranked] == ["k3", "k1"] and ranked[0].score > ranked[1].score
        assert [i.key for i in api("search", ("docs",), query="boats", offset=0, limit=1)] == ["k2"]
        assert [i.key for i in api("search", ("docs",), limit=2, offset=1)] == ["k3", "k2"]
        # the embeddings of unchanged texts are reused from the sealed value (no new embed)
        api("put", ("docs", "team"), "k2", {"text": texts["k2"], "n": 1, "tags": {}})
        assert api("get", ("docs", "team"), "k2").value["tags"] == {}
    stored = everything_stored(graphkeep_backend, graphkeep_url)
    assert MARKER.encode() not in stored and b"apples" not in stored and b"colour" not in stored
    for vector in embed(list(texts.values())):
        assert pack_vector(vector) not in stored
    assert b"team" in stored  # namespaces and keys stay readable (the threat model)
    if graphkeep_backend == "mongodb":  # no filter copy of a sealed value is kept
        docs = [doc for _, doc in mongodb_documents(graphkeep_url) if "doc" in doc]
        assert len(docs) == 4 and all(doc["doc"] == {} for doc in docs)
    if graphkeep_backend == "dynamodb":
        client, table = dynamodb_client(graphkeep_url)
        items = client.scan(TableName=table)["Items"]
        assert sum("ns" in item for item in items) >= 4 and not any("fa" in i for i in items)


def test_a_large_value_is_sealed_whole_and_a_changed_chunk_is_tampered(
    graphkeep_backend: str, graphkeep_url: str, mode: str
) -> None:
    big = {"text": " ".join(f"{MARKER}{i}" for i in range(30_000))}  # ~750 KB: chunked on DynamoDB
    with opened(mode, graphkeep_url, graphkeep_backend, ring("a")) as api:
        api("put", ("big",), "one", big)
        assert api("get", ("big",), "one").value == big
    stored = everything_stored(graphkeep_backend, graphkeep_url)
    assert MARKER.encode() not in stored

    if graphkeep_backend == "dynamodb":
        assert rechunk_with_a_changed_byte(graphkeep_url) >= 2
    else:
        changed: list[int] = []

        def change_the_tail(data: bytes) -> bytes | None:  # inside the ciphertext
            if len(data) < 100_000 or changed:
                return None
            changed.append(1)
            at = len(data) - 100
            return data[:at] + (b"B" if data[at : at + 1] != b"B" else b"C") + data[at + 1 :]

        assert DAMAGE[graphkeep_backend](graphkeep_url, change_the_tail) == 1
    with opened(mode, graphkeep_url, graphkeep_backend, ring("a")) as api:
        raises_kind("tampered", lambda: api("get", ("big",), "one"))


def rechunk_with_a_changed_byte(url: str) -> int:
    """On DynamoDB: the chunked item's bytes with one changed in its last chunk, stored again
    as graphkeep would (new digest, chunk items under the new digest's keys), so the backend's
    own (unkeyed) digest holds and only the seal can tell. The number of chunks."""
    from graphkeep.backends.dynamodb.items import CHUNK_BYTES, DIGEST, NCHUNKS, VALUE
    from graphkeep.backends.dynamodb.keys import chunk_sk

    client, table_name = dynamodb_client(url)
    items = [
        item
        for page in client.get_paginator("scan").paginate(TableName=table_name)
        for item in page["Items"]
    ]
    (owner,) = [item for item in items if NCHUNKS in item]
    pk, sk, digest = owner["pk"]["S"], owner["sk"]["S"], owner[DIGEST]["S"]
    count = int(owner[NCHUNKS]["N"])
    by_sk = {item["sk"]["S"]: item for item in items}
    data = b"".join(by_sk[chunk_sk(sk, digest, i)][VALUE]["B"] for i in range(count))
    at = len(data) - 100
    data = data[:at] + (b"B" if data[at : at + 1] != b"B" else b"C") + data[at + 1 :]
    new = hashlib.blake2b(data, digest_size=8).hexdigest()
    for i in range(count):
        piece = data[i * CHUNK_BYTES : (i + 1) * CHUNK_BYTES]
        chunk = {"pk": {"S": pk}, "sk": {"S": chunk_sk(sk, new, i)}, VALUE: {"B": piece}}
        client.put_item(TableName=table_name, Item=chunk)
    client.put_item(TableName=table_name, Item={**owner, DIGEST: {"S": new}})
    return count


# -- rotation -------------------------------------------------------------------------------


def test_rekey_items_rewrites_old_key_and_plaintext_items_in_place_and_resumes(
    graphkeep_backend: str, graphkeep_url: str, mode: str
) -> None:
    k1, k2 = os.urandom(32), os.urandom(32)
    with opened(mode, graphkeep_url, graphkeep_backend, None) as api:
        api("put", ("legacy",), "p1", {"v": "plain"})
    with opened(mode, graphkeep_url, graphkeep_backend, KeyRing({"k1": k1})) as api:
        for i in range(5):
            api("put", ("ns", str(i % 2)), f"item{i}", {"v": i}, ttl=60 if i == 0 else None)
        before = {
            (tuple(i.namespace), i.key): (i.created_at, i.updated_at)
            for i in api("search", ("ns",), limit=100)
        }
    rotated = KeyRing({"k2": k2, "k1": k1}, current="k2", allow_plaintext=True)
    with opened(mode, graphkeep_url, graphkeep_backend, rotated) as api:
        dry = api.rekey(dry_run=True)
        assert (dry.scanned, dry.stale, dry.rewritten) == (6, 6, 0)
        assert dry.by_key_id == {"k1": 5, "plaintext": 1}
        api("put", ("ns", "0"), "item0", {"v": 0}, ttl=60)  # rewritten by its writer: now k2
        done = api.rekey()
        assert (done.scanned, done.stale, done.rewritten) == (6, 5, 5)
        assert done.by_key_id == {"k1": 4, "plaintext": 1, "k2": 1}
        again = api.rekey()  # a second run (a resumed one) finds nothing left
        assert (again.stale, again.rewritten, again.by_key_id) == (0, 0, {"k2": 6})
    with opened(mode, graphkeep_url, graphkeep_backend, KeyRing({"k2": k2})) as api:  # k1 gone
        assert api("get", ("legacy",), "p1").value == {"v": "plain"}
        after = {
            (tuple(i.namespace), i.key): (i.created_at, i.updated_at)
            for i in api("search", ("ns",), limit=100)
        }
        assert {k: v for k, v in after.items() if k[1] != "item0"} == {
            k: v for k, v in before.items() if k[1] != "item0"
        }
        assert [api("get", ("ns", str(i % 2)), f"item{i}").value for i in range(5)] == [
            {"v": i} for i in range(5)
        ]
    assert key_ids_stored(graphkeep_backend, graphkeep_url) == {"k2": 6}


def test_encryption_options_are_checked(graphkeep_backend: str, graphkeep_url: str) -> None:
    with pytest.raises(ConfigurationError, match="KeyRing"):
        with graphkeep.connect_store(graphkeep_url, encryption="secret"):
            pass
    with graphkeep.connect_store(graphkeep_url, **options_of(graphkeep_backend)) as store:
        with pytest.raises(ConfigurationError, match="encryption="):
            rekey_items(store)
    if graphkeep_backend in ("redis", "valkey"):
        with pytest.raises(ConfigurationError, match="vector_index"):
            with graphkeep.connect_store(
                graphkeep_url, encryption=ring("a"), index=INDEX, vector_index=True, setup=False
            ):
                pass


# -- the store contract, encrypted: the conformance cases ---------------------------------------

CONTRACT = ("get_put_delete", "batch", "filters", "prefix_search", "ttl", "semantic_search")


def _sealing(opener: Callable[..., Any], backend: str) -> Callable[..., Any]:
    def open_sealed(url: str, **options: Any) -> Any:
        if options.get("vector_index"):
            pytest.skip("vector_index=True is refused with encryption= (tested above)")
        return opener(url, encryption=ring("a"), **{**options_of(backend), **options})

    return open_sealed


@pytest.mark.parametrize("capability", CONTRACT)
def test_the_store_contract_holds_with_encryption(
    graphkeep_backend: str, graphkeep_url: str, capability: str
) -> None:
    parts = urlsplit(graphkeep_url)
    query = dict(parse_qsl(parts.query))
    prefix = query.pop("key_prefix", "gk")
    url = urlunsplit(parts._replace(query=urlencode(query)))
    setup = Setup(graphkeep_backend, url, None)
    plain = store_connector_for(setup)
    connector = StoreConnector(
        _sealing(graphkeep.connect_store, graphkeep_backend),
        _sealing(graphkeep.aconnect_store, graphkeep_backend),
        connect_saver=plain.connect_saver,
        aconnect_saver=plain.aconnect_saver,
    )
    failures: list[str] = []
    skipped: list[str] = []
    cases = runs([capability])

    def run(n: int, case: Any, case_mode: Any) -> None:
        factory = StoreFactory(setup, connector, case_mode, f"{prefix}-{n}")
        try:
            case(factory)
        except pytest.skip.Exception as exc:
            skipped.append(f"{case.name}[{case_mode}]: {exc}")
        except Exception as exc:  # every case runs; the failures are reported together
            failures.append(f"{case.name}[{case_mode}]: {type(exc).__name__}: {exc}")
        finally:
            factory.purge()

    # the cases side by side, eight at a time, each under its own key prefix (a sync case on
    # its pool thread, an async one on its own loop): the ttl cases mostly sleep through their
    # expiries, which then overlap instead of adding up. What a case imports lazily is
    # imported first, here: numpy (the semantic cases' ranking) imports itself circularly, and
    # two threads importing it at once can get it half made ("partially initialized module
    # 'numpy' has no attribute 'isscalar'": CI run E of 4b0d1b2)
    for lazy in ("numpy", "cryptography.hazmat.primitives.ciphers.aead"):
        with contextlib.suppress(ImportError):
            importlib.import_module(lazy)
    with ThreadPoolExecutor(max_workers=min(len(cases), 8)) as pool:
        for done in [pool.submit(run, n, *pair) for n, pair in enumerate(cases)]:
            done.result()
    assert not failures, "\n".join(failures)
    assert len(skipped) < len(cases), skipped  # vector_index cases only


def test_the_store_command_reads_an_encrypted_store_with_graphkeep_keys(
    graphkeep_backend: str, graphkeep_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.cli_runs import gk

    with graphkeep.connect_store(
        graphkeep_url, **options_of(graphkeep_backend), encryption=ring("a")
    ) as store:
        store.put(("users", "u1"), "profile", {"name": MARKER})
    monkeypatch.delenv("GRAPHKEEP_KEYS", raising=False)
    refused = gk("store", "get", graphkeep_url, "users/u1", "profile")
    assert refused.code != 0 and "no key ring" in refused.err, refused.out + refused.err
    assert MARKER not in refused.out + refused.err
    monkeypatch.setenv("GRAPHKEEP_KEYS", f"a:{base64.b64encode(KEY).decode()}")
    read = gk("store", "get", graphkeep_url, "users/u1", "profile")
    assert read.code == 0 and MARKER in read.out, read.out + read.err


def test_an_item_read_through_from_a_fallback_is_stored_sealed(
    graphkeep_backend: str, graphkeep_url: str
) -> None:
    from langgraph.store.memory import InMemoryStore

    before = InMemoryStore()
    before.put(("users", "u1"), "profile", {"name": MARKER})
    before.put(("users", "u2"), "profile", {"name": MARKER + " two"})
    options = {**options_of(graphkeep_backend), "encryption": ring("a"), "fallback": before}
    with graphkeep.connect_store(graphkeep_url, **options) as store:
        got = store.get(("users", "u1"), "profile")  # read through, copied in, sealed
        assert got is not None and got.value == {"name": MARKER}
        store.put(("users", "u2"), "profile", {"name": "changed"})
        store.delete(("users", "u2"), "profile")  # a tombstone: never read through again
        assert store.get(("users", "u2"), "profile") is None
    assert MARKER.encode() not in everything_stored(graphkeep_backend, graphkeep_url)
    with graphkeep.connect_store(graphkeep_url, **options_of(graphkeep_backend)) as plain:
        raises_kind("unknown_key", lambda: plain.get(("users", "u1"), "profile"))
