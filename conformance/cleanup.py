"""The key prefixes a row of the matrix made, and what they named on a MongoDB server dropped
when the row ends: a MongoDB server does not mind thousands of collections, FerretDB does
(each request costs more with every collection of its database), and the matrix runs beside
the test suite on the same server (``./dev test``). Other processes' prefixes are not ours."""

from __future__ import annotations

from urllib.parse import urlsplit

#: the prefixes made since the running row started
MADE: list[str] = []


def made(prefix: str) -> str:
    """``prefix``, remembered for :func:`drop_made`."""
    MADE.append(prefix)
    return prefix


def drop_made(url: str) -> None:
    """On a MongoDB ``url``: drop every collection named by a prefix made since the last call
    (in any database); forget them either way."""
    prefixes = tuple(MADE)
    MADE.clear()
    if prefixes and urlsplit(url).scheme in ("mongodb", "mongodb+srv"):
        drop_prefixed(url, prefixes)


def drop_prefixed(url: str, prefixes: tuple[str, ...]) -> None:
    """Drop every collection of the MongoDB server at ``url`` whose name starts with one of
    ``prefixes``, in any database but the server's own (the matrix's rows and the test
    suite's modules, tests/conftest.py, both clean up with it)."""
    import pymongo

    with pymongo.MongoClient(url, serverSelectionTimeoutMS=10_000) as client:
        for db_name in client.list_database_names():
            if db_name in ("admin", "config", "local"):
                continue
            db = client[db_name]
            for name in db.list_collection_names():
                if name.startswith(prefixes):
                    db.drop_collection(name)
