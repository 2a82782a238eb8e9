"""The documentation against the code: every test RELIABILITY.md names exists, and the facts
README.md, CHANGELOG.md and docs/ state (key counts, options, URL schemes, errors, commands,
import paths, links, files, supported versions) are the code's."""

from __future__ import annotations

import builtins
import contextlib
import importlib
import io
import re
from pathlib import Path

from graphkeep.port import telemetry

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


# -- README.md and docs/ against the code ---------------------------------------------

DOCS = ROOT / "docs"
NUMBERS = {"six": 6, "seven": 7, "eight": 8, "nine": 9, "ten": 10}


def pages() -> dict[str, str]:
    """README.md and every page of docs/, by their path from the repository root."""
    found = {"README.md": (ROOT / "README.md").read_text()}
    for page in sorted(DOCS.rglob("*.md")):
        found[str(page.relative_to(ROOT))] = page.read_text()
    return found


def section(text: str, heading: str) -> str:
    """The text under the first heading named ``heading`` (any level), up to the next one."""
    match = re.search(rf"^#+ {re.escape(heading)}\n(.*?)(?=^#+ |\Z)", text, re.M | re.S)
    assert match, f"no section {heading!r}"
    return match.group(1)


def names(text: str) -> set[str]:
    """Every `backticked` identifier in ``text``."""
    return set(re.findall(r"`([a-z_][a-z0-9_]*)`", text))


def resolve(path: str) -> object:
    """The module or object a dotted ``graphkeep.…`` path names (ImportError /
    AttributeError when it names nothing)."""
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found: object = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attribute in parts[cut:]:
            found = getattr(found, attribute)
        return found
    raise ImportError(path)


def test_the_redis_thread_key_count_in_the_docs_is_the_codes() -> None:
    from graphkeep.backends.redis.checkpoint import RedisCheckpointPort
    from graphkeep.backends.redis.checkpoint_scripts import THREAD_KEYS

    text = (DOCS / "backends.md").read_text()
    match = re.search(r"A thread is (\w+)\s+keys", text)
    assert match, "docs/backends.md no longer says how many keys a Redis thread is"
    assert NUMBERS[match.group(1)] == THREAD_KEYS == len(RedisCheckpointPort().thread_keys("t"))


def test_the_redis_store_partition_key_count_in_the_docs_is_the_codes() -> None:
    from graphkeep.backends.redis.store import RedisStorePort

    text = (DOCS / "store.md").read_text()
    match = re.search(r"a partition is (\w+)\s+keys", text)
    assert match, "docs/store.md no longer says how many keys a Redis store partition is"
    assert NUMBERS[match.group(1)] == len(RedisStorePort().keys(("users",)))


#: ``graphkeep.a.b`` (not ``x.graphkeep.a``, not the manifest tag ``graphkeep.list/1``)
DOTTED = re.compile(r"(?<![\w.])graphkeep(?:\.[A-Za-z_]\w*)+(?![\w/])")
FROM_IMPORT = re.compile(r"^\s*from (graphkeep[\w.]*) import ([\w, ]+)$", re.M)


#: metric and attribute names (``graphkeep.resume.failures``) look like paths but are not
TELEMETRY_NAMES = frozenset(telemetry.METRICS) | frozenset(telemetry.ATTRIBUTES)


def test_every_graphkeep_path_the_docs_show_imports() -> None:
    missing = []
    for page, text in pages().items():
        text = re.sub(r"\]\([^)]*\)", "]", text)  # link targets are files, not paths
        shown = set(DOTTED.findall(text))
        for module, imported in FROM_IMPORT.findall(text):
            shown |= {f"{module}.{name.strip()}" for name in imported.split(",")}
        for path in sorted(shown - TELEMETRY_NAMES):
            try:
                resolve(path)
            except (ImportError, AttributeError) as exc:
                missing.append(f"{page}: {path} ({exc})")
    assert not missing, f"the docs name paths that do not import: {missing}"


def accepted(connect: str, url: str) -> set[str]:
    """The options ``graphkeep.<connect>(url, ...)`` accepts, as its refusal lists them."""
    import graphkeep
    from graphkeep.errors import ConfigurationError

    opener = getattr(graphkeep, connect)
    try:
        with opener(url, not_an_option=1):
            pass
    except ConfigurationError as exc:
        return set(str(exc).split("accepted: ", 1)[1].split(", "))
    raise AssertionError(f"{connect} accepted an unknown option")


URLS = {
    "redis": "redis://127.0.0.1:1/0",
    "mongodb": "mongodb://127.0.0.1:1/x",
    "dynamodb": "dynamodb://t?region=us-east-1",
}


def test_the_saver_options_the_docs_list_are_the_ones_connect_accepts() -> None:
    text = (DOCS / "backends.md").read_text()
    common = set(re.findall(r"^\| `(\w+)` \|", section(text, "Options (every backend)"), re.M))
    own = {
        "redis": set(),
        "mongodb": names(section(text, "MongoDB").split("Options:", 1)[1].split(".", 1)[0]),
        "dynamodb": names(section(text, "DynamoDB").split("Options:", 1)[1].split(".", 1)[0]),
    }
    for backend, url in URLS.items():
        assert common | own[backend] == accepted("connect", url), backend


def test_the_store_options_the_docs_list_are_the_ones_connect_store_accepts() -> None:
    rows = re.findall(
        r"^\| *(.*?) *\| *(.*?) *\| *(.*?) *\|$", (DOCS / "store.md").read_text(), re.M
    )
    common = {first.strip("`") for first, _, _ in rows if re.fullmatch(r"`\w+`", first)}
    own = {
        first.lower(): names(meaning)
        for first, _, meaning in rows
        if first in ("Redis", "MongoDB", "DynamoDB")
    }
    for backend, url in URLS.items():
        assert common | own[backend] == accepted("connect_store", url), backend


def test_the_cache_and_event_log_options_the_docs_list_are_the_ones_connect_accepts() -> None:
    cache = (DOCS / "cache.md").read_text().split("Options: ", 1)[1].split("\n\n", 1)[0]
    cache = " ".join(cache.split())
    common, _, own = cache.partition("; MongoDB adds ")
    mongodb, _, dynamodb = own.partition(", DynamoDB ")
    documented = {"redis": names(common), "mongodb": names(common) | names(mongodb)}
    documented["dynamodb"] = names(common) | names(dynamodb)
    for backend, url in URLS.items():
        assert documented[backend] == accepted("connect_cache", url), backend

    events = (DOCS / "live.md").read_text().split("Options: `ttl`", 1)[1].split("\n\n", 1)[0]
    events = " ".join(events.split())
    common, _, own = ("`ttl`" + events).partition("and the backend's own (")
    mongodb, _, dynamodb = own.partition(";")
    documented = {"redis": names(common), "mongodb": names(common) | names(mongodb)}
    documented["dynamodb"] = names(common) | names(dynamodb)
    for backend, url in URLS.items():
        assert documented[backend] == accepted("connect_events", url), backend


def test_the_url_schemes_the_docs_list_are_the_ones_connect_knows() -> None:
    import graphkeep

    table = section((DOCS / "backends.md").read_text(), "Connecting")
    schemes = set(re.findall(r"`([a-z+]+)://", table))
    assert schemes == set(graphkeep.BACKENDS)


def test_the_errors_page_names_every_error_class_with_its_base() -> None:
    import graphkeep.errors as errors

    rows = re.findall(r"^\| `(\w+)` \| *`?(\w*)`? *\|", (DOCS / "errors.md").read_text(), re.M)
    classes = {
        name
        for name in errors.__all__
        if isinstance(getattr(errors, name), type)
        and issubclass(getattr(errors, name), errors.GraphkeepError)
        and name != "GraphkeepError"
    }
    assert {name for name, _ in rows} == classes
    for name, base in rows:
        if base:
            assert issubclass(getattr(errors, name), resolve_base(errors, base)), name


def resolve_base(errors: object, name: str) -> type:
    found = getattr(errors, name, None) or getattr(builtins, name)
    assert isinstance(found, type)
    return found


def test_every_command_the_cli_page_documents_exists() -> None:
    from graphkeep.cli import main

    text = (DOCS / "cli.md").read_text()
    commands = [[c] for c in re.findall(r"^## `graphkeep (\w+)`", text, re.M)]
    commands += [["store", c] for c in sorted(set(re.findall(r"\$ graphkeep store (\w+)", text)))]
    assert len(commands) > 10
    for argv in commands:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            assert main([*argv, "--help"]) == 0, argv


def test_the_readme_shows_the_two_set_up_commands_and_dev_runs_both() -> None:
    text = section((ROOT / "README.md").read_text(), "Two commands for a fresh machine")
    assert re.findall(r"^(\./dev \w+)", text, re.M) == ["./dev demo", "./dev test"]
    dev = (ROOT / "dev").read_text()
    assert re.search(r"^\s+demo\) ", dev, re.M) and re.search(r"^\s+test\) ", dev, re.M)


def slug(heading: str) -> str:
    """A heading's anchor as MkDocs and GitHub make it (for the headings used here)."""
    text = re.sub(r"[^\w\s-]", "", heading.strip().lower())
    return re.sub(r"[\s]+", "-", text)


def test_every_link_of_the_readme_into_docs_finds_its_page_and_anchor() -> None:
    links = re.findall(r"\]\((docs/[^)#\s]+)(?:#([\w-]+))?\)", (ROOT / "README.md").read_text())
    assert len(links) > 10
    for target, anchor in links:
        page = ROOT / target
        assert page.is_file(), target
        if anchor:
            headings = re.findall(r"^#+ (.+)$", page.read_text(), re.M)
            assert anchor in {slug(h) for h in headings}, f"{target}#{anchor}"


def test_the_files_the_architecture_page_names_exist() -> None:
    text = (DOCS / "architecture.md").read_text()
    paths = {p for p in re.findall(r"`([\w./]+/[\w./]*)`", text) if "<" not in p}
    assert len(paths) > 10
    missing = [
        p
        for p in sorted(paths)
        if not ((ROOT / "src" / "graphkeep" / p).exists() or (ROOT / p).exists())
    ]
    assert not missing, f"docs/architecture.md names paths that do not exist: {missing}"


def test_the_observability_page_names_every_metric_and_attribute_the_code_records() -> None:
    text = (DOCS / "observability.md").read_text()
    for name in (*telemetry.METRICS, *telemetry.ATTRIBUTES):
        assert f"`{name}`" in text, name
    buckets = ", ".join(f"{b:g}" for b in telemetry.DURATION_BUCKETS)
    assert f"`[{buckets}]`" in text


def test_the_agent_server_page_lists_every_variable_graphkeep_server_reads() -> None:
    from graphkeep.server import VARIABLES

    table = section((DOCS / "agent-server.md").read_text(), "Environment")
    listed = set(re.findall(r"^\| `(\w+)` \|", table, re.M))
    assert listed == set(VARIABLES)
    readme = section((ROOT / "README.md").read_text(), "Deploy on LangGraph Agent Server")
    assert {v for v in VARIABLES if v.startswith("GRAPHKEEP_")} <= set(
        re.findall(r"`(\w+)`", readme)
    )


# -- the versions README.md, docs/compatibility.md and CHANGELOG.md state ---------------

#: ``CPython 3.10–3.13`` (an en dash, as the pages write ranges)
PYTHON_RANGE = re.compile(r"CPython (3\.\d+)–(3\.\d+)")


def minor(version: str) -> int:
    return int(version.split(".")[1])


def test_the_python_range_is_the_same_in_the_pages_the_package_and_the_workflow() -> None:
    pyproject = (ROOT / "pyproject.toml").read_text()
    floor = re.search(r'^requires-python = ">=(3\.\d+)"$', pyproject, re.M)
    assert floor, "pyproject.toml no longer says requires-python = >=3.x"
    # the workflow's jobs between them (the suite per backend, the pythons job) run each one
    matrices = re.findall(
        r"^\s+python: \[(.*?)\]$", (ROOT / ".github/workflows/ci.yml").read_text(), re.M
    )
    assert matrices, "the CI workflow no longer has a python matrix"
    tested = sorted({minor(v.strip(' "')) for m in matrices for v in m.split(",")})
    for page in ("README.md", "docs/compatibility.md"):
        stated = PYTHON_RANGE.findall((ROOT / page).read_text())
        assert stated, f"{page} no longer states the supported CPython range"
        for low, high in stated:
            assert low == floor.group(1), page
            assert list(range(minor(low), minor(high) + 1)) == tested, page


def test_the_langgraph_versions_the_compatibility_page_names_are_the_packages() -> None:
    text = " ".join((DOCS / "compatibility.md").read_text().split())
    pyproject = (ROOT / "pyproject.toml").read_text()
    required = re.search(r'"(langgraph-checkpoint>=[^"]+)"', pyproject)
    assert required and f"`{required.group(1)}`" in text
    pins = dict(re.findall(r"^([\w-]+)==(\S+)$", (ROOT / "constraints.txt").read_text(), re.M))
    for package in ("langgraph", "langgraph-checkpoint", "langgraph-api"):
        assert f"{package} {pins[package]}" in text, package
    conformance = pins["langgraph-checkpoint-conformance"]
    assert f"`langgraph-checkpoint-conformance` {conformance}" in text


def test_the_changelog_has_the_version_the_package_carries() -> None:
    version = re.search(r'^version = "([^"]+)"$', (ROOT / "pyproject.toml").read_text(), re.M)
    assert version
    headings = re.findall(r"^## \[([^\]]+)\]", (ROOT / "CHANGELOG.md").read_text(), re.M)
    assert headings[0] == "Unreleased"
    assert version.group(1) in headings
    assert f"| {version.group(1)} |" in (DOCS / "compatibility.md").read_text()
