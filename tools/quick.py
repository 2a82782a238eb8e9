"""``./dev test --quick``: the inner loop's selection of the suite (docs/development.md).

One backend per product family — single-node Redis, MongoDB, DynamoDB — sync and async as
always: the tests ``graphkeep.testing`` parametrizes over backends run on those three
(``--graphkeep-backends``), the tests marked for the others (Redis Cluster, Valkey, a Valkey
Cluster) are left out by marker, and so are the tests that need what only the full run
installs or starts (LEFT_OUT: the rivals' side venvs and the bench's whole-suite runs, the
LangGraph 1.1 side venv, Chromium, the Node AG-UI client, Redis Stack, a wheel build) and the
slowest few (whole pytest sessions, server restarts, 500 threads, a 200-thread store,
two-process endpoints). Not the conformance matrix either (``./dev conformance --backend
redis``, or name ``conformance`` as an argument). Never what CI runs: ``.ci/run`` runs
``./dev test``, every backend, every test.

    python tools/quick.py             pytest's arguments of the quick selection, one per line
    python tools/quick.py --explain   what it leaves out and why

``./dev test --quick [pytest args]`` puts the arguments it is given after these: a ``-m`` or
``-k`` of your own replaces the quick one (pytest keeps the last), files narrow it as usual.
"""

from __future__ import annotations

import sys

#: the backends of the quick run: one per product family
BACKENDS = ("redis", "mongodb", "dynamodb")
#: pyproject's markers of the backends (and the server) the quick run leaves out
LEFT_OUT_MARKERS = ("cluster", "valkey", "valkey_cluster", "redis_stack")
#: ``-k`` words of the tests left out, and why (a file's name matches its own tests only)
LEFT_OUT = {
    "test_agui_client.py": "the official AG-UI client: Node and npm ci of tests/agui/node",
    "test_resumable_chat.py": "the example web app's browser tests: Chromium and its driver",
    "langgraph_1_1": "the LangGraph 1.1 side venv (.services/langgraph-1.1)",
    "test_wheel.py": "builds the wheel and installs it into a venv of its own",
    "vector_index": "the store's Query Engine index: Redis Stack (FT.*)",
    "test_bench and quick": "the bench's whole-suite runs: the rivals' side venvs (.bench-venvs)",
    # the slowest tests of the full run (10 to 20 s each on CI), each the one test of what it
    # proves: they run in ./dev test
    "test_testing_plugin.py": "whole pytest sessions of the plugin's own, on servers they start",
    "test_dev_services.py": "./dev services' servers, started on ports of their own",
    "server_restart or kill_9_mid_super_step": "server restarts and kill -9 of worker processes",
    "500_concurrent": "500 concurrent threads against the connection bound",
    "200_threads": "a store of 200 threads checked and pruned (163 s on FerretDB here)",
    "two_processes or other_process": "AG-UI endpoints in two server processes at once",
}


def pytest_args() -> list[str]:
    markers = " and ".join(f"not {marker}" for marker in LEFT_OUT_MARKERS)
    words = " or ".join(f"({word})" if " " in word else word for word in LEFT_OUT)
    # one -k: a second would replace it
    return [f"--graphkeep-backends={','.join(BACKENDS)}", "-m", markers, "-k", f"not ({words})"]


def explain() -> str:
    lines = [f"backends: {', '.join(BACKENDS)} (one per product family)"]
    lines.append(f"left out by marker: {', '.join(LEFT_OUT_MARKERS)}")
    lines += [f"left out (-k {word!r}): {why}" for word, why in LEFT_OUT.items()]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if argv == ["--explain"]:
        print(explain())
    elif not argv:
        print("\n".join(pytest_args()))
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
