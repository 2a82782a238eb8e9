"""What store cases share: a small deterministic embedding, index configs, assertions.

`embed_text` is a hashing bag of words: each lower-cased word adds 1.0 to one of `DIMS`
dimensions chosen by a hash of the word, so texts sharing words score close together and
every number is reproducible anywhere. `CountingEmbeddings` (a LangChain `Embeddings`)
records what it was asked to embed; `embed_texts` / `aembed_texts` are the same model as
plain sync and async callables.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Sequence
from typing import Any

from langchain_core.embeddings import Embeddings

DIMS = 32
WORD = re.compile(r"\w+")


def embed_text(text: str) -> list[float]:
    vector = [0.0] * DIMS
    for word in WORD.findall(text.lower()):
        digest = hashlib.blake2b(word.encode("utf-8"), digest_size=4).digest()
        vector[int.from_bytes(digest, "little") % DIMS] += 1.0
    return vector


def embed_texts(texts: Sequence[str]) -> list[list[float]]:
    return [embed_text(t) for t in texts]


async def aembed_texts(texts: Sequence[str]) -> list[list[float]]:
    return embed_texts(texts)


class CountingEmbeddings(Embeddings):
    """The hashing model, recording every document and query text it embeds."""

    def __init__(self, dims: int = DIMS) -> None:
        self.dims = dims
        self.documents: list[str] = []
        self.queries: list[str] = []

    def _shaped(self, text: str) -> list[float]:
        vector = embed_text(text)
        return (vector + [0.0] * self.dims)[: self.dims]

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.documents.extend(texts)
        return [self._shaped(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        self.queries.append(text)
        return self._shaped(text)


def index(
    fields: list[str] | None = None, distance: str = "cosine", embed: Any = None
) -> dict[str, Any]:
    config: dict[str, Any] = {
        "dims": DIMS,
        "embed": CountingEmbeddings() if embed is None else embed,
        "distance_type": distance,
    }
    if fields is not None:
        config["fields"] = fields
    return config


def expected_score(query: str, text: str, distance: str) -> float:
    """The score PostgresStore gives `text` for `query`, computed directly."""
    q, v = embed_text(query), embed_text(text)
    dot = sum(a * b for a, b in zip(q, v, strict=True))
    if distance == "inner_product":
        return dot
    if distance == "l2":
        return -math.sqrt(sum((a - b) ** 2 for a, b in zip(q, v, strict=True)))
    norm = math.sqrt(sum(a * a for a in q)) * math.sqrt(sum(b * b for b in v))
    return dot / norm if norm else 0.0


def keys(items: Sequence[Any]) -> list[str]:
    return [item.key for item in items]


def key_set(items: Sequence[Any]) -> set[str]:
    return {item.key for item in items}


def namespaces(items: Sequence[Any]) -> set[tuple[str, ...]]:
    return {item.namespace for item in items}
