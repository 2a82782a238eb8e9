"""The AWS settings of the session's DynamoDB endpoints: their region, placeholder credentials
and a boto3 client on one endpoint (for readiness probes and removing a test's table)."""

from __future__ import annotations

import os
from typing import Any

REGION = "us-east-1"


def set_placeholder_credentials() -> None:
    """The session's own endpoint accepts any credentials; boto3 insists on some."""
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "graphkeep-testing")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "graphkeep-testing")


def dynamodb_client(endpoint: str | None) -> Any:
    """A boto3 client on ``endpoint``: the environment's credentials, else placeholders."""
    import boto3

    credentials = {
        "aws_access_key_id": os.environ.get("AWS_ACCESS_KEY_ID", "graphkeep-testing"),
        "aws_secret_access_key": os.environ.get("AWS_SECRET_ACCESS_KEY", "graphkeep-testing"),
    }
    return boto3.client("dynamodb", region_name=REGION, endpoint_url=endpoint, **credentials)
