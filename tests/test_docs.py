"""The guarantees in RELIABILITY.md name tests: every name must be a test that exists."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: `tests/x.py::test_name` or, continuing the last file named, `::test_name`
REFERENCE = re.compile(r"`(tests/[\w/]+\.py)?::(test_\w+)")


def references(text: str) -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    current: str | None = None
    for match in REFERENCE.finditer(text):
        current = match.group(1) or current
        assert current is not None, f"`::{match.group(2)}` names no file before it"
        found.append((current, match.group(2)))
    return found


def test_every_test_named_in_reliability_md_exists() -> None:
    named = references((ROOT / "RELIABILITY.md").read_text())
    assert len(named) > 40
    missing = [
        f"{path}::{name}"
        for path, name in named
        if not re.search(rf"^(async )?def {name}\b", (ROOT / path).read_text(), re.MULTILINE)
    ]
    assert not missing, f"RELIABILITY.md names tests that do not exist: {missing}"


def test_the_reference_reader_follows_the_last_file_named() -> None:
    text = "`tests/a.py::test_one`, `::test_two`; `tests/b/c.py::test_three`"
    assert references(text) == [
        ("tests/a.py", "test_one"),
        ("tests/a.py", "test_two"),
        ("tests/b/c.py", "test_three"),
    ]
