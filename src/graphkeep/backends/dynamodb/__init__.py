"""DynamoDB checkpoint savers: :class:`DynamoDBSaver` (boto3) and :class:`AsyncDynamoDBSaver`.

One table with composite keys (``pk`` = prefix + thread, ``sk`` = record kind + namespace +
id; layout in :mod:`.keys`), on-demand billing, native TTL on ``exp``, and a sparse ``run_id``
GSI for ``delete_for_runs``. Construct from an existing low-level client, or with
``from_table`` / ``from_url`` as a context manager::

    with DynamoDBSaver.from_table("checkpoints", region_name="eu-west-1") as saver:
        graph = builder.compile(checkpointer=saver)

    async with AsyncDynamoDBSaver.from_table("checkpoints", ttl=86400) as saver:
        graph = builder.compile(checkpointer=saver)

    with graphkeep.connect("dynamodb://checkpoints?region=us-east-1") as saver: ...

Without ``endpoint_url`` the normal AWS credential and endpoint chain applies. Teams that manage
tables with CloudFormation or Terraform take :meth:`DynamoDBSaver.table_definition` (the
CreateTable request; ``format="cloudformation"`` gives the resource with TTL) and pass
``setup=False``. Options: ``serde``, ``ttl`` (seconds or timedelta, sliding per thread),
``refresh_ttl_on_read``, ``key_prefix`` (apps sharing a table use different ones),
``max_id_bytes``, ``compress`` (default True = zlib level 6 per item when it saves at least 10 %;
False, or a level 1-9), ``share_lists`` (default True: list values stored as shared element
items, see :mod:`graphkeep.checkpoint.lists`) and ``run_index`` (create the ``run_id`` GSI;
default True).

Async client: **aiobotocore**, not aioboto3. aiobotocore 3.x pins botocore to the exact release
current boto3 uses (here boto3/botocore 1.43.117 with aiobotocore 3.10.0, which requires
``botocore>=1.43.115,<1.43.118``), so both co-install with a current boto3. aioboto3 15.5 (the
latest) depends on ``aiobotocore[boto3]==2.25.1``, i.e. ``boto3<1.40.62``:
``pip install --dry-run aioboto3`` in this environment wants to downgrade boto3 and botocore to
1.40.61, which breaks users (and ``langgraph-checkpoint-aws``) on a current boto3. aioboto3 adds
only the resource layer on top of aiobotocore, and this backend uses the low-level client
anyway (typed attribute values, never ``Decimal``).

Compression default (measured on this machine with LangChain messages of real English text,
serialized by the default serde): zlib level 1 stores 36% of the bytes at ~90 MB/s, level 6
stores 31% at ~30 MB/s (~14 ms for 400 KB); base64 images shrink only to 77%, encrypted payloads
not at all (and are skipped: their tags carry ``+cipher``). DynamoDB bills writes per KB and
large channel values are rewritten on every step, so level 6 pays for its CPU. Checkpoint items
from 128 bytes are compressed too (heads, writes, list elements: on W50 heads shrink from
about 710 to 330 bytes); an item keeps its compression only when it saves at least 10 %,
recorded in its ``z`` attribute. Values still larger than the 400 KB item limit after
compression are split into chunk items of 350 KB. Stored bytes on W50 (50 turns, item bytes
as DynamoDB counts them): 0.33 MB with shared lists (0.73 MB without); 100 turns: 0.66 MB
(2.0x: linear).

Cost notes: put and put_writes use TransactWriteItems (all-or-nothing, conditional writes),
which DynamoDB bills at twice the write units of plain writes; a put of the head alone is a
plain PutItem. The ``run_id`` GSI (keys plus the raw-name attribute) adds one small index
write per checkpoint that has a run id; without it ``delete_for_runs`` scans the table.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any
from urllib.parse import parse_qs, urlsplit

from graphkeep.backends.dynamodb.checkpoint import DynamoDBCheckpointPort, table_definition
from graphkeep.backends.dynamodb.requests import Call, error_code
from graphkeep.checkpoint.saver import AsyncSaver, SyncSaver, ttl_seconds
from graphkeep.errors import ConfigurationError, StorageUnavailable, mask_url
from graphkeep.port import Sleep

try:
    import boto3
    from botocore.config import Config
    from botocore.exceptions import (
        ClientError,
        HTTPClientError,
        NoCredentialsError,
        NoRegionError,
    )
    from botocore.exceptions import (
        ConnectionError as BotoConnectionError,
    )
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "the DynamoDB backend needs boto3: pip install 'graphkeep[dynamodb]'"
    ) from exc

__all__ = ["AsyncDynamoDBSaver", "DynamoDBSaver", "DynamoDBCheckpointPort", "table_definition"]

#: transport failures and server-side throttling, retried (every request is idempotent:
#: puts of identical content, conditional puts whose failure means "already there",
#: transactions with a ClientRequestToken, reads and deletes)
TRANSPORT_ERRORS = (BotoConnectionError, HTTPClientError)
THROTTLING = frozenset(
    {
        "ThrottlingException",
        "ProvisionedThroughputExceededException",
        "RequestLimitExceeded",
        "InternalServerError",
        "ServiceUnavailable",
    }
)
RETRY_DELAYS = (0.05, 0.2, 0.5, 1.0)
URL_PARAMS = {
    "region": "region_name",
    "region_name": "region_name",
    "endpoint_url": "endpoint_url",
    "profile": "profile_name",
}


def _transient(exc: ClientError) -> bool:
    """Throttling, or a server-side failure (HTTP 5xx): worth another try."""
    status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0
    return error_code(exc) in THROTTLING or int(status) >= 500


def _client_config() -> Any:
    # botocore retries too; keep its share small so a dead endpoint fails in seconds
    return Config(
        retries={"total_max_attempts": 2, "mode": "standard"},
        connect_timeout=5,
        read_timeout=30,
    )


def _describe(client: Any, table: str) -> str:
    endpoint = getattr(getattr(client, "meta", None), "endpoint_url", None) or "?"
    return f"{mask_url(str(endpoint))} (table {table})"


_USERINFO = re.compile(r"(\w[\w+.-]*://[^:/@\s\"']*):[^@\s\"']*@")


def _unavailable(where: str, exc: BaseException) -> StorageUnavailable:
    detail = _USERINFO.sub(r"\1:***@", str(exc))  # botocore repeats the endpoint URL
    return StorageUnavailable(
        f"DynamoDB at {where} is unavailable ({type(exc).__name__}: {detail}); is the endpoint"
        " reachable? (locally: ./dev services up)"
    )


def _no_credentials(exc: BaseException) -> ConfigurationError:
    return ConfigurationError(
        f"no AWS credentials found ({exc}): configure the AWS credential chain (environment,"
        " profile, role); a local endpoint such as moto accepts any values"
        " (AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test)"
    )


class _SyncExecutor:
    def __init__(self, client: Any, where: str) -> None:
        self.client = client
        self.where = where

    def __call__(self, request: Any) -> Any:
        if isinstance(request, Sleep):
            time.sleep(request.seconds)
            return None
        if not isinstance(request, Call):
            raise TypeError(f"unknown DynamoDB request {request!r}")
        method = getattr(self.client, request.operation)
        for delay in (*RETRY_DELAYS, None):
            try:
                return method(**request.params)
            except TRANSPORT_ERRORS as exc:
                if delay is None:
                    raise _unavailable(self.where, exc) from exc
            except ClientError as exc:
                if delay is None or not _transient(exc):
                    raise
            except NoCredentialsError as exc:
                raise _no_credentials(exc) from exc
            time.sleep(delay)
        raise AssertionError("unreachable")


class _AsyncExecutor:
    def __init__(self, client: Any, where: str) -> None:
        self.client = client
        self.where = where

    async def __call__(self, request: Any) -> Any:
        if isinstance(request, Sleep):
            await asyncio.sleep(request.seconds)
            return None
        if not isinstance(request, Call):
            raise TypeError(f"unknown DynamoDB request {request!r}")
        method = getattr(self.client, request.operation)
        for delay in (*RETRY_DELAYS, None):
            try:
                return await method(**request.params)
            except TRANSPORT_ERRORS as exc:
                if delay is None:
                    raise _unavailable(self.where, exc) from exc
            except ClientError as exc:
                if delay is None or not _transient(exc):
                    raise
            except NoCredentialsError as exc:
                raise _no_credentials(exc) from exc
            await asyncio.sleep(delay)
        raise AssertionError("unreachable")


STORE_OPTIONS = ("key_prefix", "ttl", "refresh_ttl_on_read", "compress", "run_index")


def _store(
    table_name: str, options: dict[str, Any]
) -> tuple[DynamoDBCheckpointPort, dict[str, Any]]:
    store = DynamoDBCheckpointPort(
        table_name,
        key_prefix=options.pop("key_prefix", "graphkeep"),
        ttl=ttl_seconds(options.pop("ttl", None)),
        refresh_ttl_on_read=bool(options.pop("refresh_ttl_on_read", False)),
        compress=options.pop("compress", True),
        run_index=bool(options.pop("run_index", True)),
    )
    return store, options


def parse_url(url: str) -> tuple[str, dict[str, str]]:
    """``dynamodb://<table>?region=..&endpoint_url=..&profile=..`` -> (table, client kwargs)."""
    parts = urlsplit(url)
    if parts.scheme.lower() != "dynamodb" or not parts.netloc:
        raise ConfigurationError(
            f"expected dynamodb://<table>?region=<region>[&endpoint_url=<url>], got {mask_url(url)}"
        )
    if parts.path not in ("", "/"):
        raise ConfigurationError(f"unexpected path {parts.path!r} in {mask_url(url)}")
    kwargs: dict[str, str] = {}
    for name, values in parse_qs(parts.query, keep_blank_values=True).items():
        if name not in URL_PARAMS:
            raise ConfigurationError(
                f"unknown parameter {name!r} in {mask_url(url)}; accepted: {', '.join(URL_PARAMS)}"
            )
        kwargs[URL_PARAMS[name]] = values[-1]
    return parts.netloc, kwargs


#: options that pick how the client is made (saver, store and cache alike)
CLIENT_OPTIONS = ("session", "profile_name", "botocore_config")


def client_options(options: dict[str, Any]) -> dict[str, Any]:
    """Take the client options out of ``options`` (what is left goes to the class)."""
    return {name: options.pop(name) for name in CLIENT_OPTIONS if name in options}


def _no_region(exc: Exception) -> ConfigurationError:
    return ConfigurationError(
        "no AWS region: pass region_name (or ?region= in the URL) or set AWS_DEFAULT_REGION"
    )


@contextmanager
def sync_client(
    region_name: str | None = None,
    endpoint_url: str | None = None,
    *,
    session: Any = None,
    profile_name: str | None = None,
    botocore_config: Any = None,
) -> Iterator[Any]:
    """A new boto3 DynamoDB client, closed on exit."""
    try:
        if session is None:
            session = boto3.session.Session(profile_name=profile_name)
        client = session.client(
            "dynamodb",
            region_name=region_name,
            endpoint_url=endpoint_url,
            config=botocore_config or _client_config(),
        )
    except NoRegionError as exc:
        raise _no_region(exc) from exc
    try:
        yield client
    finally:
        client.close()


@asynccontextmanager
async def async_client(
    region_name: str | None = None,
    endpoint_url: str | None = None,
    *,
    session: Any = None,
    profile_name: str | None = None,
    botocore_config: Any = None,
) -> AsyncIterator[Any]:
    """A new aiobotocore DynamoDB client, closed on exit."""
    try:
        from aiobotocore.config import AioConfig
        from aiobotocore.session import get_session
    except ImportError as exc:  # pragma: no cover - exercised only without the extra
        raise ConfigurationError(
            "the async DynamoDB backend needs aiobotocore: pip install 'graphkeep[dynamodb]'"
        ) from exc
    if session is None:
        session = get_session()
        if profile_name:
            session.set_config_variable("profile", profile_name)
    config = botocore_config or AioConfig(
        retries={"total_max_attempts": 2, "mode": "standard"},
        connect_timeout=5,
        read_timeout=30,
    )
    try:
        context = session.create_client(
            "dynamodb", region_name=region_name, endpoint_url=endpoint_url, config=config
        )
        client = await context.__aenter__()
    except NoRegionError as exc:
        raise _no_region(exc) from exc
    try:
        yield client
    finally:
        await context.__aexit__(None, None, None)


class DynamoDBSaver(SyncSaver):
    """Sync saver on a boto3 low-level DynamoDB client (``boto3.client("dynamodb")``)."""

    def __init__(self, client: Any, table_name: str = "graphkeep", **options: Any) -> None:
        store, rest = _store(table_name, dict(options))
        self.client = client
        self.table_name = table_name
        self.run_index = store.run_index
        super().__init__(store, _SyncExecutor(client, _describe(client, table_name)), **rest)

    @staticmethod
    def table_definition(
        table_name: str = "graphkeep", *, run_index: bool = True, format: str = "create_table"
    ) -> dict[str, Any]:
        """The table ``setup()`` creates: the CreateTable request (``client.create_table(**d)``),
        or with ``format="cloudformation"`` an ``AWS::DynamoDB::Table`` resource including
        the TTL specification (TTL is a separate API call otherwise)."""
        return _definition(table_name, run_index, format)

    def print_table_definition(self, format: str = "create_table") -> None:
        """Print this saver's table definition as JSON (for CloudFormation/Terraform users)."""
        print(json.dumps(_definition(self.table_name, self.run_index, format), indent=2))

    @classmethod
    @contextmanager
    def from_table(
        cls,
        table_name: str,
        region_name: str | None = None,
        endpoint_url: str | None = None,
        *,
        session: Any = None,
        profile_name: str | None = None,
        botocore_config: Any = None,
        setup: bool = True,
        **options: Any,
    ) -> Iterator[DynamoDBSaver]:
        """A saver on a new client (closed on exit); ``setup()`` first unless ``setup=False``."""
        with sync_client(
            region_name,
            endpoint_url,
            session=session,
            profile_name=profile_name,
            botocore_config=botocore_config,
        ) as client:
            saver = cls(client, table_name, **options)
            if setup:
                saver.setup()
            yield saver

    @classmethod
    @contextmanager
    def from_url(cls, url: str, *, setup: bool = True, **options: Any) -> Iterator[DynamoDBSaver]:
        table, kwargs = parse_url(url)
        with cls.from_table(table, setup=setup, **kwargs, **options) as saver:
            yield saver


class AsyncDynamoDBSaver(AsyncSaver):
    """Asyncio saver on an aiobotocore DynamoDB client (``session.create_client("dynamodb")``)."""

    def __init__(self, client: Any, table_name: str = "graphkeep", **options: Any) -> None:
        store, rest = _store(table_name, dict(options))
        self.client = client
        self.table_name = table_name
        self.run_index = store.run_index
        super().__init__(store, _AsyncExecutor(client, _describe(client, table_name)), **rest)

    table_definition = staticmethod(DynamoDBSaver.table_definition)
    print_table_definition = DynamoDBSaver.print_table_definition

    @classmethod
    @asynccontextmanager
    async def from_table(
        cls,
        table_name: str,
        region_name: str | None = None,
        endpoint_url: str | None = None,
        *,
        session: Any = None,
        profile_name: str | None = None,
        botocore_config: Any = None,
        setup: bool = True,
        **options: Any,
    ) -> AsyncIterator[AsyncDynamoDBSaver]:
        """A saver on a new aiobotocore client (closed on exit); ``asetup()`` unless told not to."""
        async with async_client(
            region_name,
            endpoint_url,
            session=session,
            profile_name=profile_name,
            botocore_config=botocore_config,
        ) as client:
            saver = cls(client, table_name, **options)
            if setup:
                await saver.asetup()
            yield saver

    @classmethod
    @asynccontextmanager
    async def from_url(
        cls, url: str, *, setup: bool = True, **options: Any
    ) -> AsyncIterator[AsyncDynamoDBSaver]:
        table, kwargs = parse_url(url)
        async with cls.from_table(table, setup=setup, **kwargs, **options) as saver:
            yield saver


def _definition(table_name: str, run_index: bool, format: str) -> dict[str, Any]:
    definition = table_definition(table_name, run_index=run_index)
    if format == "create_table":
        return definition
    if format == "cloudformation":
        from graphkeep.backends.dynamodb.items import EXP

        properties = dict(definition)
        properties["TimeToLiveSpecification"] = {"AttributeName": EXP, "Enabled": True}
        return {"Type": "AWS::DynamoDB::Table", "Properties": properties}
    raise ConfigurationError(f"format must be 'create_table' or 'cloudformation', got {format!r}")


# the memory store, the node cache and the run event log build on the executors and clients above
from graphkeep.backends.dynamodb.cache import AsyncDynamoDBCache, DynamoDBCache  # noqa: E402
from graphkeep.backends.dynamodb.events import AsyncDynamoDBEventLog, DynamoDBEventLog  # noqa: E402
from graphkeep.backends.dynamodb.store import AsyncDynamoDBStore, DynamoDBStore  # noqa: E402

__all__ += [
    "AsyncDynamoDBCache",
    "AsyncDynamoDBEventLog",
    "AsyncDynamoDBStore",
    "DynamoDBCache",
    "DynamoDBEventLog",
    "DynamoDBStore",
]
