"""Every DynamoDB action graphkeep's own clients send in this process, recorded by a botocore
event hook every botocore session made after :func:`install` registers (boto3's and
aiobotocore's alike: both register botocore's built-in handlers), so the whole test session's
sends are checked against the IAM policy ``--print-iam-policy`` prints
(tests/conftest.py's ``pytest_sessionfinish``; tests/test_least_privilege.py per product).

A call is graphkeep's when the first frame outside botocore, aiobotocore, boto3 and the
event-loop / thread machinery is in ``src/graphkeep`` but not in its ``testing`` plugin: a
test's own client (creating or deleting a table for a fixture) is not the product's."""

from __future__ import annotations

import sys
import threading
from pathlib import Path
from typing import Any

import botocore.handlers

#: action name -> the test that first sent it
RECORDED: dict[str, str] = {}
_LOCK = threading.Lock()
_SRC = str(Path(__file__).resolve().parent.parent / "src" / "graphkeep") + "/"
_INSTALLED_SRC = str(Path(__import__("graphkeep").__file__).resolve().parent) + "/"
_PASS_THROUGH = (
    "/botocore/",
    "/aiobotocore/",
    "/boto3/",
    "/asyncio/",
    "/concurrent/",
    "threading.py",
)
#: the test running now (set by conftest's hook)
CURRENT = ["<no test>"]


def _graphkeeps() -> bool:
    frame = sys._getframe(2)
    while frame is not None:
        name = frame.f_code.co_filename
        if not any(part in name for part in _PASS_THROUGH):
            inside = name.startswith((_SRC, _INSTALLED_SRC))
            return inside and "/graphkeep/testing/" not in name
        frame = frame.f_back  # type: ignore[assignment]
    return False


def _record(model: Any, **_: Any) -> None:
    if _graphkeeps():
        with _LOCK:
            RECORDED.setdefault(model.name, CURRENT[0])


def install() -> None:
    """Record the actions of every botocore session made from now on."""
    spec = ("before-call.dynamodb", _record)
    if spec not in botocore.handlers.BUILTIN_HANDLERS:
        botocore.handlers.BUILTIN_HANDLERS.append(spec)
