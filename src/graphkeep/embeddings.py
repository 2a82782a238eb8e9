"""A small deterministic text embedding for demos, tests and benchmarks: no model, no network.

:func:`hashing_embeddings` returns a callable for a store's ``index={"embed": ...}``: each
word (lower-cased ``\\w+`` run) adds a weight to one of ``dims`` buckets chosen by its
SHA-256, so texts that share words are close under cosine similarity. It is not a language
model; it stands in for one where the same input must always give the same vector.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Sequence

_WORD = re.compile(r"\w+")


def hashing_embeddings(dims: int = 64) -> Callable[[Sequence[str]], list[list[float]]]:
    """An ``embed_documents``-style function mapping texts to ``dims`` floats each."""

    def embed(texts: Sequence[str]) -> list[list[float]]:
        vectors = []
        for text in texts:
            vector = [0.0] * dims
            for word in _WORD.findall(text.lower()):
                digest = int.from_bytes(hashlib.sha256(word.encode()).digest()[:8], "big")
                vector[digest % dims] += 1.0 + (digest >> 32) % 3
            vectors.append(vector)
        return vectors

    return embed
