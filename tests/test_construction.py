"""The one construction path (graphkeep.construction): every public class of every backend built
from a URL by the same ``from_url`` — entered with ``with`` (sync) or ``async with`` (async),
the other way round refused before any connection with the class to use — and from a client the
application made; DynamoDB's ``from_table`` on every product. Real servers."""

from __future__ import annotations

import importlib
import uuid
from typing import Any

import pytest

from conformance.setups import all_setups
from graphkeep.connect import CLASSES, PRODUCTS, class_for
from graphkeep.errors import ConfigurationError

#: one set-up per backend package (the Cluster is a Redis client too)
SETUPS = {s.name: s for s in all_setups() if s.marker}
URLS = [
    pytest.param(SETUPS[name].url, id=name, marks=[getattr(pytest.mark, SETUPS[name].marker)])
    for name in ("redis", "redis-cluster", "mongodb", "dynamodb")
]


def _class(url: str, product: str, is_async: bool) -> Any:
    return class_for(url, product, is_async=is_async)


def _prefix() -> str:
    return f"gk-ctor-{uuid.uuid4().hex[:8]}"


async def _touch(product: str, built: Any, is_async: bool) -> None:
    """One call that reaches the server, through the product's own API."""
    if product == "checkpoint":
        config = {"configurable": {"thread_id": "t"}}
        got = await built.aget_tuple(config) if is_async else built.get_tuple(config)
        assert got is None
    elif product == "store":
        if is_async:
            await built.aput(("ns",), "k", {"v": 1})
            assert (await built.aget(("ns",), "k")).value == {"v": 1}
        else:
            built.put(("ns",), "k", {"v": 1})
            assert built.get(("ns",), "k").value == {"v": 1}
    elif product == "cache":
        pairs = {(("ns",), "k"): (1, None)}
        if is_async:
            await built.aset(pairs)
            assert await built.aget([(("ns",), "k")]) == {(("ns",), "k"): 1}
        else:
            built.set(pairs)
            assert built.get([(("ns",), "k")]) == {(("ns",), "k"): 1}
    elif product == "events":
        event_id = (
            await built.append("run", {"i": 1}) if is_async else built.append("run", {"i": 1})
        )
        assert event_id
    else:
        found = await built.arecords("t") if is_async else built.records("t")
        assert found == []


@pytest.mark.parametrize("product", PRODUCTS)
@pytest.mark.parametrize("url", URLS)
async def test_every_class_opens_from_its_url_and_answers_sync_and_async(
    url: str, product: str
) -> None:
    prefix = _prefix()
    sync_class, async_class = _class(url, product, False), _class(url, product, True)
    with sync_class.from_url(url, key_prefix=prefix) as built:
        assert type(built) is sync_class and not sync_class.is_async()
        await _touch(product, built, False)
    async with async_class.from_url(url, key_prefix=prefix) as built:
        assert type(built) is async_class and async_class.is_async()
        await _touch(product, built, True)


@pytest.mark.parametrize("product", PRODUCTS)
@pytest.mark.parametrize("package", list(CLASSES))
async def test_the_wrong_kind_of_with_is_refused_naming_the_class_to_use(
    package: str, product: str
) -> None:
    module_name, sync_name, async_name = CLASSES[package][product]
    module = importlib.import_module(module_name)
    url = {"graphkeep.backends.redis": "redis://127.0.0.1:1/0"}.get(
        package,
        "mongodb://127.0.0.1:1"
        if package.endswith("mongodb")
        else "dynamodb://t?region=us-east-1&endpoint_url=http://127.0.0.1:1",
    )
    # refused before any connection: the port 1 above answers nothing
    with pytest.raises(ConfigurationError, match=f"use `with {sync_name}.from_url"):
        async with getattr(module, sync_name).from_url(url):
            pass
    with pytest.raises(ConfigurationError, match=f"or {sync_name} with `with`"):
        with getattr(module, async_name).from_url(url):
            pass


@pytest.mark.dynamodb
@pytest.mark.parametrize("product", PRODUCTS)
async def test_from_table_opens_every_dynamodb_product(product: str) -> None:
    setup = SETUPS["dynamodb"]
    endpoint = setup.url.split("endpoint_url=", 1)[1]
    sync_class = _class(setup.url, product, False)
    async_class = _class(setup.url, product, True)
    table, prefix = f"gk-ctor-{uuid.uuid4().hex[:8]}", _prefix()
    with sync_class.from_table(table, "us-east-1", endpoint, key_prefix=prefix) as built:
        assert built.table_name == table
        await _touch(product, built, False)
    async with async_class.from_table(table, "us-east-1", endpoint, key_prefix=prefix) as built:
        await _touch(product, built, True)


@pytest.mark.dynamodb
def test_a_client_option_in_the_url_and_as_an_argument_is_refused() -> None:
    url = "dynamodb://t?region=us-east-1&profile=a"
    with pytest.raises(ConfigurationError, match="profile_name given both in the URL"):
        class_for(url, "cache").from_url(url, profile_name="b")
