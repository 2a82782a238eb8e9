"""graphkeep.server's reading of the environment: what each variable becomes, what Agent Server
passes (LANGGRAPH_CHECKPOINTER / LANGGRAPH_THREAD_TTL / LANGGRAPH_STORE) and honoured, and a
ConfigurationError naming the variable for every bad value. Also the path forms Agent Server's
own loaders accept for langgraph.json (in a subprocess: langgraph_api reads its configuration
at import)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.serde.encrypted import EncryptedSerializer
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from graphkeep.errors import ConfigurationError
from graphkeep.server import checkpointer_settings, store_settings

#: langgraph-api (Agent Server) is published for Python 3.11 and later only; anywhere else a
#: missing piece fails the test
AGENT_SERVER_PYTHON = pytest.mark.skipif(
    sys.version_info < (3, 11), reason="LangGraph Agent Server (langgraph-api) needs Python 3.11"
)
URL = "redis://127.0.0.1:6379/0"
SRC = Path(__file__).resolve().parents[1] / "src"


def _agent(**config: Any) -> str:
    return json.dumps({"path": "graphkeep.server:checkpointer", **config})


def test_graphkeep_url_alone_opens_with_defaults() -> None:
    assert checkpointer_settings({"GRAPHKEEP_URL": URL}) == (URL, {})
    assert store_settings({"GRAPHKEEP_URL": URL}) == (URL, {})


def test_fallback_url_reaches_aconnect() -> None:
    environ = {"GRAPHKEEP_URL": URL, "GRAPHKEEP_FALLBACK_URL": "sqlite:///old.db"}
    assert checkpointer_settings(environ) == (URL, {"fallback": "sqlite:///old.db"})
    with pytest.raises(ConfigurationError, match="GRAPHKEEP_FALLBACK_URL must be a URL"):
        checkpointer_settings({**environ, "GRAPHKEEP_FALLBACK_URL": "old.db"})
    with pytest.raises(ConfigurationError, match="fallback is given both"):
        checkpointer_settings({**environ, "GRAPHKEEP_OPTIONS": '{"fallback": "sqlite:///x.db"}'})


def test_store_url_and_key_prefix() -> None:
    environ = {
        "GRAPHKEEP_URL": URL,
        "GRAPHKEEP_STORE_URL": "mongodb://127.0.0.1:27017/app",
        "GRAPHKEEP_KEY_PREFIX": "tenant",
    }
    assert checkpointer_settings(environ) == (URL, {"key_prefix": "tenant"})
    assert store_settings(environ) == ("mongodb://127.0.0.1:27017/app", {"key_prefix": "tenant"})


def test_ttl_seconds_win_over_the_thread_ttl_in_minutes() -> None:
    environ = {"GRAPHKEEP_URL": URL, "LANGGRAPH_CHECKPOINTER": _agent(ttl={"default_ttl": 90})}
    assert checkpointer_settings(environ)[1] == {"ttl": 5400.0}
    environ["LANGGRAPH_THREAD_TTL"] = "2"  # Agent Server's own variable, minutes
    assert checkpointer_settings(environ)[1] == {"ttl": 120.0}
    environ["GRAPHKEEP_TTL"] = "30"
    assert checkpointer_settings(environ)[1] == {"ttl": 30.0}


def test_keep_latest_thread_ttl_is_not_a_native_ttl() -> None:
    ttl = {"strategy": "Keep_Latest", "default_ttl": 60}  # the server lower-cases it too
    environ = {"GRAPHKEEP_URL": URL, "LANGGRAPH_CHECKPOINTER": _agent(ttl=ttl)}
    assert checkpointer_settings(environ)[1] == {}


def test_serde_from_langgraph_json() -> None:
    serde = {"pickle_fallback": True, "allowed_json_modules": [["my_agent", "State"]]}
    environ = {"GRAPHKEEP_URL": URL, "LANGGRAPH_CHECKPOINTER": _agent(serde=serde)}
    made = checkpointer_settings(environ)[1]["serde"]
    assert isinstance(made, JsonPlusSerializer) and made.pickle_fallback is True
    assert made._allowed_json_modules == {("my_agent", "State")}


def test_aes_key_encrypts_langgraph_json_serde() -> None:
    environ = {
        "GRAPHKEEP_URL": URL,
        "LANGGRAPH_AES_KEY": "k" * 32,
        "LANGGRAPH_CHECKPOINTER": _agent(serde={"pickle_fallback": False}),
    }
    made = checkpointer_settings(environ)[1]["serde"]
    assert isinstance(made, EncryptedSerializer)
    kind, data = made.dumps_typed({"secret": 1})
    assert kind == "msgpack+aes" and b"secret" not in data
    assert made.loads_typed((kind, data)) == {"secret": 1}


def test_graphkeep_keys_give_the_checkpointer_its_key_ring() -> None:
    import base64

    from graphkeep.encryption import KeyRing

    keys = f"k2:{base64.b64encode(b'2' * 32).decode()},k1:{base64.b64encode(b'1' * 32).decode()}"
    made = checkpointer_settings({"GRAPHKEEP_URL": URL, "GRAPHKEEP_KEYS": keys})[1]["encryption"]
    assert isinstance(made, KeyRing) and made.current == "k2" and made.key_ids == ["k2", "k1"]
    with pytest.raises(ConfigurationError, match="k1"):
        checkpointer_settings({"GRAPHKEEP_URL": URL, "GRAPHKEEP_KEYS": "k1:c2hvcnQ="})


def test_graphkeep_keys_give_the_store_its_key_ring() -> None:
    import base64

    from graphkeep.encryption import KeyRing

    keys = f"k2:{base64.b64encode(b'2' * 32).decode()},k1:{base64.b64encode(b'1' * 32).decode()}"
    made = store_settings({"GRAPHKEEP_URL": URL, "GRAPHKEEP_KEYS": keys})[1]["encryption"]
    assert isinstance(made, KeyRing) and made.current == "k2" and made.key_ids == ["k2", "k1"]
    assert "encryption" not in store_settings({"GRAPHKEEP_URL": URL})[1]
    with pytest.raises(ConfigurationError, match="k1"):
        store_settings({"GRAPHKEEP_URL": URL, "GRAPHKEEP_KEYS": "k1:c2hvcnQ="})


def test_store_index_and_ttl_from_langgraph_json() -> None:
    store = {
        "path": "graphkeep.server:store",
        "index": {"dims": 3, "embed": "openai:text-embedding-3-small", "fields": ["text"]},
        "ttl": {"default_ttl": 10, "refresh_on_read": True, "sweep_interval_minutes": 5},
    }
    _, options = store_settings({"GRAPHKEEP_URL": URL, "LANGGRAPH_STORE": json.dumps(store)})
    assert options["ttl"] == store["ttl"]
    # outside Agent Server, "provider:model" is left to LangGraph's init_embeddings
    assert options["index"] == store["index"]


def test_options_variables_reach_connect() -> None:
    environ = {"GRAPHKEEP_URL": URL, "GRAPHKEEP_OPTIONS": '{"max_connections": 7}'}
    environ["GRAPHKEEP_STORE_OPTIONS"] = '{"max_key_bytes": 200}'
    assert checkpointer_settings(environ)[1] == {"max_connections": 7}
    assert store_settings(environ)[1] == {"max_key_bytes": 200}


@pytest.mark.parametrize(
    "environ, variable",
    [
        ({}, "GRAPHKEEP_URL is not set"),
        ({"GRAPHKEEP_URL": " "}, "GRAPHKEEP_URL is not set"),
        ({"GRAPHKEEP_URL": "postgres://x"}, "GRAPHKEEP_URL: unsupported URL scheme"),
        ({"GRAPHKEEP_URL": URL, "GRAPHKEEP_KEY_PREFIX": ""}, "GRAPHKEEP_KEY_PREFIX is empty"),
        (
            {"GRAPHKEEP_URL": URL + "?key_prefix=a", "GRAPHKEEP_KEY_PREFIX": "b"},
            "GRAPHKEEP_KEY_PREFIX and GRAPHKEEP_URL",
        ),
        (
            {"GRAPHKEEP_URL": URL, "GRAPHKEEP_TTL": "soon"},
            "GRAPHKEEP_TTL must be a positive number",
        ),
        ({"GRAPHKEEP_URL": URL, "GRAPHKEEP_TTL": "-5"}, "GRAPHKEEP_TTL must be a positive number"),
        ({"GRAPHKEEP_URL": URL, "GRAPHKEEP_TTL": "inf"}, "GRAPHKEEP_TTL must be a positive number"),
        ({"GRAPHKEEP_URL": URL, "GRAPHKEEP_OPTIONS": "{"}, "GRAPHKEEP_OPTIONS is not JSON"),
        (
            {"GRAPHKEEP_URL": URL, "GRAPHKEEP_OPTIONS": "[1]"},
            "GRAPHKEEP_OPTIONS must be a JSON object",
        ),
        (
            {"GRAPHKEEP_URL": URL, "GRAPHKEEP_OPTIONS": '{"colour": 1}'},
            "GRAPHKEEP_OPTIONS: unknown option",
        ),
        (
            {"GRAPHKEEP_URL": URL, "GRAPHKEEP_OPTIONS": '{"ttl": 5}', "GRAPHKEEP_TTL": "5"},
            "ttl is given both",
        ),
        (
            {"GRAPHKEEP_URL": URL, "LANGGRAPH_AES_KEY": "short"},
            "LANGGRAPH_AES_KEY must be 16, 24 or 32 bytes",
        ),
        (
            {"GRAPHKEEP_URL": URL, "LANGGRAPH_THREAD_TTL": "later"},
            "LANGGRAPH_THREAD_TTL must be minutes",
        ),
        (
            {"GRAPHKEEP_URL": URL, "LANGGRAPH_CHECKPOINTER": _agent(ttl={"default_ttl": -1})},
            "LANGGRAPH_CHECKPOINTER: ttl.default_ttl must be a positive number",
        ),
        (
            {"GRAPHKEEP_URL": URL, "LANGGRAPH_CHECKPOINTER": _agent(ttl={"strategy": "drop"})},
            "LANGGRAPH_CHECKPOINTER: ttl.strategy must be delete or keep_latest",
        ),
        (
            {"GRAPHKEEP_URL": URL, "LANGGRAPH_CHECKPOINTER": _agent(serde={"pickle": True})},
            "LANGGRAPH_CHECKPOINTER: unknown serde option(s) pickle",
        ),
        (
            {
                "GRAPHKEEP_URL": URL,
                "LANGGRAPH_CHECKPOINTER": _agent(serde={"allowed_json_modules": "all"}),
            },
            "LANGGRAPH_CHECKPOINTER: serde.allowed_json_modules",
        ),
    ],
)
def test_bad_checkpointer_settings_name_the_variable(
    environ: dict[str, str], variable: str
) -> None:
    with pytest.raises(ConfigurationError) as raised:
        checkpointer_settings(environ)
    assert variable in str(raised.value)


@pytest.mark.parametrize(
    "environ, variable",
    [
        ({"GRAPHKEEP_STORE_URL": "ftp://x"}, "GRAPHKEEP_STORE_URL: unsupported URL scheme"),
        ({"GRAPHKEEP_STORE_OPTIONS": '{"serde": 1}'}, "GRAPHKEEP_STORE_OPTIONS"),
        ({"LANGGRAPH_STORE": "nope"}, "LANGGRAPH_STORE is not JSON"),
        (
            {"LANGGRAPH_STORE": json.dumps({"ttl": {"sweep": 1}})},
            "LANGGRAPH_STORE: store.ttl: unknown ttl option(s) sweep",
        ),
        (
            {"LANGGRAPH_STORE": json.dumps({"index": {"dims": 0, "embed": "x:y"}})},
            "LANGGRAPH_STORE: store.index: index['dims'] must be a positive int",
        ),
    ],
)
def test_bad_store_settings_name_the_variable(environ: dict[str, str], variable: str) -> None:
    with pytest.raises(ConfigurationError) as raised:
        store_settings({"GRAPHKEEP_URL": URL, **environ})
    assert variable in str(raised.value)


LOADERS = """
import json
from langgraph_api._checkpointer._adapter import _load_checkpointer
from langgraph_api.store import _load_store

found = {}
for path in ("graphkeep.server:checkpointer", "graphkeep.server.checkpointer"):
    found[path] = type(_load_checkpointer(path)()).__name__
for path in ("graphkeep.server:store", "graphkeep.server.store"):
    found[path] = type(_load_store(path)()).__name__
print(json.dumps(found))
"""


@AGENT_SERVER_PYTHON
def test_agent_servers_loaders_take_both_path_forms(tmp_path: Path) -> None:
    """langgraph-api 0.16 reads "graphkeep.server:checkpointer" as module ``graphkeep`` and
    attribute ``server:checkpointer`` (its module's ``__dict__``); graphkeep answers both that
    and the dotted "graphkeep.server.checkpointer" with an async context manager."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LANGGRAPH_")}
    env |= {"PYTHONPATH": str(SRC), "REDIS_URI": "fake", "DATABASE_URI": ":memory:"}
    env["MIGRATIONS_PATH"] = "__inmem"
    done = subprocess.run(
        [sys.executable, "-c", LOADERS], env=env, cwd=tmp_path, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert set(found.values()) == {"_AsyncGeneratorContextManager"}, found
    assert len(found) == 4
