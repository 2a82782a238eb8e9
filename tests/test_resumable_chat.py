"""The resumable chat example (``examples/resumable_chat``) in a real headless Chromium.

On every backend: the app (the bot served as an AG-UI endpoint by :mod:`graphkeep.agui`)
runs under uvicorn in a subprocess on a free loopback port, with its test hook cutting each
run's event stream once after ``DROP_AFTER`` events; Debian's Chromium (``/usr/bin/chromium``
+ ``/usr/bin/chromedriver``, ``./dev test`` installs them) drives the page through Selenium.
The page must end with the fake model's exact reply — every token exactly once, in order —
after its reconnect with ``Last-Event-ID``, after a reload in the middle of a run (the page's
``/agent/connect``), and after an approval on interrupt.

Screenshots land in ``.services/screenshots/`` (``resumable_chat.png`` is the reconnect
test on Redis); a failing test leaves its page HTML, browser console and server log there.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from selenium import webdriver
from selenium.common.exceptions import TimeoutException, WebDriverException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from conformance.setups import all_setups
from conformance.testing import marks_for
from examples.resumable_chat.bot import answer_for, refund_question
from tests.conftest import unique_prefix
from tests.scenarios.servers import AppProcess, free_port, run_app

ROOT = Path(__file__).resolve().parent.parent
SCREENSHOTS = ROOT / ".services" / "screenshots"
LOGS = ROOT / ".services" / "logs"
CHROMIUM = os.environ.get("CHROMIUM_BINARY", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("CHROMEDRIVER", "/usr/bin/chromedriver")
#: the test hook: the app cuts each run's event stream once after this many events
DROP_AFTER = 40
#: seconds between the fake model's chunks: a reply of ~120 chunks lasts ~3 s
TOKEN_DELAY = 0.025
RUN_TIMEOUT = 20.0

SETUPS = [pytest.param(s, id=s.name, marks=marks_for(s)) for s in all_setups() if s.marker]

TRANSCRIPT_JS = """
return Array.from(document.querySelectorAll('#transcript .msg')).map(e => ({
  role: e.dataset.role, text: e.querySelector('.text').textContent,
  final: e.dataset.final, mismatch: e.dataset.mismatch || null, id: e.dataset.id || null}));
"""


class ChatServer(AppProcess):
    """A running example app: its URL, process and log."""

    def get_json(self, path: str) -> Any:
        with urllib.request.urlopen(self.base + path, timeout=10) as response:
            return json.loads(response.read())

    def thread_state(self, thread: str) -> dict[str, Any]:
        """The thread as a page load gets it (``POST /agent/connect``): the messages of its
        ``MESSAGES_SNAPSHOT`` and the interrupts its ``RUN_FINISHED`` says it waits for."""
        body = {"threadId": thread, "runId": f"test-{uuid.uuid4().hex}", "messages": []}
        request = urllib.request.Request(
            self.base + "/agent/connect",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=RUN_TIMEOUT) as response:
            lines = response.read().decode().splitlines()
        events = [json.loads(line[len("data: ") :]) for line in lines if line.startswith("data: ")]
        snapshot = [e for e in events if e["type"] == "MESSAGES_SNAPSHOT"]
        assert len(snapshot) == 1 and events[-1]["type"] == "RUN_FINISHED", events
        outcome = events[-1].get("outcome") or {}
        return {
            "messages": snapshot[0]["messages"],
            "interrupts": outcome.get("interrupts") if outcome.get("type") == "interrupt" else [],
        }

    def trace(self, run_id: str) -> Any:
        """The app's test-hook trace of a run (its SSE connections, its log state), or why
        not."""
        try:
            return self.get_json(f"/_test/runs/{run_id}")
        except (OSError, ValueError) as exc:
            return f"(no trace: {exc})"


@pytest.fixture(scope="module", params=SETUPS)
def server(request: pytest.FixtureRequest) -> Iterator[ChatServer]:
    """``uvicorn examples.resumable_chat.app:app`` on one backend, with the drop test hook."""
    setup = request.param
    port = free_port()
    log = LOGS / f"resumable_chat-{setup.name}.log"
    env = {
        **os.environ,
        "GRAPHKEEP_URL": setup.url,
        "GRAPHKEEP_KEY_PREFIX": unique_prefix("chat"),
        "RESUMABLE_CHAT_TEST_DROP_AFTER": str(DROP_AFTER),
        "RESUMABLE_CHAT_TOKEN_DELAY": str(TOKEN_DELAY),
    }
    command = [
        sys.executable,
        "-m",
        "uvicorn",
        "examples.resumable_chat.app:app",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--timeout-graceful-shutdown",
        "1",
    ]
    base = f"http://127.0.0.1:{port}"
    with run_app(ChatServer, setup.name, base, command, env, log, "/healthz") as chat:
        yield chat


@pytest.fixture(scope="module")
def browser() -> Iterator[webdriver.Chrome]:
    """Debian's Chromium, headless, driven by Debian's chromedriver (nothing downloaded)."""
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not shutil.which(p)]
    if missing:
        pytest.fail(
            f"{' and '.join(missing)} not found: `./dev test` installs Debian's chromium and"
            " chromium-driver (or: apt-get install chromium chromium-driver)",
            pytrace=False,
        )
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in (
        "--headless=new",
        "--no-sandbox",  # root in a container has no user namespace sandbox
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1000,1100",
        "--no-first-run",
    ):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(executable_path=CHROMEDRIVER))
    driver.set_page_load_timeout(20)
    try:
        yield driver
    finally:
        driver.quit()


@contextlib.contextmanager
def diagnosed(driver: webdriver.Chrome, server: ChatServer, name: str) -> Iterator[None]:
    """On failure: keep the page's screenshot, HTML and console and the server log, and
    print where they are with the console and the log's tail."""
    try:
        yield
    except BaseException:
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        stem = SCREENSHOTS / f"{name}-{server.backend}-FAILED"
        notes = []
        with contextlib.suppress(WebDriverException):
            driver.save_screenshot(str(stem.with_suffix(".png")))
            notes.append(str(stem.with_suffix(".png")))
        with contextlib.suppress(WebDriverException):
            stem.with_suffix(".html").write_text(driver.page_source)
            notes.append(str(stem.with_suffix(".html")))
        console = ""
        with contextlib.suppress(WebDriverException):
            entries = driver.get_log("browser")  # type: ignore[no-untyped-call]
            console = "\n".join(f"{e.get('level')} {e.get('message')}" for e in entries)
            stem.with_suffix(".console.txt").write_text(console)
            notes.append(str(stem.with_suffix(".console.txt")))
        print(f"--- diagnostics: {', '.join(notes)}; server log: {server.log}")
        print(f"--- browser console:\n{console or '(empty)'}")
        with contextlib.suppress(WebDriverException):
            print(f"--- transcript: {json.dumps(driver.execute_script(TRANSCRIPT_JS))}")
            run_id = driver.execute_script(
                "return sessionStorage.getItem('chat.run') || document.getElementById('run-id')"
                ".textContent"
            )
            print(f"--- now {time.time():.3f}; run {run_id}: {server.trace(run_id)}")
        print(f"--- server log tail:\n{server.log_tail()}")
        raise


def screenshot(driver: webdriver.Chrome, server: ChatServer, name: str) -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}-{server.backend}.png"
    driver.save_screenshot(str(path))
    return path


def wait_for(
    driver: webdriver.Chrome, what: str, condition: Callable[[], Any], timeout: float = RUN_TIMEOUT
) -> Any:
    try:
        return WebDriverWait(driver, timeout, poll_frequency=0.05).until(lambda _d: condition())
    except TimeoutException:
        raise AssertionError(f"timed out after {timeout:g} s waiting for {what}") from None


def transcript(driver: webdriver.Chrome) -> list[dict[str, Any]]:
    return list(driver.execute_script(TRANSCRIPT_JS))


def status(driver: webdriver.Chrome) -> str:
    return str(driver.find_element(By.ID, "status").get_attribute("data-state"))


def open_new_chat(driver: webdriver.Chrome, server: ChatServer) -> None:
    """A fresh tab state on the app: no thread, no run (sessionStorage cleared)."""
    driver.get(server.base + "/")
    driver.execute_script("sessionStorage.clear()")
    driver.get(server.base + "/")
    wait_for(
        driver,
        "the page to load",
        lambda: driver.execute_script("return document.body.dataset.ready === 'true'"),
    )


def send(driver: webdriver.Chrome, text: str) -> str:
    """Type and send a message; returns the run id the page follows."""

    def shown_run() -> str:
        return str(driver.find_element(By.ID, "run-id").text)

    before = shown_run()
    driver.find_element(By.ID, "message").send_keys(text)
    driver.find_element(By.ID, "send").click()
    # the footer shows the run the page follows (sessionStorage forgets it at the close
    # event, which a run that stops at once reaches before a poll would see it)
    wait_for(driver, "the page to start following a run", lambda: shown_run() != before)
    return shown_run()


def wait_done(driver: webdriver.Chrome, state: str = "done") -> None:
    wait_for(driver, f"the run to end with status {state!r}", lambda: status(driver) == state)


def settled(user: str, reply: str) -> list[dict[str, Any]]:
    return [
        {"role": "user", "text": user, "final": "true", "mismatch": None},
        {"role": "assistant", "text": reply, "final": "true", "mismatch": None},
    ]


def without_ids(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in m.items() if k != "id"} for m in messages]


def test_a_dropped_event_stream_is_resumed_with_every_token_once(
    server: ChatServer, browser: webdriver.Chrome
) -> None:
    question = "Hello, my parcel has not arrived yet"
    with diagnosed(browser, server, "reconnect"):
        open_new_chat(browser, server)
        run_id = send(browser, question)
        wait_done(browser)
        assert without_ids(transcript(browser)) == settled(question, answer_for(question))
        connections = server.get_json(f"/_test/runs/{run_id}")["connections"]
        # the hook cut the first connection after DROP_AFTER events, mid-run; the page
        # POSTed the same run again, saying where it was with the Last-Event-ID header
        first, second = connections[0], connections[1]
        assert first["path"] == second["path"] == "/agent"
        assert first["last_event_id"] is None
        assert first["dropped"] and first["served"] == DROP_AFTER
        assert second["last_event_id"] in first["ids_sent"]
        assert second["served"] > 0
        assert len(connections) == 2, connections
        path = screenshot(browser, server, "resumable_chat-reconnect")
        if server.backend == "redis":
            shutil.copyfile(path, SCREENSHOTS / "resumable_chat.png")


def test_reloading_the_page_mid_run_rebuilds_the_reply_and_carries_on(
    server: ChatServer, browser: webdriver.Chrome
) -> None:
    question = "How do I change the email address on my account?"
    reply = answer_for(question)
    with diagnosed(browser, server, "reload"):
        open_new_chat(browser, server)
        thread = browser.execute_script("return sessionStorage.getItem('chat.thread')")
        run_id = send(browser, question)

        def streaming() -> bool:
            messages = transcript(browser)
            return (
                len(messages) == 2
                and messages[1]["final"] == "false"
                and len(messages[1]["text"]) >= 25
            )

        wait_for(browser, "the reply to be streaming", streaming)
        partial = transcript(browser)[1]["text"]
        assert reply.startswith(partial) and partial != reply
        browser.refresh()
        wait_done(browser)
        # the same tab state, the same conversation: the reply drawn once, complete
        assert browser.execute_script("return sessionStorage.getItem('chat.thread')") == thread
        final = transcript(browser)
        assert without_ids(final) == settled(question, reply)
        state = server.thread_state(thread)
        assert [m["content"] for m in state["messages"]] == [question, reply]
        assert final[1]["id"] == state["messages"][1]["id"]
        # the reloaded page joined the live run through /agent/connect, on a new connection
        # (the reply in flight came from the run's log, from its start)
        connections = server.get_json(f"/_test/runs/{run_id}")["connections"]
        assert any(
            c["path"] == "/agent/connect" and c["last_event_id"] is None and c["served"] > 0
            for c in connections[1:]
        ), connections
        # whichever connection the hook cut (the first, or usually the page's connect), the
        # page rejoined the run right after the last event it read: an id the cut connection
        # sent (a burst the cut reaches before the page reads it is lost with the connection);
        # a connect whose events the page never read is sent again as a connect
        for i, cut in enumerate(connections):
            if cut["dropped"]:
                after = connections[i + 1]
                if after["last_event_id"] is None:
                    assert cut["path"] == after["path"] == "/agent/connect", connections
                else:
                    assert after["path"] == "/agent", connections
                    assert after["last_event_id"] in cut["ids_sent"], connections
        screenshot(browser, server, "resumable_chat-reload")


def test_a_refund_asks_for_approval_and_approving_resumes_the_run(
    server: ChatServer, browser: webdriver.Chrome
) -> None:
    question = "Please refund order 5521, it arrived broken"
    with diagnosed(browser, server, "approval"):
        open_new_chat(browser, server)
        send(browser, question)
        approval = browser.find_element(By.ID, "approval")
        wait_for(browser, "the approval prompt", approval.is_displayed)
        wait_done(browser, "waiting")
        assert browser.find_element(By.ID, "approval-question").text == refund_question(question)
        assert without_ids(transcript(browser)) == [
            {"role": "user", "text": question, "final": "true", "mismatch": None}
        ]
        screenshot(browser, server, "resumable_chat-approval")
        # a reload while waiting shows the prompt again, from the thread's state
        browser.refresh()
        wait_for(browser, "the approval prompt after a reload", lambda: approval_shown(browser))
        browser.find_element(By.ID, "approve").click()
        wait_done(browser)
        assert not browser.find_element(By.ID, "approval").is_displayed()
        assert without_ids(transcript(browser)) == settled(
            question, answer_for(question, approved=True)
        )
        thread = browser.execute_script("return sessionStorage.getItem('chat.thread')")
        state = server.thread_state(thread)
        assert state["interrupts"] == []
        assert state["messages"][-1]["content"] == answer_for(question, approved=True)
        screenshot(browser, server, "resumable_chat-approved")


def approval_shown(driver: webdriver.Chrome) -> bool:
    return bool(driver.find_element(By.ID, "approval").is_displayed())
