"""The driver side of the DynamoDB backend: clients from URLs, the retry data, the executors.

``dynamodb://<table>?region=..&endpoint_url=..&profile=..`` URLs (:func:`parse_url`), boto3
and aiobotocore clients (:func:`sync_client` / :func:`async_client`), how a server is named in
errors (:func:`describe`), which failures are retried and how often (:data:`RETRY`, a
:class:`graphkeep.port.retry.Retry`), and the executors that send one :class:`.requests.Call`
per attempt (:func:`executor` / :func:`async_executor`). See docs/architecture.md.

Async client: **aiobotocore**, not aioboto3. aiobotocore 3.x pins botocore to the exact release
current boto3 uses (here boto3/botocore 1.43.117 with aiobotocore 3.10.0, which requires
``botocore>=1.43.115,<1.43.118``), so both co-install with a current boto3. aioboto3 15.5 (the
latest) depends on ``aiobotocore[boto3]==2.25.1``, i.e. ``boto3<1.40.62``:
``pip install --dry-run aioboto3`` in this environment wants to downgrade boto3 and botocore to
1.40.61, which breaks users (and ``langgraph-checkpoint-aws``) on a current boto3. aioboto3 adds
only the resource layer on top of aiobotocore, and this backend uses the low-level client
anyway (typed attribute values, never ``Decimal``).
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from typing import Any, cast
from urllib.parse import parse_qs, urlsplit

import boto3
import botocore.loaders
import botocore.session
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

from graphkeep.backends.dynamodb import keys as keyspace
from graphkeep.backends.dynamodb.requests import Call, error_code
from graphkeep.construction import Opened, Opening, P, Product
from graphkeep.errors import ConfigurationError, PermissionDenied, StorageUnavailable, mask_url
from graphkeep.port.pools import (
    DEFAULT_MAX_CONNECTIONS,
    DEFAULT_POOL_TIMEOUT,
    Pool,
    PoolOptions,
    pool_for,
    pool_options,
    register,
)
from graphkeep.port.retry import AsyncExecutor, Retry, SyncExecutor
from graphkeep.port.telemetry import Target
from graphkeep.port.tls import tls_reason, tls_unavailable

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
#: the URL option that names the CA a server's certificate is checked against
CA_OPTION = "verify="
#: what DynamoDB (and STS in front of it) answers a principal a policy does not allow
DENIED = frozenset({"AccessDeniedException", "UnauthorizedOperation", "AccessDenied"})
URL_PARAMS = {
    "region": "region_name",
    "region_name": "region_name",
    "endpoint_url": "endpoint_url",
    "profile": "profile_name",
    "verify": "verify",
}
#: options that pick how the client is made (saver, store, cache and event log alike)
CLIENT_OPTIONS = (
    "session",
    "profile_name",
    "botocore_config",
    "max_connections",
    "pool_timeout",
    "verify",
)

_USERINFO = re.compile(r"(\w[\w+.-]*://[^:/@\s\"']*):[^@\s\"']*@")


# --------------------------------------------------------------------------- URLs and clients


def parse_url(url: str) -> tuple[str, dict[str, Any]]:
    """``dynamodb://<table>?region=..&endpoint_url=..&profile=..`` -> (table, client kwargs)."""
    parts = urlsplit(url)
    if parts.scheme.lower() != "dynamodb" or not parts.netloc:
        raise ConfigurationError(
            f"expected dynamodb://<table>?region=<region>[&endpoint_url=<url>], got {mask_url(url)}"
        )
    if parts.path not in ("", "/"):
        raise ConfigurationError(f"unexpected path {parts.path!r} in {mask_url(url)}")
    kwargs: dict[str, Any] = {}
    for name, values in parse_qs(parts.query, keep_blank_values=True).items():
        if name not in URL_PARAMS:
            raise ConfigurationError(
                f"unknown parameter {name!r} in {mask_url(url)}; accepted: {', '.join(URL_PARAMS)}"
            )
        kwargs[URL_PARAMS[name]] = values[-1]
    if "verify" in kwargs:
        kwargs["verify"] = verify_option(kwargs["verify"], mask_url(url))
    return parts.netloc, kwargs


def verify_option(value: Any, url: str = "") -> bool | str:
    """``verify`` as botocore takes it: ``true``/``false``, or the CA bundle's path (an
    HTTPS endpoint whose certificate that CA signed; AWS's own are in botocore's bundle)."""
    if isinstance(value, bool):
        return value
    if not isinstance(value, str) or not value:
        raise ConfigurationError(f"verify must be true, false or a CA bundle's path (in {url})")
    if value.lower() in ("true", "false"):
        return value.lower() == "true"
    if not os.path.isfile(value):
        raise ConfigurationError(
            f"verify={value!r} (in {url}) names no file: give the CA bundle's path, or true/false"
        )
    return value


def client_options(options: dict[str, Any]) -> dict[str, Any]:
    """Take the client options out of ``options`` (what is left goes to the class)."""
    return {name: options.pop(name) for name in CLIENT_OPTIONS if name in options}


#: botocore retries too; keep its share small so a dead endpoint fails in seconds
_CONFIG = {"retries": {"total_max_attempts": 2, "mode": "standard"}, "connect_timeout": 5}


@functools.cache
def _loader() -> Any:
    """One botocore data loader for every session this module makes. A new session reads
    and parses DynamoDB's service model and AWS's endpoint rules from botocore's JSON files
    again (about 100 ms of CPU per client); its loader caches them, so sessions sharing one
    read them once per process. The loaded data is read-only: it is what many clients of
    one session share anyway."""
    return botocore.loaders.create_loader()


def _with_loader(session: Any) -> Any:
    """``session`` (botocore, or aiobotocore's subclass) reading through :func:`_loader`."""
    session.register_component("data_loader", _loader())
    return session


def _pool(max_connections: int, pool_timeout: float) -> PoolOptions:
    return pool_options({"max_connections": max_connections, "pool_timeout": pool_timeout})


def _sized(client: Any, pool: PoolOptions) -> Pool:
    """A gate of as many slots as ``client``'s HTTP pool holds (a botocore_config the
    application gave keeps its own ``max_pool_connections``)."""
    size = client.meta.config.max_pool_connections or pool.max_connections
    name = f"DynamoDB at {mask_url(str(client.meta.endpoint_url))}"
    return Pool(name, PoolOptions(size, pool.pool_timeout))


def _gated(client: Any, pool: PoolOptions) -> Any:
    return register(client, _sized(client, pool))


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
    max_connections: int = DEFAULT_MAX_CONNECTIONS,
    pool_timeout: float = DEFAULT_POOL_TIMEOUT,
    verify: bool | str | None = None,
) -> Iterator[Any]:
    """A new boto3 DynamoDB client, closed on exit; at most ``max_connections`` requests
    at once (see :mod:`graphkeep.port.pools`); ``verify``: botocore's (``False``, or the CA
    bundle an HTTPS endpoint's certificate is checked against)."""
    verify = None if verify is None else verify_option(verify)
    pool = _pool(max_connections, pool_timeout)
    config = botocore_config or Config(
        **_CONFIG, read_timeout=30, max_pool_connections=pool.max_connections
    )
    try:
        if session is None:
            session = boto3.session.Session(
                botocore_session=_with_loader(botocore.session.Session()),
                profile_name=profile_name,
            )
        client = session.client(
            "dynamodb",
            region_name=region_name,
            endpoint_url=endpoint_url,
            config=config,
            verify=verify,
        )
    except NoRegionError as exc:
        raise _no_region(exc) from exc
    try:
        yield _gated(client, pool)
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
    max_connections: int = DEFAULT_MAX_CONNECTIONS,
    pool_timeout: float = DEFAULT_POOL_TIMEOUT,
    verify: bool | str | None = None,
) -> AsyncIterator[Any]:
    """A new aiobotocore DynamoDB client, closed on exit (options as :func:`sync_client`)."""
    verify = None if verify is None else verify_option(verify)
    pool = _pool(max_connections, pool_timeout)
    try:
        from aiobotocore.config import AioConfig
        from aiobotocore.session import get_session
    except ImportError as exc:  # pragma: no cover - exercised only without the extra
        raise ConfigurationError(
            "the async DynamoDB backend needs aiobotocore: pip install 'graphkeep[dynamodb]'"
        ) from exc
    if session is None:
        session = _with_loader(get_session())
        if profile_name:
            session.set_config_variable("profile", profile_name)
    config = botocore_config or AioConfig(
        **_CONFIG, read_timeout=30, max_pool_connections=pool.max_connections
    )
    try:
        context = session.create_client(
            "dynamodb",
            region_name=region_name,
            endpoint_url=endpoint_url,
            config=config,
            verify=verify,
        )
        client = await context.__aenter__()
    except NoRegionError as exc:
        raise _no_region(exc) from exc
    try:
        yield _gated(client, pool)
    finally:
        await context.__aexit__(None, None, None)


def describe(client: Any, table: str) -> str:
    """The server named in errors: the client's endpoint (password masked) and the table."""
    endpoint = getattr(getattr(client, "meta", None), "endpoint_url", None) or "?"
    return f"{mask_url(str(endpoint))} (table {table})"


def target(client: Any, table: str) -> Target:
    """What a table's requests go to, as telemetry names it (the table, the endpoint)."""
    endpoint = getattr(getattr(client, "meta", None), "endpoint_url", None)
    try:
        parts = urlsplit(str(endpoint))
        return Target("aws.dynamodb", table, parts.hostname, parts.port or _default_port(parts))
    except ValueError:
        return Target("aws.dynamodb", table)


def _default_port(parts: Any) -> int | None:
    return {"https": 443, "http": 80}.get(parts.scheme)


# --------------------------------------------------------------------------- retry and executors


def _transient(exc: ClientError) -> bool:
    """Throttling, or a server-side failure (HTTP 5xx): worth another try."""
    status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0
    return error_code(exc) in THROTTLING or int(status) >= 500


def _retryable(exc: BaseException, request: Any, seconds: float) -> bool:
    """Transport failures always; client errors when DynamoDB throttles or fails (5xx)."""
    if isinstance(exc, TRANSPORT_ERRORS):
        return tls_reason(exc) is None  # a failed TLS handshake fails the same way again
    return isinstance(exc, ClientError) and _transient(exc)


def _failure(exc: BaseException, where: str) -> BaseException:
    """What the caller sees: StorageUnavailable for transport failures, a configuration
    error without credentials, DynamoDB's own errors as they are."""
    if isinstance(exc, TRANSPORT_ERRORS) and (reason := tls_reason(exc, CA_OPTION)) is not None:
        return tls_unavailable("DynamoDB", where, _USERINFO.sub(r"\1:***@", reason))
    if isinstance(exc, TRANSPORT_ERRORS):
        detail = _USERINFO.sub(r"\1:***@", str(exc))  # botocore repeats the endpoint URL
        return StorageUnavailable(
            f"DynamoDB at {where} is unavailable ({type(exc).__name__}: {detail}); is the"
            " endpoint reachable? (locally: ./dev services up)"
        )
    if isinstance(exc, ClientError) and error_code(exc) in DENIED:
        return denied(exc, where)
    if isinstance(exc, NoCredentialsError):
        return ConfigurationError(
            f"no AWS credentials found ({exc}): configure the AWS credential chain (environment,"
            " profile, role); a local endpoint such as moto accepts any values"
            " (AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test)"
        )
    return exc


def denied(exc: ClientError, where: str) -> PermissionDenied:
    """The :class:`PermissionDenied` of an IAM refusal: the action and the table."""
    action = f"dynamodb:{exc.operation_name}"
    named = re.search(r"\(table (.+)\)$", where)
    table = named.group(1) if named else where
    return PermissionDenied(
        f"DynamoDB at {where} refused {action}: the credentials' policy does not allow it on"
        f" table {table}; grant what `graphkeep setup URL --print-iam-policy` prints (AWS said:"
        f" {exc.response.get('Error', {}).get('Message', exc)})",
        action=action,
        resource=table,
    )


#: DynamoDB's retry data: four more attempts, 50 ms to 1 s apart
RETRY = Retry(delays=RETRY_DELAYS, retryable=_retryable, failure=_failure)


def _method(client: Any, request: Any) -> Any:
    if not isinstance(request, Call):
        raise TypeError(f"unknown DynamoDB request {request!r}")
    return getattr(client, request.operation)


def executor(client: Any, table: str) -> SyncExecutor:
    """Runs the port's requests on a boto3 client, retried as :data:`RETRY` says."""

    def send(request: Any) -> Any:
        return _method(client, request)(**request.params)

    where, aimed = describe(client, table), target(client, table)
    return SyncExecutor(send, RETRY, where, aimed, pool=_gate(client))


def async_executor(client: Any, table: str) -> AsyncExecutor:
    """Runs the port's requests on an aiobotocore client, retried as :data:`RETRY` says."""

    async def send(request: Any) -> Any:
        return await _method(client, request)(**request.params)

    where, aimed = describe(client, table), target(client, table)
    return AsyncExecutor(send, RETRY, where, aimed, pool=_gate(client))


def _gate(client: Any) -> Pool:
    """The gate :func:`sync_client` / :func:`async_client` registered, or one sized from
    the HTTP pool of a client the application made."""
    return pool_for(client, lambda: _sized(client, PoolOptions()))


# --------------------------------------------------------------------------- the products


@dataclass(frozen=True)
class DynamoDBSite:
    """One table through a low-level client, as the products' ports see it."""

    client: Any
    table: str

    def executor(self, port: Any, is_async: bool) -> SyncExecutor | AsyncExecutor:
        return (async_executor if is_async else executor)(self.client, self.table)


class TablePort:
    """A port on one table whose one option is ``key_prefix``."""

    def __init__(self, table: str, *, key_prefix: str = "graphkeep") -> None:
        if not isinstance(table, str) or not table:
            raise ConfigurationError("table_name must be a non-empty string")
        self.table = table
        self.key_prefix = key_prefix
        self.prefix = keyspace.check_prefix(key_prefix)

    @classmethod
    def configured(cls, site: DynamoDBSite, options: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        return cast(Any, cls)(
            site.table, key_prefix=options.pop("key_prefix", "graphkeep")
        ), options


class OnDynamoDB(Product):
    """A product on one DynamoDB table through a low-level client: boto3's
    (``boto3.client("dynamodb")``), or aiobotocore's for an ``Async…`` class.
    ``Class(client, table_name="graphkeep", **options)``; ``from_url`` and :meth:`from_table`
    open a client of their own, taking the client options ``session``, ``profile_name``,
    ``botocore_config``, ``max_connections`` and ``pool_timeout``. Without ``endpoint_url``
    the normal AWS credential and endpoint chain applies."""

    client_options = frozenset({"session", "profile_name", "botocore_config", "verify"})

    def __init__(self, client: Any, table_name: str = "graphkeep", **options: Any) -> None:
        self.client = client
        self.table_name = table_name
        self.build(DynamoDBSite(client, table_name), options)

    @classmethod
    def opening(cls, url: str, options: dict[str, Any]) -> Opening:
        table, kwargs = parse_url(url)
        given = client_options(options)
        both = sorted(set(kwargs) & set(given))
        if both:
            raise ConfigurationError(
                f"{', '.join(both)} given both in the URL {mask_url(url)} and as an option"
            )
        return table_opening(table, {**kwargs, **given})

    @classmethod
    def from_table(
        cls: type[P],
        table_name: str,
        region_name: str | None = None,
        endpoint_url: str | None = None,
        *,
        setup: bool = True,
        **options: Any,
    ) -> Opened[P]:
        """``from_url`` for table ``table_name`` (``region_name``, ``endpoint_url`` and the
        client options given as arguments)."""
        kwargs = {"region_name": region_name, "endpoint_url": endpoint_url}
        return cls.opened(
            table_opening(table_name, {**kwargs, **client_options(options)}), setup, options
        )


def table_opening(table: str, kwargs: dict[str, Any]) -> Opening:
    """A new client with ``kwargs`` (:func:`sync_client`'s), the class on ``table``."""

    def client(is_async: bool) -> Any:
        return (async_client if is_async else sync_client)(**kwargs)

    return Opening(client, {"table_name": table})
