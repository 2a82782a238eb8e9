"""``graphkeep store ...`` on real stores: LangGraph's SqliteStore files and every backend.

Backends come from the conformance set-ups; one joins as soon as its
``graphkeep.backends.<backend>.store`` module exists. Every test works in its own key
prefix; commands run in-process through ``run([...])`` (a fake terminal for progress) and
once as a ``python -m graphkeep.cli`` subprocess.
"""

from __future__ import annotations

import importlib.util
import io
import json
import math
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langgraph.store.base import PutOp
from langgraph.store.sqlite import SqliteStore

import graphkeep
from conformance.setups import all_setups
from graphkeep.cli import run
from graphkeep.cli.console import UsageError
from graphkeep.cli.store_values import format_namespace, parse_namespace

from .conftest import unique_prefix

ROOT = Path(__file__).resolve().parents[1]

#: namespaces chosen to need the JSON form ("/" in a label), unicode and depth
ITEMS: list[tuple[tuple[str, ...], str, dict[str, Any]]] = [
    (("users", "alice"), "prefs", {"food": "pizza", "n": 3, "tags": ["a", "b"]}),
    (("users", "alice", "memories"), "m1", {"text": "likes hiking", "n": 1, "ok": True}),
    (("users", "bob"), "prefs", {"food": "sushi", "n": 5, "nested": {"x": 1.5}}),
    (("team/a", "notes"), "n 1", {"text": "ünïcødé ✓", "n": None}),
]


def _store_module(url: str) -> str | None:
    scheme = url.split("://", 1)[0]
    entry = graphkeep.BACKENDS.get(scheme)
    if entry is None:
        return None
    name = f"{entry[0]}.store"
    return name if importlib.util.find_spec(name) is not None else None


def _backend_params() -> list[Any]:
    params = []
    for setup in all_setups():
        if setup.name == "reference" or _store_module(setup.url) is None:
            continue
        marks = [getattr(pytest.mark, setup.marker)] if setup.marker else []
        params.append(pytest.param(setup.url, id=setup.name, marks=marks))
    return params


class Result:
    def __init__(self, code: int, out: str, err: str) -> None:
        self.code, self.out, self.err = code, out, err

    def json(self) -> Any:
        return json.loads(self.out)


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def gk(*argv: str, err: io.StringIO | None = None) -> Result:
    out, err = io.StringIO(), err if err is not None else io.StringIO()
    code = run(list(argv), out, err)
    return Result(code, out.getvalue(), err.getvalue())


def seed_sqlite(path: Path, items: list[Any] = ITEMS) -> str:
    with SqliteStore.from_conn_string(str(path)) as store:
        store.setup()
        for ns, key, value in items:
            store.put(ns, key, value)
    return f"sqlite:///{path}"  # absolute path: sqlite:////tmp/...


def sqlite_items(path: Path) -> dict[tuple[tuple[str, ...], str], dict[str, Any]]:
    with SqliteStore.from_conn_string(str(path)) as store:
        return {(tuple(i.namespace), i.key): i.value for i in store.search((), limit=1000)}


@pytest.fixture
def source(tmp_path: Path) -> str:
    return seed_sqlite(tmp_path / "source.db")


@pytest.fixture(scope="session")
def seeded_file(tmp_path_factory: pytest.TempPathFactory) -> str:
    return seed_sqlite(tmp_path_factory.mktemp("seeded") / "seeded.db")


@pytest.fixture(params=_backend_params())
def backend(request: pytest.FixtureRequest) -> tuple[str, str]:
    """(URL, key prefix) of an empty store on one backend."""
    return request.param, unique_prefix("clistore")


# -- namespaces on the command line ---------------------------------------------------------


def test_namespace_syntax_round_trips_slashes_json_arrays_and_root() -> None:
    assert parse_namespace("users/alice") == ("users", "alice")
    assert parse_namespace('["team/a", "notes"]') == ("team/a", "notes")
    assert parse_namespace("/", root=True) == ()
    assert parse_namespace("[]", root=True) == ()
    assert parse_namespace("users/*", wildcards=True) == ("users", "*")
    for ns in [("users", "alice"), ("team/a", "notes"), ("[x", "y"), ("ü", "✓")]:
        assert parse_namespace(format_namespace(ns)) == ns
    for bad in ["a//b", "a.b/c", '["a", 1]', "[not json", "/"]:
        with pytest.raises(UsageError):
            parse_namespace(bad)


# -- sqlite -> sqlite -----------------------------------------------------------------------


def test_store_copy_between_sqlite_files_is_verified_and_rerunnable(
    tmp_path: Path, source: str
) -> None:
    dst = f"sqlite:///{tmp_path / 'copy.db'}"
    first = gk("store", "copy", source, dst, "--json")
    assert first.code == 0, first.err
    assert first.json()["copied"] == len(ITEMS)
    assert first.json()["verified"] == len(ITEMS) and first.json()["ok"] is True
    assert sqlite_items(tmp_path / "copy.db") == sqlite_items(tmp_path / "source.db")
    again = gk("store", "copy", source, dst, "--json")
    assert again.code == 0
    assert (again.json()["copied"], again.json()["unchanged"]) == (0, len(ITEMS))
    forced = gk("store", "copy", source, dst, "--overwrite", "--json")
    assert (forced.json()["updated"], forced.json()["verified"]) == (len(ITEMS), len(ITEMS))


def test_store_copy_rewrites_only_items_whose_value_changed(tmp_path: Path, source: str) -> None:
    dst = f"sqlite:///{tmp_path / 'copy.db'}"
    assert gk("store", "copy", source, dst).code == 0
    with SqliteStore.from_conn_string(str(tmp_path / "source.db")) as store:
        store.put(("users", "bob"), "prefs", {"food": "ramen"})
    result = gk("store", "copy", source, dst, "--json")
    assert result.code == 0
    assert result.json()["updated"] == 1 and result.json()["unchanged"] == len(ITEMS) - 1
    assert sqlite_items(tmp_path / "copy.db")[(("users", "bob"), "prefs")] == {"food": "ramen"}


def test_store_copy_dry_run_writes_nothing(tmp_path: Path, source: str) -> None:
    target = tmp_path / "never.db"
    result = gk("store", "copy", source, f"sqlite:///{target}", "--dry-run", "--json")
    assert result.code == 0, result.err
    assert result.json()["copied"] == len(ITEMS) and result.json()["dry_run"] is True
    assert not target.exists()
    text = gk("store", "copy", source, f"sqlite:///{target}", "--dry-run")
    assert "would copy 4" in text.out


def test_store_copy_exits_1_when_the_destination_does_not_hold_what_was_written(
    tmp_path: Path, source: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    original = SqliteStore.batch

    def lossy(self: SqliteStore, ops: Any) -> Any:
        ops = list(ops)
        if any(isinstance(op, PutOp) for op in ops):  # a store that drops writes
            ops = [op for op in ops if not isinstance(op, PutOp)]
            original(self, ops)
            return [None] * len(ops)
        return original(self, ops)

    dst = f"sqlite:///{tmp_path / 'lossy.db'}"
    gk("store", "copy", source, dst, "--prefix", "users/bob")  # creates the schema
    monkeypatch.setattr(SqliteStore, "batch", lossy)
    result = gk("store", "copy", source, dst)
    assert result.code == 1
    assert "VERIFY FAILED" in result.out and "missing on the destination" in result.out


def test_store_copy_progress_only_on_a_terminal(tmp_path: Path, source: str) -> None:
    plain = gk("store", "copy", source, f"sqlite:///{tmp_path / 'a.db'}")
    assert plain.code == 0 and plain.err == ""
    tty = gk("store", "copy", source, f"sqlite:///{tmp_path / 'b.db'}", err=Terminal())
    assert tty.code == 0 and "copy" in tty.err and "\r" in tty.err


# -- every command on every backend ---------------------------------------------------------


def test_store_commands_on_backend(backend: tuple[str, str], source: str, tmp_path: Path) -> None:
    url, prefix = backend
    kp = ("--key-prefix", prefix)
    copied = gk("store", "copy", source, url, *kp, "--json")
    assert copied.code == 0, copied.err
    assert copied.json()["verified"] == len(ITEMS)
    rerun = gk("store", "copy", source, url, *kp, "--json")
    assert (rerun.json()["copied"], rerun.json()["unchanged"]) == (0, len(ITEMS))

    listed = gk("store", "namespaces", url, *kp, "--json")
    assert listed.code == 0, listed.err
    assert listed.json() == sorted([list(ns) for ns, _, _ in ITEMS])
    text = gk("store", "namespaces", url, *kp).out.splitlines()
    assert text == [format_namespace(tuple(ns)) for ns in listed.json()]
    assert '["team/a", "notes"]' in text
    users = gk("store", "namespaces", url, *kp, "--prefix", "users", "--max-depth", "2", "--json")
    assert users.json() == [["users", "alice"], ["users", "bob"]]
    suffix = gk("store", "namespaces", url, *kp, "--suffix", "memories", "--json")
    assert suffix.json() == [["users", "alice", "memories"]]
    assert len(gk("store", "namespaces", url, *kp, "--limit", "2", "--json").json()) == 2

    got = gk("store", "get", url, '["team/a", "notes"]', "n 1", *kp, "--json")
    assert got.code == 0, got.err
    assert got.json()["value"] == {"text": "ünïcødé ✓", "n": None}
    assert "likes hiking" in gk("store", "get", url, "users/alice/memories", "m1", *kp).out
    missing = gk("store", "get", url, "users/alice", "nope", *kp)
    assert missing.code == 4 and "nope" in missing.err

    found = gk("store", "search", url, "users", *kp, "--filter", '{"n": {"$gte": 3}}', "--json")
    assert found.code == 0, found.err
    assert sorted(i["key"] + str(i["value"]["n"]) for i in found.json()) == ["prefs3", "prefs5"]
    nested = gk("store", "search", url, "/", *kp, "--filter", '{"nested.x": 1.5}', "--json")
    assert [i["namespace"] for i in nested.json()] == [["users", "bob"]]
    everything = gk("store", "search", url, "/", *kp, "--limit", "10", "--json").json()
    paged = gk("store", "search", url, "/", *kp, "--limit", "2", "--offset", "1", "--json").json()
    assert len(everything) == len(ITEMS) and paged == everything[1:3]
    assert "NAMESPACE" in gk("store", "search", url, "users/alice", *kp).out

    # and back into a fresh SQLite file: the same items
    back = tmp_path / "back.db"
    returned = gk("store", "copy", url, f"sqlite:///{back}", "--src-key-prefix", prefix)
    assert returned.code == 0, returned.err + returned.out
    assert sqlite_items(back) == {(ns, key): value for ns, key, value in ITEMS}

    assert gk("store", "delete", url, "users/bob", "prefs", *kp).code == 0
    assert gk("store", "delete", url, "users/bob", "prefs", *kp).code == 4
    refused = gk("store", "delete", url, "--prefix", "users", *kp)
    assert refused.code == 2 and "--yes" in refused.err
    planned = gk("store", "delete", url, "--prefix", "users", *kp, "--dry-run", "--json")
    assert len(planned.json()["items"]) == 2 and planned.json()["deleted"] == 0
    gone = gk("store", "delete", url, "--prefix", "users", *kp, "--yes", "--json")
    assert gone.code == 0 and gone.json()["deleted"] == 2
    assert gk("store", "namespaces", url, *kp, "--json").json() == [["team/a", "notes"]]


def fake_embed(texts: list[str]) -> list[list[float]]:
    """A deterministic 4-dimensional embedding: letters a-f, g-m, n-s, t-z."""
    vectors = []
    for text in texts:
        counts = [0.0, 0.0, 0.0, 0.0]
        for ch in text.lower():
            if "a" <= ch <= "z":
                counts[min(3, (ord(ch) - ord("a")) // 7)] += 1
        norm = math.sqrt(sum(c * c for c in counts)) or 1.0
        vectors.append([c / norm for c in counts])
    return vectors


def test_store_search_query_uses_the_given_embedding_model(
    backend: tuple[str, str], tmp_path: Path
) -> None:
    url, prefix = backend
    src = seed_sqlite(
        tmp_path / "docs.db",
        [
            (("docs",), "abc", {"text": "abcabc fed"}),
            (("docs",), "xyz", {"text": "xyz tuvw"}),
        ],
    )
    embed = ("--embed", f"{__name__}:fake_embed", "--dims", "4", "--field", "text")
    copied = gk("store", "copy", src, url, "--key-prefix", prefix, *embed)
    assert copied.code == 0, copied.err
    hits = gk(
        "store", "search", url, "docs", "--key-prefix", prefix, "--query", "zyx wut", *embed,
        "--json",
    )  # fmt: skip
    assert hits.code == 0, hits.err
    assert [h["key"] for h in hits.json()] == ["xyz", "abc"]
    assert hits.json()[0]["score"] > hits.json()[1]["score"]
    assert "SCORE" in gk("store", "search", url, "docs", "--key-prefix", prefix,
                         "--query", "abc", *embed).out  # fmt: skip


def test_store_copy_between_two_backends_and_with_a_ttl(
    backend: tuple[str, str], seeded_file: str
) -> None:
    url, prefix = backend
    redis_url = next(s.url for s in all_setups() if s.name == "redis")
    staging = unique_prefix("clistore")
    seeded = gk("store", "copy", seeded_file, redis_url, "--dst-key-prefix", staging)
    assert seeded.code == 0, seeded.err
    moved = gk(
        "store", "copy", redis_url, url, "--src-key-prefix", staging, "--dst-key-prefix", prefix,
        "--prefix", "users", "--json",
    )  # fmt: skip
    assert moved.code == 0, moved.err
    assert moved.json()["copied"] == 3 and moved.json()["prefix"] == ["users"]
    assert len(gk("store", "search", url, "/", "--key-prefix", prefix, "--json").json()) == 3
    expiring = unique_prefix("clistore")
    timed = gk("store", "copy", seeded_file, url, "--dst-key-prefix", expiring, "--ttl", "0.02")
    assert timed.code == 0, timed.err
    time.sleep(1.6)  # 0.02 minutes = 1.2 s: expired items are never returned
    assert gk("store", "search", url, "/", "--key-prefix", expiring, "--json").json() == []


# -- errors ---------------------------------------------------------------------------------


def test_store_usage_errors_exit_2_before_touching_a_store(source: str, tmp_path: Path) -> None:
    cases = [
        ("store", "search", source, "users", "--filter", "{nope"),
        ("store", "search", source, "users", "--filter", "[1]"),
        ("store", "search", source, "users", "--filter", '{"n": {"$regex": "x"}}'),
        ("store", "search", source, "users", "--query", "food"),
        ("store", "get", source, "users/alice", "prefs", "--key-prefix", "p"),
        ("store", "get", "ftp://host/x", "users/alice", "prefs"),
        ("store", "get", source, "a.b", "prefs"),
        ("store", "copy", source, source),
        ("store", "delete", source),
        ("store", "namespaces"),
    ]
    for argv in cases:
        result = gk(*argv)
        assert result.code == 2, (argv, result.err)
        assert result.out == "" and "Traceback" not in result.err
    assert sqlite_items(tmp_path / "source.db")  # untouched


def test_store_missing_sqlite_file_is_not_found(tmp_path: Path) -> None:
    result = gk("store", "namespaces", f"sqlite:///{tmp_path / 'absent.db'}")
    assert result.code == 4 and "no SQLite database" in result.err
    assert not (tmp_path / "absent.db").exists()


UNREACHABLE = [
    "redis://admin:s3cretpw@127.0.0.1:1/0",
    "redis+cluster://:s3cretpw@127.0.0.1:1",
    "mongodb://admin:s3cretpw@127.0.0.1:1/x?serverSelectionTimeoutMS=1000",
    "dynamodb://t?region=us-east-1&endpoint_url=http://127.0.0.1:1",
]


@pytest.mark.parametrize("url", UNREACHABLE, ids=lambda u: u.split("://")[0])
def test_store_unreachable_server_is_one_masked_line_and_exit_1(url: str) -> None:
    if _store_module(url) is None:
        pytest.fail(f"no store module for {url.split('://')[0]}:// yet")
    result = gk("store", "namespaces", url)
    assert result.code == 1, result.err
    assert "s3cretpw" not in result.err and "Traceback" not in result.err
    assert result.err.startswith("graphkeep: error: ") and result.err.count("\n") == 1


def test_store_postgres_urls_need_langgraphs_postgres_store() -> None:
    result = gk("store", "namespaces", "postgresql://u:pw1234@127.0.0.1:1/db")
    assert "pw1234" not in result.err
    if importlib.util.find_spec("langgraph.store.postgres") is None:
        assert result.code == 2 and "pip install langgraph-checkpoint-postgres" in result.err
    else:
        assert result.code == 1 and "unavailable" in result.err


def test_store_help_runs_as_a_subprocess_with_examples() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "graphkeep.cli", "store", "copy", "--help"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=dict(os.environ),
        timeout=60,
    )
    assert proc.returncode == 0
    assert "examples:" in proc.stdout and "graphkeep store copy sqlite:///" in proc.stdout


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.chdir(tmp_path)  # relative sqlite:/// paths land in the test's directory
    yield
