"""DynamoDB capacity units per request, computed by AWS's documented rules from what a
boto3 client sends and receives.

moto answers ``ReturnConsumedCapacity`` with fixed figures (1.0 per write, 2.0 per
transaction item, 0.5 per read, whatever the size), so the bench computes the units itself
(AWS developer guide, "DynamoDB read and write operations" and "Capacity management for
transactions"):

- item size: attribute names plus values (UTF-8 strings, raw binary, numbers about one
  byte per two digits plus one, 3 bytes of overhead per list or map plus 1 per element);
- writes: 1 WCU per 1 KB of item size, rounded up per item (at least 1). PutItem and the
  puts of BatchWriteItem bill the larger of the item before and after, UpdateItem likewise,
  DeleteItem the deleted item; BatchWriteItem bills each item as its own PutItem/DeleteItem;
  TransactWriteItems bills each action twice (prepare and commit), a ConditionCheck as a
  write of the checked item. A write whose condition fails still bills the existing item
  (at least 1 WCU); a cancelled transaction is billed here as if it had committed (an
  upper bound; neither saver's bench turns cancel one);
- reads: 1 RCU per 4 KB, 0.5 when eventually consistent, 2 in a transaction. GetItem and
  each key of BatchGetItem round up per item (a missing item still bills the minimum);
  Query and Scan sum the sizes of every item *read* (a projection or a filter does not make
  them smaller) and round up once per request.

Items read are whole items even when the request projects a few attributes, and a Query's
filter drops items after they were read. So the meter keeps a :class:`Mirror` of the
table's item sizes (per attribute), fed by every write and unprojected read it sees: the
bench's tables are fresh and only the metered client writes to them. A projected item is
billed at its mirrored size, and a Query on the base table at the mirrored items between
its start and its ``LastEvaluatedKey`` (or the end of its key range); items the mirror does
not know are billed at the size the response shows. An UpdateItem's after-image is the
before-image with its ``SET``/``REMOVE`` clauses applied (a ``SET`` of a computed value is
sized by its operands).
"""

from __future__ import annotations

import math
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from graphkeep.backends.dynamodb.items import attribute_size

WRITE_UNIT_BYTES = 1024
READ_UNIT_BYTES = 4096
#: attribute sizes of one item, by name (the name included)
Sizes = dict[str, int]
Key = tuple[str, str]


def sizes_of(item: dict[str, Any]) -> Sizes:
    return {name: len(name.encode()) + attribute_size(value) for name, value in item.items()}


def item_size(item: dict[str, Any]) -> int:
    """An item's size by DynamoDB's rules (attribute names count too)."""
    return sum(sizes_of(item).values())


def write_units(size: int, *, transactional: bool = False) -> float:
    units = max(1, math.ceil(size / WRITE_UNIT_BYTES))
    return float(units * (2 if transactional else 1))


def read_units(size: int, *, consistent: bool, transactional: bool = False) -> float:
    units = max(1, math.ceil(size / READ_UNIT_BYTES))
    if transactional:
        return float(2 * units)
    return float(units) if consistent else units / 2


@dataclass(frozen=True)
class Consumed:
    """Capacity units of one request."""

    read: float = 0.0
    write: float = 0.0


class Mirror:
    """Item sizes of the metered tables, per attribute, as the meter saw them written."""

    def __init__(self) -> None:
        self.items: dict[str, dict[Key, Sizes]] = {}

    def table(self, name: str) -> dict[Key, Sizes]:
        return self.items.setdefault(name, {})

    def size(self, table: str, key: Key) -> int:
        found = self.table(table).get(key)
        return sum(found.values()) if found else 0


_SET_CLAUSE = re.compile(r"\b(SET|REMOVE|ADD|DELETE)\b", re.IGNORECASE)
_PLACEHOLDER = re.compile(r":[A-Za-z0-9_]+")
_SK_CONDITION = re.compile(
    r"^\s*(?:begins_with\s*\(\s*(?P<bname>\S+?)\s*,\s*(?P<bval>:\w+)\s*\)"
    r"|(?P<name>\S+)\s+BETWEEN\s+(?P<lo>:\w+)\s+AND\s+(?P<hi>:\w+)"
    r"|(?P<cname>\S+)\s*(?P<op><=|>=|<|>|=)\s*(?P<cval>:\w+))\s*$",
    re.IGNORECASE,
)


def _name(token: str, names: dict[str, str]) -> str:
    return names.get(token.strip(), token.strip())


def _anything(sk: str) -> bool:
    return True


def _sort_key_test(match: re.Match[str], values: dict[str, Any]) -> Callable[[str], bool]:
    """The sort key condition of a Query (one :data:`_SK_CONDITION` match) as a predicate."""
    if match.group("bname"):
        prefix = str(values[match.group("bval")]["S"])
        return lambda sk: sk.startswith(prefix)
    if match.group("name"):
        lo, hi = str(values[match.group("lo")]["S"]), str(values[match.group("hi")]["S"])
        return lambda sk: lo <= sk <= hi
    bound, op = str(values[match.group("cval")]["S"]), match.group("op")
    tests: dict[str, Callable[[str], bool]] = {
        "=": lambda sk: sk == bound,
        "<": lambda sk: sk < bound,
        "<=": lambda sk: sk <= bound,
        ">": lambda sk: sk > bound,
        ">=": lambda sk: sk >= bound,
    }
    return tests[op]


class CapacityMeter:
    """Computes :class:`Consumed` per request of clients on tables keyed ``(hash, range)``.

    :meth:`attach` hooks a boto3/botocore client: the request parameters are kept at
    ``before-parameter-build`` and billed at ``after-call`` (failed requests too), in the
    thread that made the call, through ``report``.
    """

    def __init__(self, hash_key: str, range_key: str) -> None:
        self.hash_key, self.range_key = hash_key, range_key
        self.mirror = Mirror()
        self._lock = threading.Lock()

    # -- hooks -------------------------------------------------------------------------

    def attach(self, client: Any, report: Callable[[Consumed], None]) -> None:
        def keep(params: Any = None, context: Any = None, **_: Any) -> None:
            if context is not None and params is not None:
                context["graphkeep_capacity_params"] = params

        def bill(parsed: Any = None, model: Any = None, context: Any = None, **_: Any) -> None:
            params = (context or {}).get("graphkeep_capacity_params")
            if params is None or model is None:
                return
            consumed = self.consume(model.name, params, parsed or {})
            if consumed.read or consumed.write:
                report(consumed)

        client.meta.events.register("before-parameter-build.dynamodb", keep)
        client.meta.events.register("after-call.dynamodb", bill)

    # -- billing -----------------------------------------------------------------------

    def consume(self, operation: str, params: dict[str, Any], parsed: dict[str, Any]) -> Consumed:
        """The units of one call (``operation`` as in the API: ``PutItem``, ``Query``...)
        given its parameters and its parsed response (an error response included)."""
        with self._lock:
            handler = getattr(self, f"_{operation}", None)
            return handler(params, parsed) if handler else Consumed()

    def _key(self, item: dict[str, Any]) -> Key | None:
        try:
            return str(item[self.hash_key]["S"]), str(item[self.range_key]["S"])
        except (KeyError, TypeError):
            return None

    @staticmethod
    def _error(parsed: dict[str, Any]) -> str:
        return str((parsed.get("Error") or {}).get("Code", ""))

    def _put(self, table: str, item: dict[str, Any], *, apply: bool) -> int:
        """Bytes billed for putting ``item`` (the larger of before and after)."""
        key = self._key(item)
        before = self.mirror.size(table, key) if key else 0
        after = sizes_of(item)
        if apply and key:
            self.mirror.table(table)[key] = after
        return max(before, sum(after.values()))

    def _delete(self, table: str, key_item: dict[str, Any], *, apply: bool) -> int:
        key = self._key(key_item)
        if key is None:
            return 0
        before = self.mirror.size(table, key)
        if apply:
            self.mirror.table(table).pop(key, None)
        return before

    def _update(self, table: str, update: dict[str, Any], *, apply: bool) -> int:
        key = self._key(update["Key"])
        if key is None:
            return 0
        old = self.mirror.table(table).get(key)
        new: Sizes = dict(old) if old else sizes_of(update["Key"])
        names = update.get("ExpressionAttributeNames") or {}
        values = update.get("ExpressionAttributeValues") or {}
        expression = str(update.get("UpdateExpression") or "")
        parts = _SET_CLAUSE.split(expression)
        for verb, body in zip(parts[1::2], parts[2::2], strict=True):
            for clause in body.split(","):
                clause = clause.strip()
                if not clause:
                    continue
                if verb.upper() == "REMOVE":
                    new.pop(_name(clause, names), None)
                elif verb.upper() == "SET" and "=" in clause:
                    target, _, source = clause.partition("=")
                    name = _name(target, names)
                    operands = [values[p] for p in _PLACEHOLDER.findall(source) if p in values]
                    size = max((attribute_size(v) for v in operands), default=new.get(name, 0))
                    new[name] = len(name.encode()) + size
                elif verb.upper() == "ADD":
                    target, _, placeholder = clause.partition(" ")
                    name = _name(target, names)
                    value = values.get(placeholder.strip())
                    if value is not None:
                        new[name] = max(
                            new.get(name, 0), len(name.encode()) + attribute_size(value)
                        )
        if apply:
            self.mirror.table(table)[key] = new
        return max(sum(old.values()) if old else 0, sum(new.values()))

    def _PutItem(self, params: dict[str, Any], parsed: dict[str, Any]) -> Consumed:
        table, ok = params["TableName"], not self._error(parsed)
        if not ok and self._error(parsed) != "ConditionalCheckFailedException":
            return Consumed()
        if not ok:
            key = self._key(params["Item"])
            return Consumed(write=write_units(self.mirror.size(table, key) if key else 0))
        return Consumed(write=write_units(self._put(table, params["Item"], apply=True)))

    def _UpdateItem(self, params: dict[str, Any], parsed: dict[str, Any]) -> Consumed:
        table, error = params["TableName"], self._error(parsed)
        if error == "ConditionalCheckFailedException":
            key = self._key(params["Key"])
            return Consumed(write=write_units(self.mirror.size(table, key) if key else 0))
        if error:
            return Consumed()
        return Consumed(write=write_units(self._update(table, params, apply=True)))

    def _DeleteItem(self, params: dict[str, Any], parsed: dict[str, Any]) -> Consumed:
        error = self._error(parsed)
        if error and error != "ConditionalCheckFailedException":
            return Consumed()
        size = self._delete(params["TableName"], params["Key"], apply=not error)
        return Consumed(write=write_units(size))

    def _BatchWriteItem(self, params: dict[str, Any], parsed: dict[str, Any]) -> Consumed:
        if self._error(parsed):
            return Consumed()
        unprocessed = parsed.get("UnprocessedItems") or {}
        total = 0.0
        for table, requests in (params.get("RequestItems") or {}).items():
            left = unprocessed.get(table) or []
            for request in requests:
                if request in left:
                    continue
                if "PutRequest" in request:
                    size = self._put(table, request["PutRequest"]["Item"], apply=True)
                else:
                    size = self._delete(table, request["DeleteRequest"]["Key"], apply=True)
                total += write_units(size)
        return Consumed(write=total)

    def _TransactWriteItems(self, params: dict[str, Any], parsed: dict[str, Any]) -> Consumed:
        error = self._error(parsed)
        if error and error != "TransactionCanceledException":
            return Consumed()
        apply = not error
        total = 0.0
        for action in params.get("TransactItems") or []:
            if "Put" in action:
                size = self._put(action["Put"]["TableName"], action["Put"]["Item"], apply=apply)
            elif "Update" in action:
                size = self._update(action["Update"]["TableName"], action["Update"], apply=apply)
            elif "Delete" in action:
                delete = action["Delete"]
                size = self._delete(delete["TableName"], delete["Key"], apply=apply)
            else:
                check = action.get("ConditionCheck") or {}
                key = self._key(check.get("Key") or {})
                size = self.mirror.size(check.get("TableName", ""), key) if key else 0
            total += write_units(size, transactional=True)
        return Consumed(write=total)

    def _read_size(self, table: str, item: dict[str, Any], projected: bool) -> int:
        """Bytes of an item read: the whole item, as mirrored, when the response shows
        only a projection of it."""
        key = self._key(item)
        if not projected:
            if key:
                self.mirror.table(table)[key] = sizes_of(item)
            return item_size(item)
        return (self.mirror.size(table, key) if key else 0) or item_size(item)

    def _GetItem(self, params: dict[str, Any], parsed: dict[str, Any]) -> Consumed:
        if self._error(parsed):
            return Consumed()
        table = params["TableName"]
        item = parsed.get("Item")
        projected = bool(params.get("ProjectionExpression") or params.get("AttributesToGet"))
        if item is None:
            size = 0
        elif projected:
            key = self._key(params["Key"])
            size = (self.mirror.size(table, key) if key else 0) or item_size(item)
        else:
            size = self._read_size(table, item, False)
        return Consumed(read=read_units(size, consistent=bool(params.get("ConsistentRead"))))

    def _BatchGetItem(self, params: dict[str, Any], parsed: dict[str, Any]) -> Consumed:
        if self._error(parsed):
            return Consumed()
        total = 0.0
        responses = parsed.get("Responses") or {}
        unprocessed = parsed.get("UnprocessedKeys") or {}
        for table, request in (params.get("RequestItems") or {}).items():
            consistent = bool(request.get("ConsistentRead"))
            projected = bool(request.get("ProjectionExpression") or request.get("AttributesToGet"))
            left = (unprocessed.get(table) or {}).get("Keys") or []
            found: dict[Key, dict[str, Any]] = {}
            for item in responses.get(table) or []:
                key = self._key(item)
                if key:
                    found[key] = item
            for key_item in request.get("Keys") or []:
                if key_item in left:
                    continue
                key = self._key(key_item)
                item = found.get(key) if key else None
                if item is not None and not projected:
                    size = self._read_size(table, item, False)
                elif key:
                    size = self.mirror.size(table, key) or (item_size(item) if item else 0)
                else:
                    size = 0
                total += read_units(size, consistent=consistent)
        return Consumed(read=total)

    def _Query(self, params: dict[str, Any], parsed: dict[str, Any]) -> Consumed:
        if self._error(parsed):
            return Consumed()
        table = params["TableName"]
        projected = bool(params.get("ProjectionExpression") or params.get("AttributesToGet"))
        projected = projected or params.get("Select") not in (None, "ALL_ATTRIBUTES")
        returned = list(parsed.get("Items") or [])
        sizes: dict[Key | int, int] = {}
        for position, item in enumerate(returned):
            key = self._key(item)
            sizes[key if key else position] = self._read_size(table, item, projected)
        if "IndexName" not in params:
            for read, size in self._range_read(table, params, parsed).items():
                sizes.setdefault(read, size)
        consistent = bool(params.get("ConsistentRead"))
        return Consumed(read=read_units(sum(sizes.values()), consistent=consistent))

    def _Scan(self, params: dict[str, Any], parsed: dict[str, Any]) -> Consumed:
        if self._error(parsed):
            return Consumed()
        table = params["TableName"]
        projected = bool(params.get("ProjectionExpression") or params.get("AttributesToGet"))
        size = sum(self._read_size(table, i, projected) for i in parsed.get("Items") or [])
        # a filter's dropped items are not seen here: counted as read by ScannedCount
        dropped = int(parsed.get("ScannedCount") or 0) - len(parsed.get("Items") or [])
        if dropped > 0 and parsed.get("Items"):
            size += dropped * size // len(parsed["Items"])
        return Consumed(read=read_units(size, consistent=bool(params.get("ConsistentRead"))))

    def _range_read(
        self, table: str, params: dict[str, Any], parsed: dict[str, Any]
    ) -> dict[Key | int, int]:
        """Mirrored items a base-table Query read: its partition's items in its sort key
        range and direction, after ``ExclusiveStartKey``, up to ``LastEvaluatedKey``
        (inclusive) or the end of the range. Empty when the key condition is not one of
        the forms this understands."""
        names = params.get("ExpressionAttributeNames") or {}
        values = params.get("ExpressionAttributeValues") or {}
        condition = str(params.get("KeyConditionExpression") or "")
        clauses = re.split(r"\s+AND\s+(?![^(]*\))", condition, flags=re.IGNORECASE)
        # BETWEEN's own AND splits the clause: join it back
        joined: list[str] = []
        for clause in clauses:
            if joined and re.search(r"\bBETWEEN\s+:\w+\s*$", joined[-1], re.IGNORECASE):
                joined[-1] += " AND " + clause
            else:
                joined.append(clause)
        pk: str | None = None
        test: Callable[[str], bool] = _anything
        for clause in joined:
            equal = re.fullmatch(r"\s*(\S+)\s*=\s*(:\w+)\s*", clause)
            if equal and _name(equal.group(1), names) == self.hash_key:
                pk = str(values[equal.group(2)]["S"])
                continue
            match = _SK_CONDITION.match(clause)
            if not match:
                return {}
            test = _sort_key_test(match, values)
        if pk is None:
            return {}
        forward = params.get("ScanIndexForward", True) is not False
        rows = sorted(
            ((k[1], sum(v.values())) for k, v in self.mirror.table(table).items() if k[0] == pk),
            reverse=not forward,
        )
        start = params.get("ExclusiveStartKey")
        last = parsed.get("LastEvaluatedKey")
        start_key = self._key(start) if start else None
        last_key = self._key(last) if last else None
        start_sk = start_key[1] if start_key else None
        last_sk = last_key[1] if last_key else None
        read: dict[Key | int, int] = {}
        for sk, size in rows:
            if not test(sk):
                continue
            if start_sk is not None and (sk <= start_sk if forward else sk >= start_sk):
                continue
            if last_sk is not None and (sk > last_sk if forward else sk < last_sk):
                break
            read[(pk, sk)] = size
        return read
