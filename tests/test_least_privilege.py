"""Least privilege (docs/security.md): the ACL line ``graphkeep setup URL --print-acl`` prints
is enough for every product, sync and async, on real Redis and Valkey servers (a cluster's
every node too), grants nothing of ``@dangerous``, and a user of another key prefix gets
``PermissionDenied`` naming the key pattern it lacks, never a raw NOPERM."""

from __future__ import annotations

import asyncio
import io
import json
import os
import shlex
import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest
import redis

import graphkeep
from graphkeep.backends.redis.acl import acl_commands, acl_line
from graphkeep.cli.app import run as cli_run
from graphkeep.errors import PermissionDenied, StorageUnavailable
from tests.conftest import REDIS_URL, unique_prefix
from tests.least_privilege_workload import PRODUCTS, run_async, run_sync

VALKEY_URL = os.environ.get("VALKEY_URL", "redis://127.0.0.1:16390/0")
VALKEY_CLUSTER_URL = os.environ.get("VALKEY_CLUSTER_URL", "redis+cluster://127.0.0.1:17101")

ACL_SERVERS = [
    pytest.param(VALKEY_URL, id="valkey", marks=pytest.mark.valkey),
    pytest.param(REDIS_URL, id="redis", marks=pytest.mark.redis),
    pytest.param(VALKEY_CLUSTER_URL, id="valkey-cluster", marks=pytest.mark.valkey_cluster),
]


def _nodes(url: str) -> list[redis.Redis]:
    """An admin client on every node of ``url``'s server (ACLs are per node)."""
    parts = urlsplit(url)
    if not parts.scheme.endswith("+cluster"):
        return [redis.Redis.from_url(url)]
    seed = redis.Redis(host=parts.hostname, port=parts.port)
    try:
        shards = seed.execute_command("CLUSTER", "NODES").decode()
    finally:
        seed.close()
    nodes = []
    for line in shards.splitlines():
        address = line.split()[1].split("@")[0]
        host, _, port = address.rpartition(":")
        nodes.append(redis.Redis(host=host, port=int(port)))
    return nodes


def _as_user(url: str, user: str, password: str) -> str:
    parts = urlsplit(url)
    netloc = f"{user}:{password}@{parts.hostname}:{parts.port}"
    return urlunsplit(parts._replace(netloc=netloc))


class AclUser:
    """A user made on every node of a server by the printed ``ACL SETUSER`` line, deleted
    (with its prefix's keys) when the test ends."""

    def __init__(self, url: str, prefix: str) -> None:
        self.name = f"gk-acl-{uuid.uuid4().hex[:10]}"
        self.password = uuid.uuid4().hex
        self.prefix = prefix
        self.line = acl_line(prefix, user=self.name, password=self.password)
        self.nodes = _nodes(url)
        for node in self.nodes:
            node.execute_command(*shlex.split(self.line))
        self.url = _as_user(url, self.name, self.password)

    def close(self, data_prefix: str) -> None:
        for node in self.nodes:
            node.execute_command("ACL", "DELUSER", self.name)
            keys = list(node.scan_iter(match=f"{data_prefix}:*", count=1000))
            for key in keys:
                node.delete(key)
            node.close()


@pytest.fixture(params=ACL_SERVERS)
def server(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def made(server: str) -> Iterator[list[tuple[AclUser, str]]]:
    users: list[tuple[AclUser, str]] = []
    yield users
    for user, data_prefix in users:
        user.close(data_prefix)


def _user(server: str, made: list[tuple[AclUser, str]], granted: str, used: str) -> AclUser:
    user = AclUser(server, granted)
    made.append((user, used))
    return user


@pytest.mark.parametrize("product", PRODUCTS)
def test_the_printed_acl_line_runs_every_product_sync_and_async(
    server: str, made: list[tuple[AclUser, str]], product: str
) -> None:
    prefix = unique_prefix("acl")
    user = _user(server, made, prefix, prefix)
    run_sync(product, user.url, prefix)
    asyncio.run(run_async(product, user.url, prefix))


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_wrong_password_is_refused_at_once_naming_the_credentials(
    server: str, made: list[tuple[AclUser, str]], mode: str
) -> None:
    """redis-py's ``AuthenticationError`` is a ``ConnectionError``: it was retried with
    backoff and reported as "is the server running and reachable?"."""
    prefix = unique_prefix("acl")
    user = _user(server, made, prefix, prefix)
    url = _as_user(server, user.name, "not-the-password")
    config = {"configurable": {"thread_id": "t"}}
    with pytest.raises(StorageUnavailable) as refused:
        if mode == "sync":
            with graphkeep.connect(url, key_prefix=prefix, setup=False) as saver:
                saver.get_tuple(config)
        else:

            async def read() -> None:
                async with graphkeep.aconnect(url, key_prefix=prefix, setup=False) as saver:
                    await saver.aget_tuple(config)

            asyncio.run(read())
    message = str(refused.value)
    assert "refused the credentials" in message and "is the server running" not in message
    assert "not-the-password" not in message
    # one refused login in all (the ACL log counts them per user): not retried with backoff
    refusals = [e for node in user.nodes for e in node.acl_log() if e["username"] == user.name]
    assert sum(int(e["count"]) for e in refusals if e["reason"] == "auth") == 1


@pytest.mark.parametrize("product", PRODUCTS)
def test_a_user_of_another_prefix_gets_permission_denied_naming_the_key_pattern(
    server: str, made: list[tuple[AclUser, str]], product: str
) -> None:
    prefix = unique_prefix("acl")
    user = _user(server, made, unique_prefix("other"), prefix)
    with pytest.raises(PermissionDenied) as sync_error:
        run_sync(product, user.url, prefix)
    with pytest.raises(PermissionDenied) as async_error:
        asyncio.run(run_async(product, user.url, prefix))
    for error in (sync_error.value, async_error.value):
        assert error.resource == f"~{prefix}:*"
        assert error.user == user.name
        assert f"~{prefix}:*" in str(error) and user.name in str(error)
        assert "--print-acl" in str(error)


def _dry_run(admin: redis.Redis, user: str, command: str) -> str:
    """``ACL DRYRUN`` of ``command`` (``name|sub``) as ``user``, padded to its arity."""
    words = command.split("|")
    for _ in range(8):
        try:
            return str(admin.execute_command("ACL", "DRYRUN", user, *words).decode())
        except redis.exceptions.ResponseError as exc:
            if "wrong number of arguments" not in str(exc):
                return str(exc)
            words.append("gk-x:1")
    raise AssertionError(f"no arity of {command} is accepted")


@pytest.mark.parametrize(
    "url",
    [
        pytest.param(VALKEY_URL, id="valkey", marks=pytest.mark.valkey),
        pytest.param(REDIS_URL, id="redis", marks=pytest.mark.redis),
    ],
)
def test_the_acl_line_grants_nothing_dangerous(url: str) -> None:
    admin = redis.Redis.from_url(url)
    name, password = f"gk-acl-{uuid.uuid4().hex[:10]}", uuid.uuid4().hex
    try:
        dangerous = {c.decode().lower() for c in admin.execute_command("ACL", "CAT", "dangerous")}
        assert not set(acl_commands()) & dangerous
        admin.execute_command(*shlex.split(acl_line("gk-x", user=name, password=password)))
        allowed = [c for c in sorted(dangerous) if _dry_run(admin, name, c) == "OK"]
        assert allowed == []
        assert _dry_run(admin, name, "evalsha") == "OK"  # DRYRUN does tell a granted command
    finally:
        admin.execute_command("ACL", "DELUSER", name)
        admin.close()


def test_setup_print_acl_prints_the_line_for_the_configured_prefix() -> None:
    out, err = io.StringIO(), io.StringIO()
    code = cli_run(["setup", f"{VALKEY_URL}?key_prefix=gkacl", "--print-acl"], out, err)
    assert code == 0, err.getvalue()
    line = out.getvalue().strip()
    assert line.startswith("ACL SETUSER graphkeep on >")
    assert " ~gkacl:* " in line and " &gkacl:* " in line
    assert line.endswith("-@dangerous")
    assert "+evalsha" in line.split()
    o = io.StringIO()
    code = cli_run(
        ["setup", VALKEY_URL, "--key-prefix", "tenant-a", "--print-acl", "--json"], o, err
    )
    assert code == 0
    printed: Any = json.loads(o.getvalue())
    assert printed["key_pattern"] == "~tenant-a:*"


# -- DynamoDB: the IAM policy --------------------------------------------------------

DYNAMODB_URL = os.environ.get(
    "GRAPHKEEP_DYNAMODB_URL",
    f"dynamodb://graphkeep?region=us-east-1&endpoint_url={os.environ.get('DYNAMODB_ENDPOINT_URL', 'http://127.0.0.1:15000')}",
)


@pytest.mark.dynamodb
@pytest.mark.parametrize("product", PRODUCTS)
def test_every_dynamodb_action_a_product_sends_is_in_its_policy_statement(product: str) -> None:
    """The session-wide recorder (tests/dynamodb_actions.py) sees this product's sends,
    sync (boto3) and async (aiobotocore); each is in its own statement or the table's
    description (conftest's session end checks every test's sends the same way)."""
    from graphkeep.backends.dynamodb.iam import iam_policy, policy_actions
    from tests import dynamodb_actions

    # the table made first (on a fresh server the first product opened with setup=True creates
    # it: CreateTable and UpdateTimeToLive, the setup statement's, which apps run without)
    run_sync(product, DYNAMODB_URL, unique_prefix("iam-setup"))
    recorded = dynamodb_actions.RECORDED
    before = dict(recorded)
    recorded.clear()
    try:
        prefix = unique_prefix("iam")
        run_sync(product, DYNAMODB_URL, prefix)
        asyncio.run(run_async(product, DYNAMODB_URL, prefix))
        sent = set(recorded)
    finally:
        for action, test in before.items():
            recorded.setdefault(action, test)
    assert {"PutItem", "TransactWriteItems", "BatchWriteItem"} & sent  # it wrote
    statement = f"Graphkeep{product.capitalize()}"
    allowed = policy_actions(iam_policy("graphkeep"), statement, "GraphkeepDescribe")
    assert sent - allowed == set()


def test_setup_print_iam_policy_names_the_table_and_its_indexes() -> None:
    out, err = io.StringIO(), io.StringIO()
    url = "dynamodb://app-table?region=eu-west-1"
    assert (
        cli_run(["setup", url, "--print-iam-policy", "--aws-account", "123456789012"], out, err)
        == 0
    )
    policy = json.loads(out.getvalue())
    sids = [s["Sid"] for s in policy["Statement"]]
    assert sids == [
        "GraphkeepSaver",
        "GraphkeepStore",
        "GraphkeepCache",
        "GraphkeepEvents",
        "GraphkeepEffects",
        "GraphkeepDescribe",
        "GraphkeepSetup",
    ]
    arn = "arn:aws:dynamodb:eu-west-1:123456789012:table/app-table"
    for statement in policy["Statement"]:
        assert statement["Resource"] == [arn, f"{arn}/index/*"]
    setup = next(s for s in policy["Statement"] if s["Sid"] == "GraphkeepSetup")
    assert "dynamodb:CreateTable" in setup["Action"]
    out = io.StringIO()
    assert cli_run(["setup", url, "--print-iam-policy", "--read-only"], out, err) == 0
    (read_only,) = json.loads(out.getvalue())["Statement"]
    assert not {a for a in read_only["Action"] if "Put" in a or "Write" in a or "Delete" in a}
    assert "dynamodb:Query" in read_only["Action"]
