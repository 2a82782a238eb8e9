"""The project's shape limits (issue 43, "the lean step"): the README a front door of at most 200
lines, `./dev` at most 400 lines (the rest is Python under tools/), no module in src/ over 800."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def lines(path: Path) -> int:
    return len(path.read_text().splitlines())


def test_the_readme_is_at_most_200_lines() -> None:
    assert lines(ROOT / "README.md") <= 200


def test_dev_is_at_most_400_lines() -> None:
    assert lines(ROOT / "dev") <= 400


def test_no_module_in_src_is_over_800_lines() -> None:
    over = {
        str(path.relative_to(ROOT)): n
        for path in sorted((ROOT / "src").rglob("*.py"))
        if (n := lines(path)) > 800
    }
    assert not over, over
