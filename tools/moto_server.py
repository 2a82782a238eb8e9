"""Start ``moto_server`` (DynamoDB over HTTP) for the tests, without its leak and its race.

moto records every model object it ever creates in a class-level list for its
web dashboard and never frees them. A DynamoDB ``TransactWriteItems`` deep-copies
the table, so a long test run would keep gigabytes of dead copies alive (seen:
22 GB, then the kernel killed the server). The tests never use the dashboard,
so this launcher turns the tracking off.

moto's models are not thread-safe, but its server answers requests on threads:
that deep copy races any concurrent write to the table and fails with
``RuntimeError: dictionary changed size during iteration`` (HTTP 500, which
clients retry; DynamoDB has no such failure). The launcher runs one request at
a time, as one in-memory model needs.

``TransactWriteItems`` backs up the table with a deep copy *per item* of the
transaction, so a put of k items on a table of n items costs k deep copies of n
items (seen: 0.1-0.2 s per transaction on a 7,000-item table, growing with every
test). The launcher's backup is the same rollback state made cheaply: a copy of
the table's partition dicts that shares every item the transaction does not
touch (it does not change them) and holds deep copies of the ones it does.

A Query on the base table sorts and filters *every* item of the table to find one
partition (0.09 s on that table for an empty partition); the launcher hands it the
partition's items only (same result: the partition is exactly the items with that
hash key). Index queries and scans are unchanged.

moto 5.2 turns every item answer into plain dicts and then walks botocore's output
shapes to write the JSON (two thirds of the server's time per request, profiled over the
DynamoDB tests). The answers of the item operations are DynamoDB's own JSON of the items
(attribute values as ``{"S": ...}``, binary as base64), which moto's ``dynamo_json_dump``
writes directly: the launcher answers those operations with it (errors and table
operations go through moto's serializer as before). Two more costs per request go: a
regular expression that looks for an XML ``<RequestId>`` over every JSON body (a quarter
of what was left), and a listing of moto's package directory to route the request. Nor
is each request logged.

A projection (a ``ProjectionExpression``, an index's ``KEYS_ONLY`` or ``INCLUDE``) rebuilt
the whole item as plain Python once per projected attribute (``to_regular_json``, deep copies
and all) to pick each one out, then turned the result back into DynamoDB types: a fifth of
the server's time over tests/test_store_dynamodb.py. When every projected path is a top-level
attribute name, the launcher copies those attributes only (the same values, the item's own
types); a nested path or a list element goes through moto's projection as before::

    python tools/moto_server.py -H 127.0.0.1 -p 15000
"""

from __future__ import annotations

import copy
import inspect
import re
import threading
from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import Any

from moto.core import common_models


def _untracked_new(cls: type, *args: Any, **kwargs: Any) -> Any:
    return object.__new__(cls)


common_models.BaseModel.__new__ = staticmethod(_untracked_new)  # type: ignore[assignment]


class _TableBackups:
    """``copy`` for moto's DynamoDB models: inside a transaction, one cheap backup per table.

    ``touched`` maps a table name to the (hash, range) keys the running transaction
    writes; a backup copies the partition dicts, deep-copies those items only.
    """

    def __init__(self) -> None:
        self.memo: dict[int, Any] | None = None
        self.touched: dict[str, set[tuple[Any, Any]]] = {}

    def deepcopy(self, obj: Any, memo: Any = None) -> Any:
        if self.memo is None or type(obj).__name__ != "Table":
            return copy.deepcopy(obj, memo)
        if id(obj) not in self.memo:
            self.memo[id(obj)] = self._backup(obj)
        return self.memo[id(obj)]

    def _backup(self, table: Any) -> Any:
        if not table.range_key_attr:
            return copy.deepcopy(table)  # hash-only tables: not used by graphkeep
        backup = copy.copy(table)
        backup.items = defaultdict(dict, {h: dict(part) for h, part in table.items.items()})
        for hash_key, range_key in self.touched.get(table.name, ()):
            item = table.items.get(hash_key, {}).get(range_key)
            if item is not None:
                backup.items[hash_key][range_key] = copy.deepcopy(item)
        return backup


def _touched(backend: Any, transact_items: Any) -> dict[str, set[tuple[Any, Any]]]:
    """Table name -> (hash, range) keys of the items a TransactWriteItems writes."""
    from moto.dynamodb.models.dynamo_type import DynamoType

    touched: dict[str, set[tuple[Any, Any]]] = {}
    for entry in transact_items:
        for kind, op in entry.items():
            table = backend.tables.get(op.get("TableName"))
            if table is None or not table.range_key_attr:
                continue
            key = op.get("Item") if kind == "Put" else op.get("Key")
            try:
                hash_key = DynamoType(key[table.hash_key_attr])
                range_key = DynamoType(key[table.range_key_attr])
            except (KeyError, TypeError):
                continue  # moto rejects the request itself
            touched.setdefault(table.name, set()).add((hash_key, range_key))
    return touched


def _backup_once() -> None:
    from moto.dynamodb import models

    backups = _TableBackups()
    models.copy = backups  # type: ignore[assignment]
    transact = models.DynamoDBBackend.transact_write_items

    def transact_write_items(self: Any, transact_items: Any) -> Any:
        backups.memo = {}
        backups.touched = _touched(self, transact_items)
        try:
            return transact(self, transact_items)
        finally:
            backups.memo = None
            backups.touched = {}

    models.DynamoDBBackend.transact_write_items = transact_write_items  # type: ignore[method-assign]


def _partition_queries() -> None:
    from moto.dynamodb.models.table import Table

    query, all_items = Table.query, Table.all_items
    signature = inspect.signature(query)

    def partition_query(self: Any, *args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(self, *args, **kwargs)
        if bound.arguments.get("index_name") or not self.range_key_attr:
            return query(self, *args, **kwargs)
        self._gk_partition = bound.arguments["hash_key"]
        try:
            return query(self, *args, **kwargs)
        finally:
            del self._gk_partition

    def partition_items(self: Any) -> Any:
        hash_key = getattr(self, "_gk_partition", None)
        if hash_key is None:
            return all_items(self)
        part = self.items.get(hash_key, {})
        return sorted(part.values(), key=lambda item: item.range_key)

    Table.query = partition_query  # type: ignore[method-assign]
    Table.all_items = partition_items  # type: ignore[method-assign]


#: operations whose answer is items (and counts, keys, capacity): DynamoDB's JSON as it is
_PLAIN_JSON = frozenset(
    {
        "GetItem",
        "BatchGetItem",
        "PutItem",
        "UpdateItem",
        "DeleteItem",
        "Query",
        "Scan",
        "BatchWriteItem",
        "TransactWriteItems",
        "TransactGetItems",
    }
)


def _plain_json_results() -> None:
    from moto.core.responses import ActionResult
    from moto.dynamodb import responses
    from moto.dynamodb.models.utilities import dynamo_json_dump, dynamo_to_dict

    serialize = ActionResult.execute_result

    def keep(self: Any, result: object) -> None:
        ActionResult.__init__(self, result)

    def execute_result(self: Any, context: Any) -> Any:
        if context.operation_model.name in _PLAIN_JSON and isinstance(self._result, dict):
            body = {k: v for k, v in self._result.items() if v is not None}
            return 200, {"Content-Type": "application/x-amz-json-1.0"}, dynamo_json_dump(body)
        self._result = dynamo_to_dict(self._result)
        return serialize(self, context)

    responses.DynamoResult.__init__ = keep  # type: ignore[method-assign]
    responses.DynamoResult.execute_result = execute_result  # type: ignore[method-assign]


def _cheaper_requests() -> None:
    from moto import backends
    from moto.core.responses import BaseResponse

    enrich = BaseResponse._enrich_response  # a staticmethod

    def enrich_response(headers: Any, body: Any) -> Any:
        if isinstance(body, str) and "<RequestId>" not in body:
            return enrich(headers, "")[0], body  # headers only: no XML to rewrite
        return enrich(headers, body)

    BaseResponse._enrich_response = staticmethod(enrich_response)  # type: ignore[method-assign,assignment]
    modules = tuple(backends.list_of_moto_modules())
    backends.list_of_moto_modules = lambda: modules  # type: ignore[assignment]


#: a projected path element that names a list element (``attr[2]``): moto's projection handles it
_LIST_ELEMENT = re.compile(r".+\[\d+\]$")


def _top_level_projections() -> None:
    from moto.dynamodb.models.dynamo_type import Item

    project = Item.project

    def top_level_project(self: Any, projection_expressions: list[list[str]]) -> Any:
        names = [path[0] for path in projection_expressions if len(path) == 1]
        if len(names) < len(projection_expressions) or any(map(_LIST_ELEMENT.match, names)):
            return project(self, projection_expressions)
        picked = {name: self.attrs[name] for name in names if name in self.attrs}
        return Item(hash_key=self.hash_key, range_key=self.range_key, attrs=copy.deepcopy(picked))

    Item.project = top_level_project  # type: ignore[method-assign]


_partition_queries()
_backup_once()
_top_level_projections()
_plain_json_results()
_cheaper_requests()


def serialised(app: Callable[..., Iterable[bytes]]) -> Callable[..., list[bytes]]:
    """The WSGI ``app``, answering one request at a time (body produced under the lock)."""
    lock = threading.Lock()

    def one_at_a_time(environ: Any, start_response: Any) -> list[bytes]:
        with lock:
            body = app(environ, start_response)
            try:
                return list(body)
            finally:
                close = getattr(body, "close", None)
                if close is not None:
                    close()

    return one_at_a_time


if __name__ == "__main__":
    import logging

    import moto.server

    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # one line per request otherwise

    run_simple = moto.server.run_simple

    def run_serialised(host: str, port: int, app: Any, *args: Any, **kwargs: Any) -> None:
        run_simple(host, port, serialised(app), *args, **kwargs)

    moto.server.run_simple = run_serialised  # type: ignore[assignment]
    moto.server.main()
