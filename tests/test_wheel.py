"""The wheel built from this tree holds the library, its ``py.typed`` and its metadata, nothing
else: not the bench, the conformance matrix, the tests or the tools beside ``src/``."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIBRARY = ROOT / "src" / "graphkeep"
#: a checkout's caches and build products, left out of the copy a wheel is built from
NOT_SOURCES = shutil.ignore_patterns(
    ".*", "__pycache__", "*.egg-info", "build", "dist", "node_modules", "bench-results", "site"
)


def build_wheel(tree: Path, out: Path) -> Path:
    """The wheel of ``tree`` as pip would build it (setuptools' PEP 517 backend), offline: with
    the setuptools installed here, no build isolation. Built from a copy, as setuptools writes
    into the tree it builds, and its ``build/lib`` keeps the files of earlier builds."""
    copy = out / "tree"
    shutil.copytree(tree, copy, ignore=NOT_SOURCES)
    build = "import sys; from setuptools import build_meta; build_meta.build_wheel(sys.argv[1])"
    done = subprocess.run(
        [sys.executable, "-c", build, str(out)],
        cwd=copy,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    (wheel,) = out.glob("*.whl")
    return wheel


def unexpected(wheel: Path) -> list[str]:
    """What ``wheel`` holds besides this tree's library (``src/graphkeep``, without a
    ``bench/``) and its own ``.dist-info``, and which library files it lacks."""
    match = re.fullmatch(r"graphkeep-([^-]+)-py3-none-any\.whl", wheel.name)
    if match is None:
        return [f"{wheel.name}: not a pure-Python wheel of graphkeep"]
    metadata = f"graphkeep-{match.group(1)}.dist-info/"
    names = zipfile.ZipFile(wheel).namelist()
    found = [
        name
        for name in names
        if not name.startswith(metadata)
        and not (
            name.startswith("graphkeep/")
            and not name.startswith("graphkeep/bench/")
            and (LIBRARY.parent / name).is_file()
        )
    ]
    library = [
        path.relative_to(LIBRARY.parent).as_posix()
        for path in LIBRARY.rglob("*")
        if path.is_file() and "__pycache__" not in path.parts
    ]
    missing = [f"missing {name}" for name in sorted(library) if name not in names]
    return sorted(found) + missing


def test_the_wheel_holds_the_library_its_py_typed_and_its_metadata_alone(tmp_path: Path) -> None:
    assert unexpected(build_wheel(ROOT, tmp_path)) == []


def test_a_module_left_in_the_bench_or_a_stray_package_fails_the_wheel_check(
    tmp_path: Path,
) -> None:
    tree = tmp_path / "tree"
    shutil.copytree(ROOT, tree, ignore=NOT_SOURCES)
    (tree / "src" / "graphkeep" / "bench").mkdir()
    (tree / "src" / "graphkeep" / "bench" / "__init__.py").write_text('"""Left behind."""\n')
    (tree / "src" / "stray").mkdir()
    (tree / "src" / "stray" / "__init__.py").write_text('"""Not the library."""\n')
    (tree / "src" / "graphkeep" / "embeddings.py").unlink()
    out = tmp_path / "out"
    out.mkdir()
    assert unexpected(build_wheel(tree, out)) == [
        "graphkeep/bench/__init__.py",
        "stray/__init__.py",
        "missing graphkeep/embeddings.py",
    ]
