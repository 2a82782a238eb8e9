"""Key layout of the DynamoDB table: one partition per thread, sort keys per record kind.

Every item of a thread shares the partition key ``<prefix>#1#<thread>`` (``1`` is the
storage format). Sort keys (``sk``)::

    c#<ns>#<id>#                          checkpoint head (parent, versions, payload)
    c#<ns>#<id>#w#<task>#<idx>            pending write (idx offset so negatives sort first)
    b#<ns>#<channel>#<version>            channel value, stored once per version
    b#<ns>#__graphkeep.element__#<key>    a list element (key: 16 hex epoch + 8 hex seq, never
                                          shortened: one epoch's elements are a key range)
    k#<owner sk>#<digest>#<nnnnn>         chunk n of an oversized owner item
    l#                                    the thread's lease (``saver.lock``) and fencing token

So one Query over ``c#<ns>#<id>#`` returns a checkpoint with all its writes, the newest
checkpoint of a namespace is the first head of a descending Query over ``c#<ns>#`` (its writes
come just before it), and ``before`` is ``BETWEEN c#<ns># AND c#<ns>#<before>``.

Components are escaped so that ``#`` never appears inside one and byte order is kept:
every character up to ``$`` (U+0024) becomes ``$`` followed by the character plus 0x40
(``#`` -> ``$c``, ``$`` -> ``$d``, space -> ``$`````). Escaped and plain characters keep their
relative order and ``#`` sorts below every escaped form, so keys compare like the tuples they
encode (DynamoDB compares sort keys as UTF-8 bytes, which is code-point order). Components too
long for DynamoDB's key limits (partition key 2048 bytes, sort key 1024 bytes) keep an
order-preserving head plus ``$~`` and a SHA-256 digest (``$~`` never occurs in an escaped
string); such items also carry their raw names in the ``rw`` attribute.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from graphkeep.errors import ConfigurationError

FORMAT = "1"
SEP = "#"
#: a thread component longer than this (in bytes, escaped) is shortened with a digest
THREAD_LIMIT = 1500
#: the same for namespace, checkpoint id, task id, channel and version components
PART_LIMIT = 256
PREFIX_LIMIT = 256
HASH_MARK = "$~"
#: written ``idx`` = idx + IDX_OFFSET, zero padded: numeric order incl. negative specials
IDX_OFFSET = 1 << 63
IDX_WIDTH = 20
LOCK_SK = "l#"
#: the thread's settled mark (``fallback=``: never read from the fallback again); like the
#: lease item, ``delete_thread`` leaves it
SETTLED_SK = "s#"

_LOW = re.compile(r"[\x00-\x24]")
_ESCAPED = re.compile(r"\$(.)", re.DOTALL)


def escape(text: str) -> str:
    """Order-preserving escape: the result never contains ``#`` (nor ``$~``)."""
    return _LOW.sub(lambda m: "$" + chr(ord(m.group()) + 0x40), text)


def unescape(text: str) -> str:
    return _ESCAPED.sub(lambda m: chr(ord(m.group(1)) - 0x40), text)


def part(text: str, limit: int = PART_LIMIT) -> tuple[str, bool]:
    """The key form of one name, and whether it had to be shortened (then it's not reversible)."""
    encoded = escape(text)
    if len(encoded.encode("utf-8")) <= limit:
        return encoded, False
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()[:40]
    budget = limit - len(HASH_MARK) - len(digest)
    head: list[str] = []
    used = 0
    i = 0
    while i < len(encoded):
        code = encoded[i : i + 2] if encoded[i] == "$" else encoded[i]
        size = len(code.encode("utf-8"))
        if used + size > budget:
            break
        head.append(code)
        used += size
        i += len(code)
    return "".join(head) + HASH_MARK + digest, True


def decode(component: str) -> str | None:
    """A component back to its name; ``None`` when it was shortened (read ``rw`` instead)."""
    return None if HASH_MARK in component else unescape(component)


def check_prefix(prefix: str) -> str:
    """The escaped key prefix (apps sharing a table use different prefixes)."""
    if not isinstance(prefix, str) or not prefix:
        raise ConfigurationError("key_prefix must be a non-empty string")
    if "\x00" in prefix:
        raise ConfigurationError("key_prefix must not contain NUL")
    encoded = escape(prefix)
    if len(encoded.encode("utf-8")) > PREFIX_LIMIT:
        raise ConfigurationError(f"key_prefix is too long (at most {PREFIX_LIMIT} bytes)")
    return encoded


def partition(prefix: str, thread_part: str) -> str:
    return f"{prefix}{SEP}{FORMAT}{SEP}{thread_part}"


def partition_prefix(prefix: str) -> str:
    """What every partition key of this prefix (and format) starts with."""
    return f"{prefix}{SEP}{FORMAT}{SEP}"


def thread_part_of(pk: str) -> str:
    return pk.split(SEP, 2)[2]


def head_sk(ns: str, checkpoint_id: str) -> str:
    return f"c{SEP}{ns}{SEP}{checkpoint_id}{SEP}"


def namespace_prefix(ns: str) -> str:
    return f"c{SEP}{ns}{SEP}"


def namespace_end(ns: str) -> str:
    """Inclusive upper bound of ``BETWEEN`` over every checkpoint key of one namespace.

    ``$`` is the character after ``#``, so every ``c#<ns>#...`` key sorts below it, and no key
    equals it; keys of a namespace extending ``<ns>`` (``c#<ns>$c#...``) are longer, thus above.
    """
    return f"c{SEP}{ns}$"


def before_bound(ns: str, checkpoint_id: str) -> str:
    """Inclusive upper bound of ``BETWEEN``: every key of ids below ``checkpoint_id``, none of it.

    No key equals it (every checkpoint key continues with ``#``), and keys of ids that
    extend ``checkpoint_id`` continue with a character above ``#``.
    """
    return f"c{SEP}{ns}{SEP}{checkpoint_id}"


def through_bound(ns: str, checkpoint_id: str) -> str:
    """Inclusive upper bound covering the checkpoint ``checkpoint_id`` and all its writes."""
    return f"c{SEP}{ns}{SEP}{checkpoint_id}{SEP}~"


def write_sk(ns: str, checkpoint_id: str, task_id: str, idx: int) -> str:
    offset = f"{idx + IDX_OFFSET:0{IDX_WIDTH}d}"
    return f"c{SEP}{ns}{SEP}{checkpoint_id}{SEP}w{SEP}{task_id}{SEP}{offset}"


def blob_sk(ns: str, channel: str, version: str) -> str:
    return f"b{SEP}{ns}{SEP}{channel}{SEP}{version}"


def chunk_sk(owner_sk: str, digest: str, index: int) -> str:
    return f"k{SEP}{owner_sk}{SEP}{digest}{SEP}{index:05d}"


@dataclass(frozen=True, slots=True)
class ParsedKey:
    """A sort key taken apart (components still escaped)."""

    kind: str  # "c" head, "w" write, "b" blob, "k" chunk, "?" unknown
    ns: str = ""
    checkpoint_id: str = ""
    task_id: str = ""
    idx: int = 0
    channel: str = ""
    version: str = ""
    owner: str = ""
    digest: str = ""

    @property
    def collection(self) -> tuple[str, str]:
        return self.ns, self.checkpoint_id


def parse_sk(sk: str) -> ParsedKey:
    if sk.startswith("k#"):
        owner, digest, _index = sk[2:].rsplit(SEP, 2)
        return ParsedKey("k", owner=owner, digest=digest)
    fields = sk.split(SEP)
    if fields[0] == "c":
        if len(fields) == 4 and fields[3] == "":
            return ParsedKey("c", ns=fields[1], checkpoint_id=fields[2])
        if len(fields) == 6 and fields[3] == "w":
            return ParsedKey(
                "w",
                ns=fields[1],
                checkpoint_id=fields[2],
                task_id=fields[4],
                idx=int(fields[5]) - IDX_OFFSET,
            )
    elif fields[0] == "b" and len(fields) == 4:
        return ParsedKey("b", ns=fields[1], channel=fields[2], version=fields[3])
    return ParsedKey("?")
