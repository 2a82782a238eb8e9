"""What graphkeep needs of an IAM principal on its DynamoDB table: the policy
``graphkeep setup URL --print-iam-policy`` prints (:func:`iam_policy`).

One statement per product (the item actions its ports send), one for the table description
every product reads when opened with ``setup=True`` (the default), one for ``setup`` itself
(creating the table and its TTL: an administrator's, once), each on the table and its
indexes only. ``read_only=True`` is the variant for the inspection commands (``check``,
``dump``, ``threads``, ``stats`` …): reads and the description, nothing that writes.
tests/test_least_privilege.py records every action the suite's graphkeep clients send and
fails on one the policy lacks. See docs/security.md.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "DESCRIBE_ACTIONS",
    "PRODUCT_ACTIONS",
    "READ_ONLY_ACTIONS",
    "SETUP_ACTIONS",
    "iam_policy",
    "policy_actions",
    "table_arns",
]

_READS = ("GetItem", "BatchGetItem", "Query", "Scan")
_WRITES = ("PutItem", "UpdateItem", "DeleteItem", "TransactWriteItems", "BatchWriteItem")

#: the item actions each product's port sends (a one-item transaction is sent as the
#: single-item call; a thread's delete reaches the other products' records too)
PRODUCT_ACTIONS: dict[str, tuple[str, ...]] = {
    "saver": (*_READS, *_WRITES),
    "store": ("GetItem", "BatchGetItem", "Query", *_WRITES),
    # PutItem: rekey's conditional reseal of an entry (graphkeep rekey --all)
    "cache": ("BatchGetItem", "Query", "Scan", "PutItem", "BatchWriteItem"),
    "events": ("GetItem", "Query", *_WRITES),
    "effects": (
        "GetItem",
        "Query",
        "Scan",
        "PutItem",
        "UpdateItem",
        "DeleteItem",
        "BatchWriteItem",
    ),
}
#: what opening a product with ``setup=True`` (the default) reads to check the table
DESCRIBE_ACTIONS = ("DescribeTable", "DescribeTimeToLive")
#: ``graphkeep setup URL`` (or ``setup=True`` on a table that is not there yet)
SETUP_ACTIONS = ("CreateTable", "UpdateTimeToLive", *DESCRIBE_ACTIONS)
#: the inspection commands: reads and the table's description
READ_ONLY_ACTIONS = (*_READS, *DESCRIBE_ACTIONS)


def table_arns(table: str, region: str | None = None, account: str | None = None) -> list[str]:
    """The table's ARN and its indexes' (``*`` for an unknown region or account)."""
    arn = f"arn:aws:dynamodb:{region or '*'}:{account or '*'}:table/{table}"
    return [arn, f"{arn}/index/*"]


def _statement(sid: str, actions: tuple[str, ...], resources: list[str]) -> dict[str, Any]:
    return {
        "Sid": sid,
        "Effect": "Allow",
        "Action": [f"dynamodb:{a}" for a in sorted(set(actions))],
        "Resource": resources,
    }


def iam_policy(
    table: str,
    *,
    region: str | None = None,
    account: str | None = None,
    read_only: bool = False,
    products: tuple[str, ...] = tuple(PRODUCT_ACTIONS),
) -> dict[str, Any]:
    """The least IAM policy (a policy document) for graphkeep on ``table``."""
    resources = table_arns(table, region, account)
    if read_only:
        statements = [_statement("GraphkeepReadOnly", READ_ONLY_ACTIONS, resources)]
    else:
        statements = [
            _statement(f"Graphkeep{product.capitalize()}", PRODUCT_ACTIONS[product], resources)
            for product in products
        ]
        statements.append(_statement("GraphkeepDescribe", DESCRIBE_ACTIONS, resources))
        statements.append(_statement("GraphkeepSetup", SETUP_ACTIONS, resources))
    return {"Version": "2012-10-17", "Statement": statements}


def policy_actions(policy: dict[str, Any], *sids: str) -> set[str]:
    """The actions (without ``dynamodb:``) ``policy`` allows, in the statements ``sids``
    (all when none is named)."""
    return {
        action.removeprefix("dynamodb:")
        for statement in policy["Statement"]
        if not sids or statement["Sid"] in sids
        for action in statement["Action"]
    }
