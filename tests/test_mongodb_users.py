"""MongoDB with users (issue 47, least privilege): an administrator runs ``graphkeep setup`` once,
applications run every product under a user of their own with ``setup=False``; refused
credentials and a missing privilege are clear graphkeep errors, never a driver traceback.

The server here is FerretDB 1.x with its authentication on (``--test-enable-new-auth``, SCRAM
users). What it does not do, and only a real MongoDB (or Atlas, DocumentDB) proves: it takes no
roles at ``createUser`` ("support for field roles … is not implemented yet") and enforces no
privileges — any authenticated user may run any command. So these tests prove that the
products need no setup of their own once ``graphkeep setup`` ran (they run with ``setup=False``
as a user that is not the administrator), that a wrong password and a client without a user
fail with graphkeep's errors, and how a refusal (code 13, ``Unauthorized``) reads; that
``readWrite`` alone suffices is what the role list in docs/security.md states from the
commands graphkeep sends (finds, bulk writes, ``findOneAndUpdate``, deletes; ``createIndexes``
and ``listIndexes`` only in setup).

The managed services' rules (``--graphkeep-rules``, the MongoDB lane) are not checked here: the
checker's own probes reach the server without this test's credentials. The same requests are
checked by every other MongoDB test.
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pymongo
import pytest

import graphkeep
from graphkeep.errors import PermissionDenied, StorageUnavailable
from graphkeep.testing import ferretdb_command
from graphkeep.testing.rules import unchecked
from tests.cli_runs import gk
from tests.least_privilege_workload import PRODUCTS, run_async, run_sync
from tests.scenarios.servers import REPO, FerretDBServer

pytestmark = pytest.mark.mongodb


@pytest.fixture(autouse=True)
def _outside_the_rules() -> Iterator[None]:
    with unchecked():  # see the module's docstring
        yield


DB = "gk_users"
ADMIN, ADMIN_PASSWORD = "gkadmin", "admin-secret-1"
APP, APP_PASSWORD = "gkapp", "app-secret-2"


class AuthFerretDB(FerretDBServer):
    """FerretDB with authentication on and its first user (the administrator) made at start."""

    kind = "ferretdb-auth"

    def url_for(self, user: str | None = None, password: str | None = None) -> str:
        login = f"{user}:{password}@" if user else ""
        return f"mongodb://{login}127.0.0.1:{self.port}/{DB}"

    def command(self) -> list[str]:
        program = os.environ.get("GRAPHKEEP_MONGODB_SERVER", "")
        if "ferretdb" not in program:  # a git worktree has no .services/bin of its own
            program = str(REPO / ".services" / "bin" / "ferretdb")
        data = self.workdir / "data"
        data.mkdir(exist_ok=True)
        login = (f"--setup-username={ADMIN}", f"--setup-password={ADMIN_PASSWORD}")
        return [
            *ferretdb_command(program, data, self.port),
            "--test-enable-new-auth",
            *login,
            f"--setup-database={DB}",
        ]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AuthFerretDB]:
    with AuthFerretDB(Path(tmp_path_factory.mktemp("ferretdb-auth"))) as started:
        assert isinstance(started, AuthFerretDB)
        admin: pymongo.MongoClient[dict[str, object]] = pymongo.MongoClient(
            started.url_for(ADMIN, ADMIN_PASSWORD), serverSelectionTimeoutMS=5000
        )
        with admin:
            # roles=[]: FerretDB 1.x refuses any other value (see the module's docstring)
            admin[DB].command("createUser", APP, pwd=APP_PASSWORD, roles=[])
        yield started


@pytest.mark.parametrize("product", PRODUCTS)
def test_every_product_runs_as_the_application_user_after_an_admin_ran_setup(
    server: AuthFerretDB, product: str
) -> None:
    prefix = f"gkusers{uuid.uuid4().hex[:6]}"
    done = gk("setup", server.url_for(ADMIN, ADMIN_PASSWORD), "--key-prefix", prefix)
    assert done.code == 0, done.err
    assert ADMIN_PASSWORD not in done.out + done.err
    app = server.url_for(APP, APP_PASSWORD)
    run_sync(product, app, prefix, setup=False)
    asyncio.run(run_async(product, app, prefix, setup=False))


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_wrong_password_is_refused_at_once_naming_the_credentials(
    server: AuthFerretDB, mode: str
) -> None:
    url = server.url_for(APP, "not-the-password")
    config = {"configurable": {"thread_id": "t"}}
    started = time.monotonic()
    with pytest.raises(StorageUnavailable) as refused:
        if mode == "sync":
            with graphkeep.connect(url, setup=False) as saver:
                saver.get_tuple(config)
        else:

            async def read() -> None:
                async with graphkeep.aconnect(url, setup=False) as saver:
                    await saver.aget_tuple(config)

            asyncio.run(read())
    message = str(refused.value)
    assert "refused the credentials" in message and "authSource" in message
    assert "is the server running" not in message
    assert "not-the-password" not in message
    assert time.monotonic() - started < 5.0  # not retried with backoff, nor a server timeout


@pytest.mark.parametrize("product", PRODUCTS)
def test_a_client_without_a_user_gets_permission_denied_naming_the_command(
    server: AuthFerretDB, product: str
) -> None:
    url = server.url_for()
    with pytest.raises(PermissionDenied) as refused:
        run_sync(product, url, f"gkusers{uuid.uuid4().hex[:6]}", setup=False)
    assert refused.value.action not in ("", "the command")  # e.g. "find", "update"
    assert "readWrite" in str(refused.value) and "docs/security.md" in str(refused.value)
    with pytest.raises(PermissionDenied):
        asyncio.run(run_async(product, url, f"gkusers{uuid.uuid4().hex[:6]}", setup=False))
