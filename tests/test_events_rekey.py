"""Key rotation of the run event log (issue 47, item 1: after ``rekey --all`` and dropping k1,
every event reads) — on real servers, every backend the event log has (``graphkeep_url``), the
op sync and async, and ``graphkeep rekey --all``.

Runs are written under ``k1`` (one with several events, a large one and its close event; one
still open); ``k2`` is added as the current key; the log's ``rekey`` (a dry run first) rewrites
them in place; with ``k1`` dropped the runs read whole, from the start and after an id, keep
their close status, and take further events after their last id. The stored payloads are read
with each backend's own client (``tests.scenarios.backends.DAMAGE``) to show what a dry run and
a run refused for a planted plaintext event leave alone.
"""

from __future__ import annotations

import base64
import os
import uuid
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from langgraph.checkpoint.base import empty_checkpoint

import graphkeep
from graphkeep.encryption import KeyRing
from graphkeep.errors import ConfigurationError
from graphkeep.events.port import MAX_EVENT_BYTES
from graphkeep.events.threads import index_id
from tests.cli_runs import gk
from tests.scenarios.backends import dynamodb_client, mongodb_documents, redis_client
from tests.test_events_encryption import Log, key_id_of, opened, payloads

MODES = ("sync", "async")
K1, K2 = os.urandom(32), os.urandom(32)
OLD = KeyRing({"k1": K1})
ROTATING = KeyRing({"k2": K2, "k1": K1}, current="k2")
NEW = KeyRing({"k2": K2})


@pytest.fixture(params=MODES)
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def run_id() -> str:
    return f"run-{uuid.uuid4().hex[:8]}"


def key_ids(backend: str, url: str) -> list[str]:
    """The key ids of the sealed payloads stored (read with the backend's own client)."""
    return sorted(k for k in map(key_id_of, payloads(backend, url)) if k is not None)


def expiries(backend: str, url: str) -> list[Any]:
    """When each stored event record expires, read with the backend's own client (Redis: the
    hours left of each run's stream)."""
    if backend.startswith("redis"):
        prefix = parse_qs(urlsplit(url).query)["key_prefix"][0]
        client = redis_client(url)
        streams = list(client.scan_iter(match=f"{prefix}:ev1:*:s"))
        return sorted(round(client.pttl(k) / 3_600_000) for k in streams)
    if backend == "mongodb":
        docs = [d for _, d in mongodb_documents(url) if "run" in d and d.get("seq", 0) > 0]
        return sorted(d["expires_at"] for d in docs)
    client, table = dynamodb_client(url)
    found = []
    for name in (t for t in client.list_tables()["TableNames"] if t.startswith(table)):
        for page in client.get_paginator("scan").paginate(TableName=name):
            found += [i["exp"]["N"] for i in page["Items"] if i["sk"]["S"].startswith("e#")]
    return sorted(found)


def rekey(log: Log, **options: Any) -> Any:
    return log.call("rekey", **options)


def write_runs(mode: str, url: str, run_id: str) -> dict[str, list[tuple[str, dict[str, Any]]]]:
    """Under k1: ``run_id`` (3 events, a large one, one more, closed) and ``run_id-open``."""
    large = {"type": "custom", "blob": "x" * (MAX_EVENT_BYTES - 40)}
    with opened(mode, url, OLD) as log:
        log.call("append_many", run_id, [{"type": "token", "n": n} for n in range(3)])
        log.call("append", run_id, large)
        log.call("append", run_id, {"type": "custom", "n": 4})
        log.call("close", run_id, "success")
        log.call("append_many", f"{run_id}-open", [{"n": 1}, {"n": 2}])
        return {run: log.read(run) for run in (run_id, f"{run_id}-open")}


def test_rekey_rewrites_every_run_in_place_and_k1_can_go(
    graphkeep_backend: str, graphkeep_url: str, mode: str, run_id: str
) -> None:
    runs = write_runs(mode, graphkeep_url, run_id)
    events = sum(len(r) for r in runs.values())
    assert key_ids(graphkeep_backend, graphkeep_url) == ["k1"] * events
    expiring = expiries(graphkeep_backend, graphkeep_url)
    assert expiring and all(expiring), expiring  # the default ttl: a day
    with opened(mode, graphkeep_url, None) as plain:  # a log without a ring cannot rekey
        with pytest.raises(ConfigurationError, match="encryption=KeyRing"):
            rekey(plain)

    with opened(mode, graphkeep_url, ROTATING) as log:
        dry = rekey(log, dry_run=True)
        assert dry.rewritten == events and dry.by_key_id == {"k1": events, "k2": 0}
        assert sorted(dry.rekeyed) == sorted(runs) and not dry.failed
        assert key_ids(graphkeep_backend, graphkeep_url) == ["k1"] * events  # nothing written

        done = rekey(log)
        assert done.rewritten == events and not done.failed, done
        assert sorted(done.rekeyed) == sorted(runs) and done.current == []
        assert key_ids(graphkeep_backend, graphkeep_url) == ["k2"] * events
        assert expiries(graphkeep_backend, graphkeep_url) == expiring  # retention unchanged

        again = rekey(log)  # resumable: what is current is skipped
        assert again.rewritten == 0 and sorted(again.current) == sorted(runs)
        assert again.by_key_id == {"k1": 0, "k2": events}

    with opened(mode, graphkeep_url, NEW) as log:  # k1 left the ring: every event reads
        for run, before in runs.items():
            assert log.read(run) == before
            assert log.read(run, after=before[1][0]) == before[2:]
        assert log.call("state", run_id).closed == "success"
        assert log.call("state", f"{run_id}-open").closed is None
        later = log.call("append", f"{run_id}-open", {"n": 3})  # numbered after the last id
        assert [i for i, _ in log.read(f"{run_id}-open")] == [
            *(i for i, _ in runs[f"{run_id}-open"]),
            later,
        ]


def test_a_planted_plaintext_event_fails_its_run_closed(
    graphkeep_backend: str, graphkeep_url: str, mode: str, run_id: str
) -> None:
    planted = f"{run_id}-planted"
    with opened(mode, graphkeep_url, OLD) as log:
        log.call("append_many", run_id, [{"n": 1}, {"n": 2}])
        log.call("append_many", planted, [{"n": 1}, {"n": 2}])
    with opened(mode, graphkeep_url, None) as plain:  # written as an attacker would
        plain.call("append", planted, {"type": "custom", "trust": "me"})
    with opened(mode, graphkeep_url, ROTATING) as log:
        result = rekey(log)
        assert [f["run_id"] for f in result.failed] == [planted], result
        assert result.failed[0]["kind"] == "plaintext"
        assert result.rekeyed == [run_id] and result.rewritten == 2
        # nothing of the refused run was written
        assert key_ids(graphkeep_backend, graphkeep_url) == ["k1", "k1", "k2", "k2"]
        only = rekey(log, run_ids=[run_id])
        assert only.current == [run_id] and only.failed == []
    with opened(mode, graphkeep_url, NEW) as log:
        assert [e for _, e in log.read(run_id)] == [{"n": 1}, {"n": 2}]


def test_graphkeep_rekey_all_rewrites_the_event_logs(
    graphkeep_backend: str, graphkeep_url: str, run_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs = write_runs("sync", graphkeep_url, run_id)
    events = sum(len(r) for r in runs.values())
    encoded = {k: base64.b64encode(key).decode() for k, key in (("k2", K2), ("k1", K1))}
    monkeypatch.setenv("GRAPHKEEP_KEYS", ",".join(f"{k}:{v}" for k, v in encoded.items()))
    dry = gk("rekey", graphkeep_url, "--all", "--dry-run", "--json")
    assert dry.code == 0, dry.out + dry.err
    assert dry.json()["events"]["rewritten"] == events
    assert key_ids(graphkeep_backend, graphkeep_url) == ["k1"] * events
    thread = gk("rekey", graphkeep_url, "--thread", "t", "--yes")  # its runs: none
    assert thread.code == 0, thread.out + thread.err
    assert "0 event(s) in 0 of 0 run(s) of the thread(s); 2 other run(s) left alone" in thread.out
    assert key_ids(graphkeep_backend, graphkeep_url) == ["k1"] * events
    real = gk("rekey", graphkeep_url, "--all", "--yes")
    assert real.code == 0, real.out + real.err
    assert f"{events} event(s) in 2 of 2 run(s)" in real.out
    report = gk("rekey", graphkeep_url, "--all", "--yes", "--json").json()["events"]
    assert report["rewritten"] == 0 and report["by_key_id"] == {"k1": 0, "k2": events}
    with opened("sync", graphkeep_url, NEW) as log:
        for run, before in runs.items():
            assert log.read(run) == before


def test_a_rewrite_never_undoes_a_change_or_a_delete_made_since_the_read(
    graphkeep_url: str, run_id: str
) -> None:
    gone = f"{run_id}-gone"
    with graphkeep.connect_events(graphkeep_url, encryption=OLD) as log:
        log.append_many(run_id, [{"n": 1}, {"n": 2}])
        log.append_many(gone, [{"n": 1}])
        read = {run: log._call(log.port.records(run)) for run in (run_id, gone)}
    with graphkeep.connect_events(graphkeep_url, encryption=ROTATING) as log:
        assert log.rekey().rewritten == 3
        port = log.port
        log.delete(gone)  # as retention would
        forged = [(r, [b"forged" for _ in r.events]) for r in read[run_id]]
        assert log._call(port.rewrite(run_id, forged)) == 0  # the bytes read are gone
        assert log._call(port.rewrite(gone, [(r, [b"forged"]) for r in read[gone]])) == 0
        assert log.state(gone) is None  # not brought back
    with graphkeep.connect_events(graphkeep_url, encryption=NEW) as log:
        assert [e for _, e in log.read(run_id, follow=False)] == [{"n": 1}, {"n": 2}]


# -- rekey --thread: the runs tied to a thread ------------------------------------------------


def thread_logs(mode: str, url: str, thread: str) -> dict[str, list[tuple[str, dict[str, Any]]]]:
    """Under k1, beside a checkpoint of ``thread`` whose metadata names run ``<thread>-run``:
    an AG-UI run of the thread (``RUN_STARTED`` names it) and its index of runs, a run
    named by the checkpoint's run id (``stream_run``'s default), an AG-UI run of another
    thread and a run that names no thread. The runs' events, by run."""
    with graphkeep.connect(url, encryption=OLD) as saver:
        cp = empty_checkpoint()
        meta: Any = {"source": "loop", "step": 1, "run_id": f"{thread}-run"}
        saver.put({"configurable": {"thread_id": thread, "checkpoint_ns": ""}}, cp, meta, {})
    runs = {
        f"{thread}-agui": [{"type": "RUN_STARTED", "threadId": thread, "runId": f"{thread}-agui"}],
        index_id(thread): [{"runId": f"{thread}-agui"}],
        f"{thread}-run": [{"mode": "updates", "data": {"n": 1}}],
        f"{thread}-elsewhere": [{"type": "RUN_STARTED", "threadId": f"{thread}-other"}],
        f"{thread}-loose": [{"n": 1}, {"n": 2}],
    }
    with opened(mode, url, OLD) as log:
        for run, events in runs.items():
            log.call("append_many", run, events)
        return {run: log.read(run) for run in runs}


def test_rekey_of_a_threads_runs_rewrites_only_the_runs_tied_to_it(
    graphkeep_backend: str, graphkeep_url: str, mode: str, thread_id: str
) -> None:
    """``log.rekey(threads={T: run ids its checkpoints name})`` rewrites T's AG-UI run and
    index and the run its checkpoint names, in place; the other thread's run and the run that
    names no thread stay under k1; again: nothing to do."""
    runs = thread_logs(mode, graphkeep_url, thread_id)
    mine = [f"{thread_id}-agui", index_id(thread_id), f"{thread_id}-run"]
    with opened(mode, graphkeep_url, ROTATING) as log:
        dry = log.call("rekey", dry_run=True, threads={thread_id: [f"{thread_id}-run"]})
        assert sorted(dry.rekeyed) == sorted(mine) and dry.rewritten == 3, dry
        assert key_ids(graphkeep_backend, graphkeep_url) == ["k1"] * 6
        done = log.call("rekey", threads={thread_id: [f"{thread_id}-run"]})
        assert sorted(done.rekeyed) == sorted(mine) and done.rewritten == 3, done
        assert done.threads is not None and done.threads.others == 2
        assert done.as_dict()["threads"] == {thread_id: done.threads.by_thread[thread_id]}
        assert key_ids(graphkeep_backend, graphkeep_url) == ["k1"] * 3 + ["k2"] * 3
        again = log.call("rekey", threads={thread_id: [f"{thread_id}-run"]})
        assert again.rewritten == 0 and sorted(again.current) == sorted(mine)
    with opened(mode, graphkeep_url, NEW) as log:  # k1 gone: the thread's runs read whole
        for run in mine:
            assert log.read(run) == runs[run]


def test_graphkeep_rekey_thread_rewrites_its_event_logs(
    graphkeep_backend: str, graphkeep_url: str, thread_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``graphkeep rekey URL --thread T``: T's checkpoint, and the runs of the event log tied
    to T (its AG-UI run and index, the run its checkpoint names); other runs left alone and
    counted."""
    runs = thread_logs("sync", graphkeep_url, thread_id)
    encoded = {k: base64.b64encode(key).decode() for k, key in (("k2", K2), ("k1", K1))}
    monkeypatch.setenv("GRAPHKEEP_KEYS", ",".join(f"{k}:{v}" for k, v in encoded.items()))
    done = gk("rekey", graphkeep_url, "--thread", thread_id, "--yes")
    assert done.code == 0, done.out + done.err
    assert "3 event(s) in 3 of 3 run(s) of the thread(s); 2 other run(s) left alone" in done.out
    assert key_ids(graphkeep_backend, graphkeep_url) == ["k1"] * 3 + ["k2"] * 3
    report = gk("rekey", graphkeep_url, "--thread", thread_id, "--yes", "--json").json()
    assert report["events"]["rewritten"] == 0 and report["events"]["other_runs"] == 2
    assert sorted(report["events"]["threads"][thread_id]) == sorted(
        [f"{thread_id}-agui", index_id(thread_id), f"{thread_id}-run"]
    )
    with opened("sync", graphkeep_url, NEW) as log:
        for run in (f"{thread_id}-agui", index_id(thread_id), f"{thread_id}-run"):
            assert log.read(run) == runs[run]
