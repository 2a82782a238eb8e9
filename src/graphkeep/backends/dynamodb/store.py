"""LangGraph's long-term memory store on DynamoDB: :class:`DynamoDBStore` (boto3) and
:class:`AsyncDynamoDBStore` (aiobotocore), the :class:`StorePort` mapping onto one table.

Its layout on the table, the requests and capacity units of each operation are in the package
docstring (:mod:`graphkeep.backends.dynamodb`, "The store"); the server-side filter is in
:mod:`.store_filter`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from graphkeep.backends.dynamodb import keys as dkeys
from graphkeep.backends.dynamodb.client import DynamoDBSite, OnDynamoDB
from graphkeep.backends.dynamodb.items import (
    CODEC,
    DIGEST,
    EXP,
    MAX_ITEM_BYTES,
    NCHUNKS,
    PK,
    SIZE,
    SK,
    VALUE,
    B,
    N,
    S,
    attach_payload,
    b,
    compress_level,
    item_value,
    key,
    n,
    owner_chunks,
    s,
    size_of,
)
from graphkeep.backends.dynamodb.requests import (
    TRANSACT_MAX_BYTES,
    TRANSACT_MAX_ITEMS,
    Call,
    batch_get,
    batch_write,
    query_all,
    query_page,
    query_params,
    transact,
)
from graphkeep.backends.dynamodb.schema import check_table_name, setup_table
from graphkeep.backends.dynamodb.store_filter import FILTER, filter_attributes, filter_expression
from graphkeep.errors import ConfigurationError, InvalidInput, PayloadTooLarge
from graphkeep.port import Op, Parallel, codec
from graphkeep.store.port import Condition, ItemKey, Namespace, SearchQuery, StoredItem, Vector
from graphkeep.store.ranking import in_prefix, rank
from graphkeep.store.shells import AsyncStore, SyncStore
from graphkeep.store.values import (
    dotted_namespace,
    encode_value,
    namespace_from_dotted,
)

__all__ = ["STORE_OPTIONS", "AsyncDynamoDBStore", "DynamoDBStorePort", "DynamoDBStore"]

#: options of ``graphkeep.connect_store("dynamodb://...")`` beyond the common ones
STORE_OPTIONS = frozenset(
    {"shard_labels", "compress", "session", "profile_name", "botocore_config"}
)

FORMAT = "m1"
ITEM_KIND = "i#"
REGISTRY_KIND = "p#"
NAMES_KIND = "n#"
#: the namespace list's "complete" marker: setup() writes it once every namespace is listed
NAMES_MARKER = "v#1"
#: a namespace list entry longer than this (escaped labels, bytes) keeps a head plus a digest
NAMES_LIMIT = 900
#: what follows the head of a shortened entry: ``$~`` and 40 hex digits
NAMES_DIGEST = len(dkeys.HASH_MARK) + 40
NS, KEY, CREATED, UPDATED, EXPIRES, TTL_MINUTES, VECTORS, WRITTEN, VERIFY, GONE = (
    "ns", "k", "cu", "uu", "xm", "tm", "vec", "at", "vf", "gn",
)  # fmt: skip
#: the fallback copy's finished marker (``store copy --all``), beside the namespace list
DONE_MARKER = "fallback-done"
#: attributes an item update replaces or removes (everything but the keys and ``cu``)
REPLACED = (
    NS,
    KEY,
    UPDATED,
    EXPIRES,
    TTL_MINUTES,
    EXP,
    VECTORS,
    VALUE,
    NCHUNKS,
    DIGEST,
    SIZE,
    CODEC,
    FILTER,
    GONE,
)
READ = (NS, KEY, VALUE, CREATED, UPDATED, EXPIRES, TTL_MINUTES, NCHUNKS, DIGEST, SIZE, CODEC, GONE)
#: a label or key longer than this (escaped, bytes) keeps a head plus a digest in the key
LABEL_LIMIT = 200
MAX_PK_BYTES = 2048
MAX_SK_BYTES = 1024
DEFAULT_SHARD_LABELS = 2
#: chunk items whose owner is gone are deleted by ``sweep`` once older than this
ORPHAN_AGE_MS = 3_600_000


@dataclass(frozen=True, slots=True)
class Address:
    """Where an item lives: its partition (and the registry sort key naming it), sort key."""

    pk: str
    sk: str
    registry_sk: str

    @property
    def fits(self) -> bool:
        return (
            len(self.pk.encode("utf-8")) <= MAX_PK_BYTES
            and len(self.sk.encode("utf-8")) <= MAX_SK_BYTES
        )


@dataclass(slots=True)
class _Write:
    """One put (the owner item and its chunk items) or delete (``stored`` is None)."""

    address: Address
    stored: StoredItem | None
    namespace: Namespace
    item: dict[str, Any] = field(default_factory=dict)
    chunks: list[dict[str, Any]] = field(default_factory=list)
    #: a delete that leaves a tombstone (the store reads through to a fallback)
    tombstone: bool = False

    @property
    def digest(self) -> str | None:
        return s(self.item, DIGEST) if DIGEST in self.item else None


def _labels(labels: Namespace) -> str:
    return "".join(dkeys.part(label, LABEL_LIMIT)[0] + dkeys.SEP for label in labels)


class DynamoDBStorePort:
    """The :class:`~graphkeep.store.port.StorePort` on one DynamoDB table."""

    def __init__(
        self,
        table: str,
        *,
        key_prefix: str = "graphkeep",
        shard_labels: int = DEFAULT_SHARD_LABELS,
        compress: bool | int = True,
    ) -> None:
        if isinstance(shard_labels, bool) or not isinstance(shard_labels, int):
            raise ConfigurationError(f"shard_labels must be an int >= 1, got {shard_labels!r}")
        if not 1 <= shard_labels <= 8:
            raise ConfigurationError(f"shard_labels must be between 1 and 8, got {shard_labels}")
        self.table = check_table_name(table)
        self.prefix = dkeys.check_prefix(key_prefix)
        self.shard_labels = shard_labels
        self.level = compress_level(compress)
        self.registry_pk = f"{self.prefix}{dkeys.SEP}{FORMAT}r"
        self.registered: set[str] = set()
        self.names_pk = f"{self.prefix}{dkeys.SEP}{FORMAT}n"
        #: namespace list entries this process has written: sort key -> whether marked ``vf``
        self.named: dict[str, bool] = {}
        #: whether the namespace list is complete (``v#1`` seen); None: not asked yet
        self.names_complete: bool | None = None

    # -- keys ------------------------------------------------------------------------

    @classmethod
    def configured(cls, site: DynamoDBSite, options: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        port = cls(
            site.table,
            key_prefix=options.pop("key_prefix", "graphkeep"),
            shard_labels=options.pop("shard_labels", DEFAULT_SHARD_LABELS),
            compress=options.pop("compress", True),
        )
        return port, options

    def address(self, namespace: Namespace, item_key: str) -> Address:
        shard = _labels(namespace[: self.shard_labels])
        return Address(
            pk=self._partition(shard),
            sk=ITEM_KIND
            + _labels(namespace[self.shard_labels :])
            + dkeys.part(item_key, LABEL_LIMIT)[0],
            registry_sk=REGISTRY_KIND + shard,
        )

    def _partition(self, shard: str) -> str:
        return f"{self.prefix}{dkeys.SEP}{FORMAT}{dkeys.SEP}{shard}"

    @staticmethod
    def names_sk(namespace: Namespace) -> str:
        """The namespace list's sort key of ``namespace``: its escaped labels, or when they are
        too long, the leading labels that fit, ``$~`` and a digest of the whole namespace."""
        labels = _labels(namespace)
        if len(labels.encode("utf-8")) <= NAMES_LIMIT:
            return NAMES_KIND + labels
        digest = dkeys.HASH_MARK + hashlib.sha256(labels.encode("utf-8")).hexdigest()
        digest = digest[:NAMES_DIGEST]
        head = ""
        for label in namespace:
            more = _labels((label,))
            if len((head + more + digest).encode("utf-8")) > NAMES_LIMIT:
                break
            head += more
        return NAMES_KIND + head + digest

    def _name(self, namespace: Namespace, verify: bool) -> dict[str, Any]:
        """The namespace list entry of ``namespace`` (only ever adds: ``vf`` stays once set)."""
        names, values = {"#ns": NS}, {":ns": S(dotted_namespace(namespace))}
        expression = "SET #ns = :ns"
        if verify:
            names["#vf"], values[":vf"] = VERIFY, {"BOOL": True}
            expression += ", #vf = :vf"
        return {
            "Update": {
                "TableName": self.table,
                "Key": key(self.names_pk, self.names_sk(namespace)),
                "UpdateExpression": expression,
                "ExpressionAttributeNames": names,
                "ExpressionAttributeValues": values,
            }
        }

    def _partitions(self, prefix: Namespace) -> Op[list[tuple[str, str]]]:
        """(pk, sort key prefix) of every partition holding namespaces under ``prefix``."""
        if len(prefix) >= self.shard_labels:
            shard = _labels(prefix[: self.shard_labels])
            pk, begins = self._partition(shard), ITEM_KIND + _labels(prefix[self.shard_labels :])
            if Address(pk, begins, "").fits:
                return [(pk, begins)]
            return []  # longer than any key: nothing is stored there
        params = query_params(
            self.table, self.registry_pk, begins=REGISTRY_KIND + _labels(prefix), projection=[]
        )
        found = yield from query_all(params)
        return [(self._partition(s(i, SK)[len(REGISTRY_KIND) :]), ITEM_KIND) for i in found]

    # -- items -----------------------------------------------------------------------

    def _encode(self, stored: StoredItem, address: Address) -> _Write:
        item: dict[str, Any] = {
            PK: S(address.pk),
            SK: S(address.sk),
            NS: S(dotted_namespace(stored.namespace)),
            KEY: S(stored.key),
            UPDATED: N(stored.updated_us),
        }
        if stored.vectors:
            item[VECTORS] = B(codec.packb([[v.path, v.digest, v.data] for v in stored.vectors]))
        if stored.filterable:  # a sealed value keeps no readable copy
            item.update(filter_attributes(stored.value))
        if size_of(item) > MAX_ITEM_BYTES // 2:
            raise PayloadTooLarge(
                f"the embeddings of {stored.key!r} take {size_of(item)} bytes; DynamoDB items"
                f" hold {MAX_ITEM_BYTES}: index fewer fields (index=[...]) or use fewer dims"
            )
        encoded = attach_payload(item, encode_value(stored.value), level=self.level)
        for chunk in encoded.chunks:
            chunk[WRITTEN] = N(stored.updated_us // 1000)
        if stored.expires_ms is not None:
            item[EXPIRES] = N(stored.expires_ms)
            item[EXP] = N(-(-stored.expires_ms // 1000))
        if stored.ttl_minutes is not None:
            item[TTL_MINUTES] = {"N": repr(float(stored.ttl_minutes))}
        return _Write(address, stored, stored.namespace, item, encoded.chunks)

    def _decode(self, item: dict[str, Any], chunks: dict[str, dict[str, Any]]) -> StoredItem:
        vectors = (
            [Vector(p, d, bytes(x)) for p, d, x in codec.unpackb(b(item, VECTORS))]
            if VECTORS in item
            else []
        )
        minutes = item.get(TTL_MINUTES)
        namespace, key = namespace_from_dotted(s(item, NS)), s(item, KEY)
        return StoredItem(
            namespace=namespace,
            key=key,
            value=item_value(item, chunks, namespace, key) if chunks is not _NO_VALUE else {},
            created_us=n(item, CREATED) or 0,
            updated_us=n(item, UPDATED) or 0,
            expires_ms=n(item, EXPIRES),
            ttl_minutes=None if minutes is None else float(minutes["N"]),
            vectors=vectors,
        )

    def _chunks(self, items: list[dict[str, Any]]) -> Op[dict[str, dict[str, Any]]]:
        """The chunk items of those ``items`` whose value lives in chunks, by sort key."""
        wanted = [key(s(i, PK), sk) for i in items for sk in owner_chunks(i)]
        if not wanted:
            return {}
        found = yield from batch_get(self.table, wanted)
        return {s(c, SK): c for c in found}

    def _update(
        self, write: _Write, now_ms: int, *, conditional: bool = True, reset_created: bool = False
    ) -> dict[str, Any]:
        """The UpdateItem of a put. Conditional form: the old item has no chunks of another
        digest and has not expired (else the caller re-reads it and writes unconditionally,
        with ``reset_created`` when the old item had expired)."""
        assert write.stored is not None
        stored, address, item_attrs = write.stored, write.address, write.item
        names: dict[str, str] = {"#cu": CREATED}
        values: dict[str, Any] = {":cu": N(stored.created_us)}
        sets = ["#cu = :cu" if reset_created else "#cu = if_not_exists(#cu, :cu)"]
        removes = []
        for i, name in enumerate(REPLACED):
            names[f"#a{i}"] = name
            if name in item_attrs:
                values[f":a{i}"] = item_attrs[name]
                sets.append(f"#a{i} = :a{i}")
            else:
                removes.append(f"#a{i}")
        update: dict[str, Any] = {
            "TableName": self.table,
            "Key": key(address.pk, address.sk),
            "UpdateExpression": "SET "
            + ", ".join(sets)
            + (" REMOVE " + ", ".join(removes) if removes else ""),
        }
        if conditional:
            names["#nk"], names["#xm"] = NCHUNKS, EXPIRES
            values[":now"] = N(now_ms)
            same_chunks = "attribute_not_exists(#nk)"
            if write.digest is not None:
                names["#dg"] = DIGEST
                values[":dg"] = S(write.digest)
                same_chunks = f"({same_chunks} OR #dg = :dg)"
            update["ConditionExpression"] = (
                f"{same_chunks} AND (attribute_not_exists(#xm) OR #xm > :now)"
            )
        update["ExpressionAttributeNames"] = names
        update["ExpressionAttributeValues"] = values
        return {"Update": update}

    def _delete(self, write: _Write, *, conditional: bool) -> dict[str, Any]:
        """A delete, or the tombstone it leaves with a fallback: an item expired since the
        epoch (no read, search or listing returns it) with ``gn`` set (``sweep`` keeps it,
        and without ``exp`` DynamoDB's TTL does too), so ``adopt`` never writes there."""
        address = write.address
        body: dict[str, Any] = {"TableName": self.table, "Key": key(address.pk, address.sk)}
        if write.tombstone:
            tomb = {**body.pop("Key"), GONE: {"BOOL": True}, EXPIRES: N(0)}
            body["Item"] = tomb
        if conditional:  # an item with chunks is deleted with them, by the caller
            body["ConditionExpression"] = "attribute_not_exists(#nk)"
            body["ExpressionAttributeNames"] = {"#nk": NCHUNKS}
        return {"Put" if write.tombstone else "Delete": body}

    def _register(self, registry_sk: str) -> dict[str, Any]:
        return {
            "Put": {
                "TableName": self.table,
                "Item": {PK: S(self.registry_pk), SK: S(registry_sk)},
            }
        }

    # -- the port --------------------------------------------------------------------

    def setup(self) -> Op[None]:
        yield from setup_table(self.table)  # the saver's table: same schema, TTL on ``exp``
        if (yield from self._names_complete()):
            return
        # a table written before the namespace list: list every namespace its items name,
        # each marked (checked on every list), then say the list is complete
        namespaces = {namespace for namespace, _ in (yield from self._item_namespaces(()))}
        entries = [
            {
                **key(self.names_pk, self.names_sk(namespace)),
                NS: S(dotted_namespace(namespace)),
                VERIFY: {"BOOL": True},
            }
            for namespace in sorted(namespaces)
        ]
        yield from batch_write(self.table, [{"PutRequest": {"Item": e}} for e in entries])
        yield Call("put_item", {"TableName": self.table, "Item": key(self.names_pk, NAMES_MARKER)})
        self.names_complete = True

    def get(
        self, keys: list[ItemKey], refresh: list[bool], now_ms: int, vectors: bool = False
    ) -> Op[list[StoredItem | None]]:
        addresses = [self.address(ns, k) for ns, k in keys]
        wanted = list({(a.pk, a.sk): a for a in addresses if a.fits})
        attrs = [*READ, VECTORS] if vectors else list(READ)
        names = {f"#p{i}": a for i, a in enumerate([PK, SK, *attrs])}
        if len(wanted) == 1:  # one key: GetItem, the cheapest strongly consistent read
            reply = yield Call(
                "get_item",
                {
                    "TableName": self.table,
                    "Key": key(*wanted[0]),
                    "ConsistentRead": True,
                    "ProjectionExpression": ", ".join(names),
                    "ExpressionAttributeNames": names,
                },
            )
            found = [reply["Item"]] if reply.get("Item") else []
        else:
            found = yield from batch_get(
                self.table,
                [key(pk, sk) for pk, sk in wanted],
                projection=", ".join(names),
                names=names,
            )
        found = [i for i in found if GONE not in i]  # a tombstone: no item
        chunks = yield from self._chunks(found)
        by_key = {(s(i, PK), s(i, SK)): self._decode(i, chunks) for i in found}
        results: list[StoredItem | None] = []
        due: dict[tuple[str, str], StoredItem] = {}
        for address, again in zip(addresses, refresh, strict=True):
            stored = by_key.get((address.pk, address.sk))
            if stored is None or not stored.live(now_ms):
                results.append(None)
                continue
            results.append(stored)
            if again and stored.ttl_minutes is not None:
                due[(address.pk, address.sk)] = stored
        yield from self._refresh(due, now_ms)
        return results

    def _refresh(self, due: dict[tuple[str, str], StoredItem], now_ms: int) -> Op[None]:
        """Move the expiry of ``due`` items to now + their TTL (unless changed meanwhile)."""
        actions = []
        for (pk, sk), stored in due.items():
            assert stored.ttl_minutes is not None
            stored.expires_ms = now_ms + int(stored.ttl_minutes * 60_000)
            actions.append(
                {
                    "Update": {
                        "TableName": self.table,
                        "Key": key(pk, sk),
                        "UpdateExpression": "SET #xm = :xm, #exp = :exp",
                        "ConditionExpression": "#uu = :uu AND #xm > :now",
                        "ExpressionAttributeNames": {"#xm": EXPIRES, "#exp": EXP, "#uu": UPDATED},
                        "ExpressionAttributeValues": {
                            ":xm": N(stored.expires_ms),
                            ":exp": N(-(-stored.expires_ms // 1000)),
                            ":uu": N(stored.updated_us),
                            ":now": N(now_ms),
                        },
                    }
                }
            )
        for start in range(0, len(actions), TRANSACT_MAX_ITEMS):
            group = actions[start : start + TRANSACT_MAX_ITEMS]
            yield from transact(group, list(range(len(group))))  # changed meanwhile: skipped

    def put(
        self,
        items: list[StoredItem],
        deletes: list[ItemKey],
        now_ms: int,
        tombstones: bool = False,
    ) -> Op[None]:
        writes = [_Write(self.address(i.namespace, i.key), i, i.namespace) for i in items]
        writes += [_Write(self.address(ns, k), None, ns, tombstone=tombstones) for ns, k in deletes]
        # everything is built (and refused) before the first request
        for write in writes:
            if not write.address.fits and write.stored is not None:
                raise InvalidInput(
                    f"namespace {dotted_namespace(write.stored.namespace)[:60]!r} with key"
                    f" {write.stored.key[:60]!r} is too long for DynamoDB's keys (partition"
                    f" {MAX_PK_BYTES} bytes, sort key {MAX_SK_BYTES} bytes once escaped):"
                    " use shorter or fewer labels"
                )
        writes = [w for w in writes if w.address.fits]  # a too-long key was never stored
        actions: list[dict[str, Any]] = []
        owners: list[int] = []
        new_partitions = {}
        for index, write in enumerate(writes):
            if write.stored is None:
                actions.append(self._delete(write, conditional=True))
            else:
                writes[index] = write = self._encode(write.stored, write.address)
                actions.append(self._update(write, now_ms))
                if write.address.registry_sk not in self.registered:
                    new_partitions[write.address.registry_sk] = index
            owners.append(index)
        # registry items go first: a partition is listed no later than its first item
        registry = [self._register(sk) for sk in new_partitions]
        names = self._names(writes, split=False)
        entries = [self._name(*entry) for entry in names.values()]
        every = registry + entries + actions
        if len(list(_transactions(every, [0] * len(every)))) > 1:
            names = self._names(writes, split=True)  # a failed later group leaves no item
            entries = [self._name(*entry) for entry in names.values()]
        actions = registry + entries + actions
        owners = [-1 - i for i in range(len(registry) + len(names))] + owners
        chunks = [c for w in writes for c in w.chunks]
        if chunks:  # values first, owners after: no reader meets an owner without its chunks
            yield from batch_write(self.table, [{"PutRequest": {"Item": c}} for c in chunks])
        failed: dict[int, Any] = {}
        for group, group_owners in _transactions(actions, owners):
            failed.update((yield from transact(group, group_owners)))
        for index in sorted(i for i in failed if i >= 0):
            yield from self._rewrite(writes[index], now_ms)
        self.registered.update(new_partitions)
        for sk, (_, verify) in names.items():
            self.named[sk] = self.named.get(sk, False) or verify

    def adopt(self, items: list[StoredItem], now_ms: int) -> Op[None]:
        """Each item a conditional ``PutItem`` (``attribute_not_exists`` of the key: no item,
        live or expired, and no tombstone there), after its partition's registry entry, its
        namespace list entry (marked: an adoption refused leaves it checked on list) and its
        chunks (a refused one's are orphans ``sweep`` removes)."""
        writes = [
            self._encode(i, address)
            for i in items
            if (address := self.address(i.namespace, i.key)).fits
        ]
        new = {w.address.registry_sk for w in writes} - self.registered
        names = self._names(writes, split=True)
        meta = [self._register(sk) for sk in new] + [self._name(*e) for e in names.values()]
        for group, owners in _transactions(meta, [0] * len(meta)):
            yield from transact(group, owners)
        chunks = [c for w in writes for c in w.chunks]
        if chunks:
            yield from batch_write(self.table, [{"PutRequest": {"Item": c}} for c in chunks])
        puts = [
            {
                "TableName": self.table,
                "Item": {**w.item, CREATED: N(w.stored.created_us if w.stored else 0)},
                "ConditionExpression": "attribute_not_exists(#pk)",
                "ExpressionAttributeNames": {"#pk": PK},
            }
            for w in writes
        ]
        # one conditional PutItem each, several at once; something there: left as it is
        yield Parallel(tuple(transact([{"Put": put}], [0]) for put in puts))
        self.registered.update(new)
        for sk, (_, verify) in names.items():
            self.named[sk] = self.named.get(sk, False) or verify

    def switch_done(self, mark: bool = False) -> Op[bool]:
        marker = key(self.names_pk, DONE_MARKER)
        if mark:
            yield Call("put_item", {"TableName": self.table, "Item": marker})
        reply = yield Call(
            "get_item", {"TableName": self.table, "Key": marker, "ConsistentRead": True}
        )
        return bool(reply.get("Item"))

    def _names(self, writes: list[_Write], *, split: bool) -> dict[str, tuple[Namespace, bool]]:
        """The namespace list entries ``writes`` need, by sort key: (namespace, marked) for
        each namespace this process has not listed yet, or has listed as sure while a write
        could take its last item away (a delete, a put with a TTL, or any write of a put
        ``split`` over transactions)."""
        wanted: dict[str, tuple[Namespace, bool]] = {}
        for write in writes:
            sk = self.names_sk(write.namespace)
            verify = split or write.stored is None or write.stored.expires_ms is not None
            verify = verify or wanted.get(sk, ((), False))[1]
            if sk not in self.named or (verify and not self.named[sk]):
                wanted[sk] = (write.namespace, verify)
        return wanted

    def _rewrite(self, write: _Write, now_ms: int) -> Op[None]:
        """A put or delete whose condition failed: the old item had chunks (of another
        value) or had expired. Read it, write unconditionally, then drop its old chunks."""
        address = write.address
        result = yield Call(
            "get_item",
            {"TableName": self.table, "Key": key(address.pk, address.sk), "ConsistentRead": True},
        )
        old = result.get("Item")
        if write.stored is None:
            action = self._delete(write, conditional=False)
            yield Call(
                "put_item" if write.tombstone else "delete_item", next(iter(action.values()))
            )
        else:
            expired = old is not None and EXPIRES in old and (n(old, EXPIRES) or 0) <= now_ms
            update = self._update(write, now_ms, conditional=False, reset_created=expired)
            yield Call("update_item", update["Update"])
        if old is not None and old.get(DIGEST, {}).get("S") != write.digest:
            stale = [key(address.pk, sk) for sk in owner_chunks(old)]
            yield from batch_write(self.table, [{"DeleteRequest": {"Key": k}} for k in stale])

    def _each_partition(
        self,
        partitions: list[tuple[str, str]],
        attrs: list[str],
        conditions: tuple[Condition, ...] = (),
    ) -> Op[list[dict[str, Any]]]:
        """Every item of those partitions (``attrs`` of it), the partitions read at once;
        with ``conditions``, DynamoDB leaves out items it can tell fail them."""
        queries = []
        server_filter = filter_expression(conditions)
        for pk, begins in partitions:
            params = query_params(self.table, pk, begins=begins, projection=[*attrs, GONE])
            if server_filter is not None:
                expression, names, values = server_filter
                params["FilterExpression"] = expression
                params["ExpressionAttributeNames"].update(names)
                params["ExpressionAttributeValues"].update(values)
            queries.append(query_all(params))
        pages = yield Parallel(tuple(queries))
        return [item for page in pages for item in page if GONE not in item]

    def search(self, query: SearchQuery) -> Op[list[StoredItem]]:
        attrs = [*READ, VECTORS] if query.vector is not None else list(READ)
        partitions = yield from self._partitions(query.prefix)
        items = yield from self._each_partition(partitions, attrs, query.conditions)
        if query.conditions or query.vector is not None:
            chunks = yield from self._chunks(items)
            page = rank((self._decode(i, chunks) for i in items), query)
        else:  # order needs no value: re-assemble chunked values of the page only
            by_item = {(s(i, NS), s(i, KEY)): i for i in items}
            page = rank((self._decode(i, _NO_VALUE) for i in items), query)
            owners = [by_item[(dotted_namespace(p.namespace), p.key)] for p in page]
            chunks = yield from self._chunks(owners)
            for stored, owner in zip(page, owners, strict=True):
                stored.value = item_value(owner, chunks, stored.namespace, stored.key)
        if query.refresh:
            due = {}
            for stored in page:
                if stored.ttl_minutes is not None:
                    address = self.address(stored.namespace, stored.key)
                    due[(address.pk, address.sk)] = stored
            yield from self._refresh(due, query.now_ms)
        return page

    def namespaces(self, prefix: Namespace, now_ms: int) -> Op[list[Namespace]]:
        complete = yield from self._names_complete()
        labels = _labels(prefix)
        # a prefix longer than a shortened entry's head may not be in it: read the partitions
        if not complete or len(labels.encode("utf-8")) > NAMES_LIMIT - NAMES_DIGEST:
            return (yield from self._namespaces_by_partition(prefix, now_ms))
        params = query_params(
            self.table, self.names_pk, begins=NAMES_KIND + labels, projection=[NS, VERIFY]
        )
        sure: set[Namespace] = set()
        marked: set[Namespace] = set()
        for entry in (yield from query_all(params)):
            namespace = namespace_from_dotted(s(entry, NS))
            if in_prefix(namespace, prefix):
                (marked if VERIFY in entry else sure).add(namespace)
        checks = sorted(marked - sure)
        live = yield Parallel(tuple(self._holds_live(ns, now_ms) for ns in checks))
        return sorted(sure | {ns for ns, alive in zip(checks, live, strict=True) if alive})

    def _names_complete(self) -> Op[bool]:
        """Whether ``setup()`` has built the namespace list (asked once per process)."""
        if self.names_complete is None:
            reply = yield Call(
                "get_item",
                {
                    "TableName": self.table,
                    "Key": key(self.names_pk, NAMES_MARKER),
                    "ConsistentRead": True,
                },
            )
            self.names_complete = bool(reply.get("Item"))
        return self.names_complete

    def _holds_live(self, namespace: Namespace, now_ms: int) -> Op[bool]:
        """Whether ``namespace`` itself (not a descendant) has an item that has not expired:
        its partition's items under it, a page at a time, until one is."""
        address = self.address(namespace, "")
        if not address.fits:
            return False
        params = query_params(self.table, address.pk, begins=address.sk, projection=[])
        params["FilterExpression"] = "#ns = :ns AND (attribute_not_exists(#xm) OR #xm > :now)"
        params["ExpressionAttributeNames"].update({"#ns": NS, "#xm": EXPIRES})
        params["ExpressionAttributeValues"].update(
            {":ns": S(dotted_namespace(namespace)), ":now": N(now_ms)}
        )
        start: dict[str, Any] | None = None
        while True:
            page = yield from query_page(params, start)
            if page.get("Items"):
                return True
            start = page.get("LastEvaluatedKey")
            if not start:
                return False

    def _namespaces_by_partition(self, prefix: Namespace, now_ms: int) -> Op[list[Namespace]]:
        """The namespaces under ``prefix`` from the items of every partition it covers (a table
        whose namespace list ``setup()`` has not built yet)."""
        found: set[Namespace] = set()
        for namespace, expires in (yield from self._item_namespaces(prefix)):
            if expires is None or expires > now_ms:
                found.add(namespace)
        return sorted(found)

    def _item_namespaces(self, prefix: Namespace) -> Op[list[tuple[Namespace, int | None]]]:
        """(namespace, expiry) of every item under ``prefix``, from every partition it covers."""
        found: list[tuple[Namespace, int | None]] = []
        partitions = yield from self._partitions(prefix)
        for item in (yield from self._each_partition(partitions, [NS, EXPIRES])):
            namespace = namespace_from_dotted(s(item, NS))
            if in_prefix(namespace, prefix):
                found.append((namespace, n(item, EXPIRES)))
        return found

    def sweep(self, now_ms: int) -> Op[int]:
        removed = 0
        partitions = yield from self._partitions(())
        for pk, _ in partitions:
            params = query_params(
                self.table, pk, projection=[EXPIRES, NCHUNKS, DIGEST, WRITTEN, SIZE]
            )
            # tombstones (``gn``) are expired since the epoch and kept
            params["FilterExpression"] = (
                "(#xm <= :now AND attribute_not_exists(#gn)) OR begins_with(#sk, :k)"
            )
            params["ExpressionAttributeNames"].update({"#xm": EXPIRES, "#sk": SK, "#gn": GONE})
            params["ExpressionAttributeValues"].update({":now": N(now_ms), ":k": S("k#")})
            items = yield from query_all(params)
            expired = [i for i in items if s(i, SK).startswith(ITEM_KIND)]
            doomed = {s(i, SK) for i in expired}
            doomed.update(sk for i in expired for sk in owner_chunks(i))
            # chunks of a value being written have no owner yet: only old orphans go
            for chunk in items:
                sk = s(chunk, SK)
                if sk.startswith("k#") and sk not in doomed:
                    if (n(chunk, WRITTEN) or 0) < now_ms - ORPHAN_AGE_MS:
                        parsed = dkeys.parse_sk(sk)
                        digest = yield from self._digest(pk, parsed.owner)
                        if digest != parsed.digest:
                            doomed.add(sk)
            yield from batch_write(
                self.table, [{"DeleteRequest": {"Key": key(pk, sk)}} for sk in sorted(doomed)]
            )
            removed += len(expired)
        return removed

    def _digest(self, pk: str, sk: str) -> Op[str | None]:
        """The chunk digest of the owner item ``sk`` (None when absent or inline)."""
        result = yield Call(
            "get_item",
            {
                "TableName": self.table,
                "Key": key(pk, sk),
                "ConsistentRead": True,
                "ProjectionExpression": "#dg",
                "ExpressionAttributeNames": {"#dg": DIGEST},
            },
        )
        item = result.get("Item") or {}
        return s(item, DIGEST) if DIGEST in item else None


#: passed instead of chunks when the value is not needed (ordering only)
_NO_VALUE: dict[str, dict[str, Any]] = {}


def _transactions(
    actions: list[dict[str, Any]], owners: list[int]
) -> Iterator[tuple[list[dict[str, Any]], list[int]]]:
    """Groups of at most 100 actions and about 4 MB."""
    group: list[dict[str, Any]] = []
    group_owners: list[int] = []
    size = 0
    for action, owner in zip(actions, owners, strict=True):
        body = next(iter(action.values()))
        weight = sum(size_of({k: v}) for k, v in body.get("ExpressionAttributeValues", {}).items())
        if group and (len(group) >= TRANSACT_MAX_ITEMS or size + weight > TRANSACT_MAX_BYTES):
            yield group, group_owners
            group, group_owners, size = [], [], 0
        group.append(action)
        group_owners.append(owner)
        size += weight
    if group:
        yield group, group_owners


# --------------------------------------------------------------------------- public classes


class DynamoDBStore(OnDynamoDB, SyncStore):
    """LangGraph ``BaseStore`` on a boto3 low-level DynamoDB client.

    Options: ``index``, ``ttl``, ``max_key_bytes`` (see ``StoreBase``), ``key_prefix``
    (stores sharing a table use different ones), ``shard_labels`` (leading namespace labels
    that pick the partition, default 2) and ``compress`` (zlib level for values from 4 KiB).
    """

    port_type = DynamoDBStorePort


class AsyncDynamoDBStore(OnDynamoDB, AsyncStore):
    """LangGraph ``BaseStore`` on an aiobotocore DynamoDB client (native asyncio)."""

    port_type = DynamoDBStorePort
