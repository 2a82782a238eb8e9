"""The table every DynamoDB product shares: its definition, and the op that creates and checks it.

One table with composite string keys (``pk``/``sk``, layout in :mod:`.keys`), on-demand billing,
native TTL on ``exp`` and a sparse ``run_id`` GSI for ``delete_for_runs``. Savers, stores,
caches and event logs all set up the table with :func:`setup_table`, so whichever creates it
leaves what the others expect. See docs/architecture.md.
"""

from __future__ import annotations

import logging
from typing import Any

from botocore.exceptions import ClientError

from graphkeep.backends.dynamodb.items import EXP, PK, RAW, RUN, RUN_INDEX, SK
from graphkeep.backends.dynamodb.requests import Call, error_code
from graphkeep.errors import ConfigurationError, GraphkeepError
from graphkeep.port import Op, Sleep

log = logging.getLogger("graphkeep.dynamodb")

TABLE_WAIT_SECONDS = 600


def check_table_name(table: Any) -> str:
    """``table`` when it is a usable table name; else a ConfigurationError."""
    if not isinstance(table, str) or not table:
        raise ConfigurationError("table_name must be a non-empty string")
    return table


def table_definition(table_name: str, *, run_index: bool = True) -> dict[str, Any]:
    """The CreateTable request ``setup()`` sends (TTL is enabled separately on ``exp``)."""
    attributes = [
        {"AttributeName": PK, "AttributeType": "S"},
        {"AttributeName": SK, "AttributeType": "S"},
    ]
    definition: dict[str, Any] = {
        "TableName": table_name,
        "AttributeDefinitions": attributes,
        "KeySchema": [
            {"AttributeName": PK, "KeyType": "HASH"},
            {"AttributeName": SK, "KeyType": "RANGE"},
        ],
        "BillingMode": "PAY_PER_REQUEST",
    }
    if run_index:
        attributes.append({"AttributeName": RUN, "AttributeType": "S"})
        definition["GlobalSecondaryIndexes"] = [
            {
                "IndexName": RUN_INDEX,
                "KeySchema": [{"AttributeName": RUN, "KeyType": "HASH"}],
                "Projection": {"ProjectionType": "INCLUDE", "NonKeyAttributes": [RAW]},
            }
        ]
    return definition


def definition_as(table_name: str, run_index: bool, format: str) -> dict[str, Any]:
    """The table definition as a CreateTable request (``format="create_table"``) or as an
    ``AWS::DynamoDB::Table`` resource with its TTL specification (``"cloudformation"``)."""
    definition = table_definition(table_name, run_index=run_index)
    if format == "create_table":
        return definition
    if format == "cloudformation":
        properties = dict(definition)
        properties["TimeToLiveSpecification"] = {"AttributeName": EXP, "Enabled": True}
        return {"Type": "AWS::DynamoDB::Table", "Properties": properties}
    raise ConfigurationError(f"format must be 'create_table' or 'cloudformation', got {format!r}")


def setup_table(table: str, *, run_index: bool = True) -> Op[None]:
    """Create the table unless it exists, wait until it is usable, check its key schema
    and enable TTL on ``exp`` (idempotent)."""
    try:
        described = yield Call("describe_table", {"TableName": table})
    except ClientError as exc:
        if error_code(exc) != "ResourceNotFoundException":
            raise
        try:
            yield Call("create_table", table_definition(table, run_index=run_index))
        except ClientError as exc2:
            if error_code(exc2) != "ResourceInUseException":
                raise
        described = yield Call("describe_table", {"TableName": table})
    waited = 0.0
    while described["Table"].get("TableStatus") not in ("ACTIVE", "UPDATING"):
        if waited >= TABLE_WAIT_SECONDS:
            raise GraphkeepError(
                f"DynamoDB table {table} is still {described['Table'].get('TableStatus')}"
                f" after {TABLE_WAIT_SECONDS}s"
            )
        yield Sleep(1.0)
        waited += 1.0
        described = yield Call("describe_table", {"TableName": table})
    _check_table(described["Table"], run_index)
    ttl = yield Call("describe_time_to_live", {"TableName": table})
    state = ttl.get("TimeToLiveDescription") or {}
    status = state.get("TimeToLiveStatus", "DISABLED")
    if status in ("ENABLED", "ENABLING"):
        if state.get("AttributeName") not in (None, EXP):
            raise ConfigurationError(
                f"table {table} has TTL on attribute {state.get('AttributeName')!r};"
                f" graphkeep writes expiries to {EXP!r}"
            )
    elif status == "DISABLED":
        yield Call(
            "update_time_to_live",
            {
                "TableName": table,
                "TimeToLiveSpecification": {"Enabled": True, "AttributeName": EXP},
            },
        )


def table_size(table: str) -> Op[int | None]:
    """ONE ``DescribeTable``: the table's ``TableSizeBytes`` (every item of every product and
    key prefix sharing it), which DynamoDB refreshes about every six hours. None while it
    has no figure yet: a table holding items that reports 0 bytes (a new table, or moto,
    which always reports 0)."""
    described = yield Call("describe_table", {"TableName": table})
    stats = described["Table"]
    size = int(stats.get("TableSizeBytes") or 0)
    if size == 0 and int(stats.get("ItemCount") or 0) > 0:
        return None
    return size


def _check_table(table: dict[str, Any], run_index: bool) -> None:
    schema = {k["AttributeName"]: k["KeyType"] for k in table.get("KeySchema", [])}
    types = {a["AttributeName"]: a["AttributeType"] for a in table.get("AttributeDefinitions", [])}
    if schema != {PK: "HASH", SK: "RANGE"} or types.get(PK) != "S" or types.get(SK) != "S":
        raise ConfigurationError(
            f"table {table.get('TableName')} has key schema {schema}; graphkeep needs"
            f" {PK!r} (S, HASH) and {SK!r} (S, RANGE). Use another table name, or create it"
            " from DynamoDBSaver.table_definition()"
        )
    indexes = {i.get("IndexName") for i in table.get("GlobalSecondaryIndexes", []) or []}
    if run_index and RUN_INDEX not in indexes:
        log.warning(
            "table %s has no %r index; delete_for_runs will scan the table",
            table.get("TableName"),
            RUN_INDEX,
        )
