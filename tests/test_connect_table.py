"""graphkeep.connect's class table: every (backend, product, sync/async) entry imports, names the
class its product's ``connect*`` function opens, and is that product's kind of class. No server:
the classes are only imported and looked up, never constructed."""

from __future__ import annotations

import importlib
import inspect

import pytest
from langgraph.cache.base import BaseCache
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.store.base import BaseStore

from graphkeep.connect import BACKENDS, CLASSES, PRODUCTS, SCHEMES, class_for
from graphkeep.effects.ledger import AsyncLedger, SyncLedger
from graphkeep.errors import ConfigurationError

#: one URL per backend package, for class_for
URLS = {
    "graphkeep.backends.redis": "redis://127.0.0.1:6379/0",
    "graphkeep.backends.mongodb": "mongodb://127.0.0.1:27017",
    "graphkeep.backends.dynamodb": "dynamodb://graphkeep?region=us-east-1",
}

ENTRIES = [
    pytest.param(package, product, is_async, id=f"{package.rsplit('.', 1)[1]}-{product}-{mode}")
    for package in CLASSES
    for product in PRODUCTS
    for is_async, mode in ((False, "sync"), (True, "async"))
]


def test_the_table_covers_every_backend_and_product() -> None:
    assert set(CLASSES) == {package for package, _extra in SCHEMES.values()} == set(URLS)
    for package, products in CLASSES.items():
        assert tuple(products) == PRODUCTS, package


@pytest.mark.parametrize(("package", "product", "is_async"), ENTRIES)
def test_each_entry_imports_and_is_what_connect_returns(
    package: str, product: str, is_async: bool
) -> None:
    module_name, sync_name, async_name = CLASSES[package][product]
    name = async_name if is_async else sync_name
    cls = getattr(importlib.import_module(module_name), name)
    assert inspect.isclass(cls) and cls.__name__ == name
    assert name.startswith("Async") == is_async
    assert class_for(URLS[package], product, is_async=is_async) is cls
    if product == "checkpoint":
        assert issubclass(cls, BaseCheckpointSaver)
    elif product == "store":
        assert issubclass(cls, BaseStore)
    elif product == "cache":
        assert issubclass(cls, BaseCache)
    elif product == "effects":
        assert issubclass(cls, AsyncLedger if is_async else SyncLedger)
    else:  # a run event log: append / read, awaited on the async one
        assert inspect.iscoroutinefunction(cls.append) == is_async
        assert callable(cls.read)


def test_every_scheme_resolves_to_its_backend_classes() -> None:
    for scheme, (package, extra) in SCHEMES.items():
        module_name, sync_name, async_name = CLASSES[package]["checkpoint"]
        assert BACKENDS[scheme] == (module_name, sync_name, async_name, extra)
        for product in PRODUCTS:
            for is_async in (False, True):
                expected = CLASSES[package][product][2 if is_async else 1]
                found = class_for(f"{scheme}://x", product, is_async=is_async)
                assert found.__name__ == expected, (scheme, product, is_async)


def test_unknown_options_and_schemes_are_refused_before_any_class_is_chosen() -> None:
    with pytest.raises(ConfigurationError, match="unknown option"):
        class_for(URLS["graphkeep.backends.redis"], options={"no_such_option": 1})
    with pytest.raises(ConfigurationError, match="for a cache at redis://"):
        class_for(URLS["graphkeep.backends.redis"], "cache", options={"db_name": "x"})
    with pytest.raises(ConfigurationError, match="unsupported URL scheme"):
        class_for("sqlite:///x.db")
