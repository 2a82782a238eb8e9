"""graphkeep.server on LangGraph Agent Server, on every backend: ``langgraph dev`` (the in-memory
Agent Server of ``langgraph-cli[inmem]``) started with ``"checkpointer": {"path":
"graphkeep.server:checkpointer"}`` and ``"store": {"path": "graphkeep.server:store"}``, driven
with the official ``langgraph-sdk``, every answer checked against what graphkeep itself reads
back from the backend. One server per backend; every operation in one test. A second, short
server per backend runs with ``GRAPHKEEP_KEYS`` (issue 47): a thread stopped at an interrupt and
resumed, a store item the graph wrote, read back with graphkeep under the ring and with the
backend's own client (nothing of either readable), and without the ring (``unknown_key``)."""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from langgraph_sdk import get_sync_client
from langgraph_sdk.errors import NotFoundError

import graphkeep
from graphkeep.encryption import KeyRing
from graphkeep.errors import CorruptData
from graphkeep.server import checkpointer_settings
from tests.scenarios.backends import DAMAGE, dynamodb_client, mongodb_documents, redis_client
from tests.scenarios.servers import free_port

#: checkpoints are encrypted with LangGraph's own key variable
AES_KEY = "0123456789abcdef"
#: langgraph-api (Agent Server) is published for Python 3.11 and later only; anywhere else a
#: missing piece fails the test
AGENT_SERVER_PYTHON = pytest.mark.skipif(
    sys.version_info < (3, 11), reason="LangGraph Agent Server (langgraph-api) needs Python 3.11"
)
pytestmark = AGENT_SERVER_PYTHON
SRC = Path(__file__).resolve().parents[1] / "src"
LANGGRAPH = Path(sys.executable).parent / "langgraph"
START_TIMEOUT = 90.0
#: the encrypted server's ring (GRAPHKEEP_KEYS: the first id current), and another writer's
RING_ENV = "gk2:" + base64.b64encode(os.urandom(32)).decode()
OTHER_RING = KeyRing({"other": os.urandom(32)})
#: what the encrypted server's thread and item hold; none of it may be stored readable
SECRET = "enc-proof-7c41e2"

GRAPH = """
import asyncio
import operator
from typing import Annotated, TypedDict

from langgraph.config import get_store
from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt


class State(TypedDict, total=False):
    items: Annotated[list[str], operator.add]
    mode: str
    decision: str


async def remember(state: State) -> State:
    last = state["items"][-1]
    await get_store().aput(("memories", "graph"), last, {"text": f"the graph saw {last}"})
    return {"items": [f"seen:{last}"]}


def route(state: State) -> str:
    return {"approve": "approve", "slow": "slow"}.get(state.get("mode", ""), END)


async def approve(state: State) -> State:
    answer = interrupt({"question": f"approve {state['items'][-1]}?"})
    return {"decision": answer}


async def slow(state: State) -> State:
    await asyncio.sleep(60)
    return {"items": ["slow done"]}


builder = StateGraph(State)
builder.add_node("remember", remember)
builder.add_node("approve", approve)
builder.add_node("slow", slow)
builder.add_edge(START, "remember")
builder.add_conditional_edges("remember", route, ["approve", "slow", END])
builder.add_edge("approve", END)
builder.add_edge("slow", END)
graph = builder.compile()
"""

EMBED = """
from graphkeep.embeddings import hashing_embeddings

embed = hashing_embeddings(16)
"""

CONFIG = {
    "dependencies": ["."],
    "graphs": {"agent": "./graph.py:graph"},
    "checkpointer": {
        "path": "graphkeep.server:checkpointer",
        # honoured by graphkeep.server: a native TTL of 60 minutes, LangGraph's serializer
        "ttl": {"strategy": "delete", "default_ttl": 60},
        "serde": {"pickle_fallback": False, "allowed_json_modules": None},
    },
    "store": {
        "path": "graphkeep.server:store",
        "index": {"dims": 16, "embed": "./embed.py:embed", "fields": ["text"]},
    },
}


class Server:
    """A ``langgraph dev`` process in its own process group, its output in ``log``."""

    def __init__(self, directory: Path, env: dict[str, str]) -> None:
        assert LANGGRAPH.exists(), f"{LANGGRAPH} is missing: pip install 'langgraph-cli[inmem]'"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = directory / "server.log"
        command = [str(LANGGRAPH), "dev", "--host", "127.0.0.1", "--port", str(self.port)]
        command += ["--no-browser", "--no-reload", "--config", str(directory / "langgraph.json")]
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                command,
                cwd=directory,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    @property
    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                pytest.fail(f"langgraph dev exited with {self.process.returncode}:\n{self.log}")
            try:
                if httpx.get(f"{self.url}/ok", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.25)
        pytest.fail(f"langgraph dev did not answer /ok in {START_TIMEOUT} s:\n{self.log}")

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(5)


def _environment(url: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GRAPHKEEP_", "LANGGRAPH_"))}
    env["PYTHONPATH"] = os.pathsep.join([str(SRC), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env |= {"LANGSMITH_TRACING": "false", "LANGGRAPH_CLI_NO_ANALYTICS": "1"}
    if url:
        env["GRAPHKEEP_URL"] = url
    return env | extra


def _project(directory: Path, config: dict[str, Any]) -> None:
    (directory / "graph.py").write_text(GRAPH)
    (directory / "embed.py").write_text(EMBED)
    (directory / "langgraph.json").write_text(json.dumps(config))


def _serve(directory: Path, env: dict[str, str]) -> Iterator[Server]:
    _project(directory, CONFIG)
    server = Server(directory, env)
    try:
        started = time.monotonic()
        server.wait_ready()
        print(f"langgraph dev ready in {time.monotonic() - started:.1f} s")
        yield server
    finally:
        server.stop()


@pytest.fixture
def agent_server(graphkeep_url: str, tmp_path: Path) -> Iterator[Server]:
    yield from _serve(tmp_path, _environment(graphkeep_url, LANGGRAPH_AES_KEY=AES_KEY))


@pytest.fixture
def encrypted_server(graphkeep_url: str, tmp_path: Path) -> Iterator[Server]:
    """A server whose checkpointer and store seal every record with ``GRAPHKEEP_KEYS``."""
    yield from _serve(tmp_path, _environment(graphkeep_url, GRAPHKEEP_KEYS=RING_ENV))


def _saver(url: str) -> Any:
    """graphkeep's own saver, configured as the server's (the same URL, TTL, encryption)."""
    environ = {"GRAPHKEEP_URL": url, "LANGGRAPH_AES_KEY": AES_KEY}
    environ["LANGGRAPH_CHECKPOINTER"] = json.dumps(CONFIG["checkpointer"])
    url, options = checkpointer_settings(environ)
    assert options["ttl"] == 3600.0
    return graphkeep.connect(url, **options)


def _everything_stored(backend: str, url: str) -> list[str]:
    """Every record the test's URL holds, read with the backend's own client, as text
    (``repr``: the strings, numbers and byte strings of every field, sub-document and
    attribute, not only its byte strings)."""
    if backend in ("mongodb",):
        return [repr(doc) for _, doc in mongodb_documents(url)]
    if backend == "dynamodb":
        client, table_name = dynamodb_client(url)
        tables = [t for t in client.list_tables()["TableNames"] if t.startswith(table_name)]
        pages = [
            page
            for table in tables
            for page in client.get_paginator("scan").paginate(TableName=table)
        ]
        return [repr(item) for page in pages for item in page["Items"]]
    prefix = url.partition("key_prefix=")[2].partition("&")[0]
    assert prefix, url
    client = redis_client(url)
    read = {
        b"string": client.get,
        b"hash": client.hgetall,
        b"list": lambda key: client.lrange(key, 0, -1),
        b"set": client.smembers,
        b"zset": lambda key: client.zrange(key, 0, -1, withscores=True),
        b"stream": client.xrange,
    }
    try:
        keys = set(client.scan_iter(match=f"{prefix}*"))
        keys |= set(client.scan_iter(match=f"*{{{prefix}*"))
        records = []
        for key in keys:
            kind = client.type(key)
            assert kind in read, f"{key!r} is a {kind!r}: read it here too"
            records.append(f"{key!r}: {read[kind](key)!r}")
        return records
    finally:
        client.close()


def _values(client: Any, thread_id: str) -> dict[str, Any]:
    return dict(client.threads.get_state(thread_id)["values"])


def test_agent_server_runs_on_graphkeep(agent_server: Server, graphkeep_url: str) -> None:
    started = time.monotonic()
    client = get_sync_client(url=agent_server.url)

    # assistants: the graph's default one, and one created here
    [assistant] = client.assistants.search(graph_id="agent")
    assert client.assistants.get(assistant["assistant_id"])["graph_id"] == "agent"
    created = client.assistants.create(graph_id="agent", name="second")
    assert {a["assistant_id"] for a in client.assistants.search(graph_id="agent")} == {
        assistant["assistant_id"],
        created["assistant_id"],
    }

    # threads: create, search, get
    thread = client.threads.create(metadata={"user": "ada"})
    thread_id = thread["thread_id"]
    assert [t["thread_id"] for t in client.threads.search(metadata={"user": "ada"})] == [thread_id]
    assert client.threads.get(thread_id)["metadata"]["user"] == "ada"

    # runs: wait, then stream
    result = client.runs.wait(thread_id, "agent", input={"items": ["hello"], "mode": "plain"})
    assert result["items"] == ["hello", "seen:hello"]
    assert _values(client, thread_id)["items"] == ["hello", "seen:hello"]
    after_first = client.threads.get_state(thread_id)["checkpoint"]["checkpoint_id"]
    chunks = list(
        client.runs.stream(
            thread_id, "agent", input={"items": ["again"], "mode": "plain"}, stream_mode="updates"
        )
    )
    updates = [c.data for c in chunks if c.event == "updates"]
    assert updates == [{"remember": {"items": ["seen:again"]}}]
    assert _values(client, thread_id)["items"] == ["hello", "seen:hello", "again", "seen:again"]

    # interrupt and resume
    client.runs.wait(thread_id, "agent", input={"items": ["buy"], "mode": "approve"})
    state = client.threads.get_state(thread_id)
    assert state["next"] == ["approve"]
    [task] = state["tasks"]
    assert task["interrupts"][0]["value"] == {"question": "approve seen:buy?"}
    resumed = client.runs.wait(thread_id, "agent", command={"resume": "yes"})
    assert resumed["decision"] == "yes"
    assert client.threads.get_state(thread_id)["next"] == []

    # the state Agent Server shows is graphkeep's, encrypted with LANGGRAPH_AES_KEY
    with graphkeep.connect(graphkeep_url) as plain:
        with pytest.raises(CorruptData, match=r"'msgpack\+aes' payload is encrypted"):
            plain.get_tuple({"configurable": {"thread_id": thread_id}})
    with _saver(graphkeep_url) as saver:
        stored = saver.get_tuple({"configurable": {"thread_id": thread_id}})
        assert stored is not None
        assert stored.checkpoint["channel_values"]["decision"] == "yes"
        stored_ids = [
            t.config["configurable"]["checkpoint_id"]
            for t in saver.list({"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}})
        ]

    # history: newest first, every checkpoint of the thread, the same as graphkeep's list
    history = client.threads.get_history(thread_id, limit=100)
    assert [h["checkpoint"]["checkpoint_id"] for h in history] == stored_ids
    steps = [h["metadata"]["step"] for h in history]
    assert steps == list(range(8, -2, -1))  # four runs' checkpoints, from the first input
    assert history[0]["values"]["decision"] == "yes"

    # update_state
    client.threads.update_state(thread_id, {"items": ["edited"]}, as_node="remember")
    assert _values(client, thread_id)["items"][-1] == "edited"

    # a fork from an old checkpoint: a run from the state after the first run
    forked = client.runs.wait(
        thread_id, "agent", input={"items": ["branch"], "mode": "plain"}, checkpoint_id=after_first
    )
    assert forked["items"] == ["hello", "seen:hello", "branch", "seen:branch"]
    assert "decision" not in forked
    parents = {
        h["checkpoint"]["checkpoint_id"]: (h["parent_checkpoint"] or {}).get("checkpoint_id")
        for h in client.threads.get_history(thread_id, limit=100)
    }
    lineage, at = [], client.threads.get_state(thread_id)["checkpoint"]["checkpoint_id"]
    while at is not None:
        lineage.append(at)
        at = parents[at]
    # the branch (its input, two steps) on the first run's last checkpoint and its ancestors;
    # the later runs' checkpoints (and the update) stay in the history, off the branch
    assert lineage[3:] == stored_ids[-3:] and lineage[3] == after_first
    assert len(parents) == len(stored_ids) + 1 + 3 and stored_ids[0] not in lineage

    # copy: the same state and history on a new thread
    copy_id = client.threads.copy(thread_id)["thread_id"]
    assert copy_id != thread_id
    assert _values(client, copy_id) == _values(client, thread_id)
    copied = client.threads.get_history(copy_id, limit=100)
    assert len(copied) == len(client.threads.get_history(thread_id, limit=100))

    # delete: 404, and graphkeep holds nothing more for the thread
    client.threads.delete(copy_id)
    with pytest.raises(NotFoundError):
        client.threads.get(copy_id)
    with _saver(graphkeep_url) as saver:
        assert saver.get_tuple({"configurable": {"thread_id": copy_id}}) is None
        assert saver.get_tuple({"configurable": {"thread_id": thread_id}}) is not None

    # multitask_strategy="rollback": the slow run is cancelled and its checkpoints deleted
    other = client.threads.create()["thread_id"]
    first = client.runs.create(other, "agent", input={"items": ["first"], "mode": "slow"})
    deadline = time.monotonic() + 30
    while client.runs.get(other, first["run_id"])["status"] != "running":
        assert time.monotonic() < deadline, "the slow run never started"
        time.sleep(0.1)
    while "seen:first" not in _values(client, other).get("items", []):
        assert time.monotonic() < deadline, "the slow run never checkpointed its first step"
        time.sleep(0.1)
    second = client.runs.create(
        other, "agent", input={"items": ["second"], "mode": "plain"}, multitask_strategy="rollback"
    )
    client.runs.join(other, second["run_id"])
    assert _values(client, other)["items"] == ["second", "seen:second"]
    with pytest.raises(NotFoundError):
        client.runs.get(other, first["run_id"])
    with _saver(graphkeep_url) as saver:
        runs = {
            t.metadata.get("run_id")
            for t in saver.list({"configurable": {"thread_id": other, "checkpoint_ns": ""}})
        }
        assert runs == {second["run_id"]}

    # the store API, on graphkeep's store (with the index from langgraph.json)
    client.store.put_item(["memories", "ada"], "tea", {"text": "ada likes green tea"})
    client.store.put_item(["memories", "ada"], "bikes", {"text": "ada rides bikes"})
    assert client.store.get_item(["memories", "ada"], "tea")["value"] == {
        "text": "ada likes green tea"
    }
    hits = client.store.search_items(["memories", "ada"], query="green tea", limit=1)["items"]
    assert [h["key"] for h in hits] == ["tea"] and hits[0]["score"] is not None
    found = client.store.search_items(["memories"], filter={"text": "ada rides bikes"})["items"]
    assert [h["key"] for h in found] == ["bikes"]
    spaces = client.store.list_namespaces(prefix=["memories"])["namespaces"]
    assert sorted(map(tuple, spaces)) == [("memories", "ada"), ("memories", "graph")]
    client.store.delete_item(["memories", "ada"], "bikes")
    assert client.store.get_item(["memories", "ada"], "bikes") is None  # 200 null, as built-in
    with graphkeep.connect_store(graphkeep_url) as store:
        assert store.get(("memories", "ada"), "tea").value == {"text": "ada likes green tea"}
        assert store.get(("memories", "graph"), "hello").value == {"text": "the graph saw hello"}
        assert store.get(("memories", "ada"), "bikes") is None

    # the capability check: graphkeep's saver has every extended method Agent Server looks for
    log = agent_server.log
    assert "Using custom checkpointer" in log and "Using custom store" in log, log
    assert "Custom checkpointer missing" not in log, log
    print(f"operations took {time.monotonic() - started:.1f} s")


def test_agent_server_with_graphkeep_keys_stores_nothing_readable(
    encrypted_server: Server, graphkeep_url: str, graphkeep_backend: str
) -> None:
    started = time.monotonic()
    client = get_sync_client(url=encrypted_server.url)
    thread_id = client.threads.create()["thread_id"]
    config = {"configurable": {"thread_id": thread_id}}

    # a run stopped at an interrupt (the graph writes a store item first), then resumed
    client.runs.wait(thread_id, "agent", input={"items": [SECRET], "mode": "approve"})
    state = client.threads.get_state(thread_id)
    assert state["next"] == ["approve"]
    [task] = state["tasks"]
    assert task["interrupts"][0]["value"] == {"question": f"approve seen:{SECRET}?"}
    resumed = client.runs.wait(thread_id, "agent", command={"resume": f"yes {SECRET}"})
    assert resumed == {
        "items": [SECRET, f"seen:{SECRET}"],
        "mode": "approve",
        "decision": f"yes {SECRET}",
    }
    assert client.threads.get_state(thread_id)["next"] == []
    item = {"text": f"the graph saw {SECRET}"}  # stored under the key SECRET (keys stay readable)
    assert client.store.get_item(["memories", "graph"], SECRET)["value"] == item
    history = client.threads.get_history(thread_id, limit=100)

    # graphkeep under the same ring reads what the server wrote
    ring = KeyRing.from_env(environ={"GRAPHKEEP_KEYS": RING_ENV})
    with graphkeep.connect(graphkeep_url, encryption=ring) as saver:
        stored = saver.get_tuple(config)
        assert stored is not None
        assert stored.checkpoint["channel_values"]["decision"] == f"yes {SECRET}"
        assert stored.checkpoint["channel_values"]["items"] == [SECRET, f"seen:{SECRET}"]
        listed = [t.config["configurable"]["checkpoint_id"] for t in saver.list(config)]
        assert listed == [h["checkpoint"]["checkpoint_id"] for h in history]
    with graphkeep.connect_store(graphkeep_url, encryption=ring) as store:
        found = store.get(("memories", "graph"), SECRET)
        assert found is not None and found.value == item

    # the backend's own client: every stored byte string, none with the state or the item in it
    seen: list[bytes] = []
    DAMAGE[graphkeep_backend](graphkeep_url, lambda data: seen.append(bytes(data)) and None)  # type: ignore[func-returns-value]
    assert seen, "the backend's own client found nothing stored"
    header = b"\x01" + bytes([len("gk2")]) + b"gk2"  # the envelope's format and key id
    assert any(header in data for data in seen), "no record sealed under gk2"
    records = _everything_stored(graphkeep_backend, graphkeep_url)
    assert len(records) >= 3, records
    for marker in (f"seen:{SECRET}", f"yes {SECRET}", f"the graph saw {SECRET}"):
        readable = [data[:80] for data in seen if marker.encode() in data]
        readable += [record[:200] for record in records if marker in record]
        assert not readable, f"{marker!r} stored readable: {readable}"

    # a reader without the ring, or with another writer's, gets unknown_key, never state
    with graphkeep.connect(graphkeep_url) as plain:
        with pytest.raises(CorruptData) as caught:
            plain.get_tuple(config)
        assert caught.value.kind == "unknown_key"
    with graphkeep.connect(graphkeep_url, encryption=OTHER_RING) as other:
        with pytest.raises(CorruptData) as caught:
            other.get_tuple(config)
        assert caught.value.kind == "unknown_key"
    with graphkeep.connect_store(graphkeep_url, encryption=OTHER_RING) as other_store:
        with pytest.raises(CorruptData) as caught:
            other_store.get(("memories", "graph"), SECRET)
        assert caught.value.kind == "unknown_key"
    with graphkeep.connect_store(graphkeep_url) as plain_store:  # no ring: refused, not an envelope
        with pytest.raises(CorruptData) as caught:
            plain_store.get(("memories", "graph"), SECRET)
        assert caught.value.kind == "unknown_key"
    print(f"operations took {time.monotonic() - started:.1f} s")


def test_agent_server_without_graphkeep_url_fails_at_startup(tmp_path: Path) -> None:
    """Also the dotted path form: the server loads it, calls it, and stops on its error."""
    dotted = {**CONFIG, "checkpointer": {"path": "graphkeep.server.checkpointer"}}
    _project(tmp_path, dotted)
    server = Server(tmp_path, _environment(""))
    try:
        returncode = server.process.wait(START_TIMEOUT)
    except subprocess.TimeoutExpired:
        pytest.fail(f"langgraph dev kept running without GRAPHKEEP_URL:\n{server.log}")
    finally:
        server.stop()
    assert returncode != 0
    assert "ConfigurationError: GRAPHKEEP_URL is not set" in server.log, server.log
    assert "Application startup failed" in server.log, server.log
