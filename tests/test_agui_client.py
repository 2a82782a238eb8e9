"""graphkeep.agui tested with the official AG-UI client, not our own.

On every backend: ``python -m tests.agui.graph`` serves tests/agui/graph.py's graph at
``/agent`` on a free loopback port (saver and event log on that backend, a key prefix of its
own), and ``node --test tests/agui/node/client.test.mjs`` drives ``HttpAgent`` of
``@ag-ui/client`` (pinned in tests/agui/node/package-lock.json; ``./dev test`` installs it)
against it: text streaming, a tool call, an interrupt and its resume, a connection cut mid-run
and rejoined after ``Last-Event-ID``, and a page load joining a live run. The client's own
validation runs on every event; the transcripts must be the graph's exact replies, which this
file hands to the Node test (``AGUI_EXPECTED``) from tests/agui/graph.py.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from conformance.setups import all_setups
from conformance.testing import marks_for
from tests.agui.graph import LOOKUP_REPLY, get_weather, reply_to, weather_reply
from tests.conftest import unique_prefix
from tests.scenarios.servers import AppProcess, free_port, run_app

ROOT = Path(__file__).resolve().parent.parent
NODE_DIR = ROOT / "tests" / "agui" / "node"
LOGS = ROOT / ".services" / "logs"
#: seconds between the fake model's chunks: a reply of ~30 words streams in ~1.2 s, the time a
#: page load has to join it mid-stream (MongoDB on FerretDB is the slowest to answer)
TOKEN_DELAY = 0.04
NODE_TIMEOUT = 120.0

SETUPS = [pytest.param(s, id=s.name, marks=marks_for(s)) for s in all_setups() if s.marker]


def expected() -> dict[str, dict[str, str]]:
    """The prompts the Node test sends and the graph's exact answers to them."""
    text = "please tell me a story"
    weather = "what is the weather in Paris"
    forecast = str(get_weather.invoke({"city": "Paris"}))
    refund = "I want a refund"
    return {
        "text": {"prompt": text, "reply": reply_to(text)},
        "weather": {
            "prompt": weather,
            "lookup": LOOKUP_REPLY,
            "callId": "call-Paris",
            "city": "Paris",
            "forecast": forecast,
            "reply": weather_reply("Paris", forecast),
        },
        "refund": {
            "prompt": refund,
            "first": reply_to(refund),
            "approved": reply_to("", approved=True),
        },
    }


class AgentServer(AppProcess):
    """``python -m tests.agui.graph`` running; ``base`` is the endpoint's URL."""

    @property
    def url(self) -> str:
        return self.base


@pytest.fixture(scope="module", params=SETUPS)
def server(request: pytest.FixtureRequest) -> Iterator[AgentServer]:
    """``python -m tests.agui.graph`` on one backend."""
    setup = request.param
    port = free_port()
    log = LOGS / f"agui-client-{setup.name}.log"
    env = {
        **os.environ,
        "GRAPHKEEP_URL": setup.url,
        "GRAPHKEEP_KEY_PREFIX": unique_prefix("agui"),
        "AGUI_PORT": str(port),
        "AGUI_TOKEN_DELAY": str(TOKEN_DELAY),
    }
    command = [sys.executable, "-m", "tests.agui.graph"]
    url = f"http://127.0.0.1:{port}/agent"
    with run_app(AgentServer, setup.name, url, command, env, log, "/health") as agent:
        yield agent


def _node() -> str:
    node = shutil.which("node")
    if node is None:
        pytest.fail("node not found: ./dev test installs Node and the client", pytrace=False)
    if not (NODE_DIR / "node_modules" / "@ag-ui" / "client").is_dir():
        pytest.fail(
            f"{NODE_DIR.relative_to(ROOT)}/node_modules has no @ag-ui/client:"
            " run ./dev test (it runs npm ci there)",
            pytrace=False,
        )
    return node


def test_official_client(server: AgentServer) -> None:
    """Every scenario of client.test.mjs passes: the client accepted every event and each
    transcript is exact."""
    node = _node()
    env = {
        **os.environ,
        "AGUI_URL": server.url,
        "AGUI_EXPECTED": json.dumps(expected()),
        "NODE_NO_WARNINGS": "1",
    }
    try:
        result = subprocess.run(
            [node, "--test", "--test-reporter=spec", "client.test.mjs"],
            cwd=NODE_DIR,
            env=env,
            capture_output=True,
            text=True,
            timeout=NODE_TIMEOUT,
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(
            f"node --test ran over {NODE_TIMEOUT}s on {server.backend}:\n{exc.stdout}\n"
            f"{exc.stderr}\n---- server log ----\n{server.log_tail()}",
            pytrace=False,
        )
    if result.returncode != 0:
        pytest.fail(
            f"node --test failed on {server.backend} (exit {result.returncode}):\n"
            f"{result.stdout}\n{result.stderr}\n---- server log ----\n{server.log_tail()}",
            pytrace=False,
        )
    summary = dict(re.findall(r"^ℹ (tests|pass) (\d+)$", result.stdout, re.M))
    assert int(summary.get("tests", 0)) >= 5, result.stdout
    assert summary.get("pass") == summary["tests"], result.stdout
