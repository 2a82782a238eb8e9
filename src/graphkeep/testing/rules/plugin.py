"""The pytest side of ``--graphkeep-rules``: install the checks at configure, attribute what
they record to the running test, fail it at the end of its call phase (also when graphkeep
swallowed the service's error), and fail the session for requests made outside any test."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import pytest

from graphkeep.testing.options import option, selected_backends
from graphkeep.testing.rules import (
    FAMILY_NAMES,
    RULE_SETS,
    Violation,
    backend_family,
    parse_rule_sets,
)
from graphkeep.testing.rules.checks import Checks, report

CHECKS = {
    "redis": "every request redis-py sends (argument count, hash slots of its keys, scripts"
    " that declare no key, commands the service does not offer) and, from MONITOR, every key a"
    " script touches",
    "mongodb": "every command PyMongo sends (operators, stages, index kinds, collMod, index"
    " builds in flight per collection, transactions, unique indexes on collections with data)",
}


class OwnedByTest:
    """What a test sent is its own: it fails at the end of its call phase (a section of its
    report when it failed anyway) and of its teardown for the requests it sent that a
    service refuses. ``found`` takes them; ``test_over`` runs after its teardown."""

    def found(self, item: pytest.Item) -> list[Violation]:
        raise NotImplementedError

    def test_over(self) -> None:
        """Nothing owns what is sent after a test's teardown (until the next test's setup)."""

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Generator[None, Any, Any]:
        try:
            result = yield
        except BaseException:
            found = self.found(item)
            if found:
                item.add_report_section("call", "graphkeep rules", report(found))
            raise
        found = self.found(item)
        if found:
            pytest.fail(report(found), pytrace=False)
        return result

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_teardown(self, item: pytest.Item) -> Generator[None, Any, Any]:
        try:
            result = yield
        finally:
            found = self.found(item)
            self.test_over()
        if found:
            pytest.fail(report(found), pytrace=False)
        return result


class RulesPlugin(OwnedByTest):
    def __init__(self, config: pytest.Config, names: list[str]) -> None:
        self.config = config
        self.names = names
        self.checks = Checks(names)
        self.recorder = self.checks.recorder
        self.session_violations: list[Violation] = []

    def install(self) -> None:
        self.checks.install()

    def uninstall(self) -> None:
        self.checks.uninstall()

    def wrong_family(self) -> list[str]:
        """Rules sets whose family no selected backend has."""
        used = {backend_family(b) for b in selected_backends(self.config)}
        return [n for n in self.names if RULE_SETS[n] not in used]

    def _sync(self) -> None:
        self.checks.sync()

    def found(self, item: pytest.Item) -> list[Violation]:
        self._sync()
        return self.recorder.take(item.nodeid)

    def test_over(self) -> None:
        self.recorder.owner = None

    # -- hooks

    def pytest_report_header(self, config: pytest.Config) -> list[str]:
        lines = [f"graphkeep rules: {', '.join(self.names)}"]
        for name in self.wrong_family():
            family = FAMILY_NAMES[RULE_SETS[name]]
            lines.append(
                f"graphkeep rules: {name} checks {family} requests, and no {family} backend is"
                f" selected (--graphkeep-backends {', '.join(selected_backends(config))}): it"
                f" checks only {family} clients the tests make themselves"
            )
        return lines

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> Generator[None, Any, Any]:
        self._sync()  # what ran between tests is the session's
        self.session_violations += self.recorder.take(None)
        self.recorder.owner = item.nodeid
        return (yield)

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_fixture_setup(self, fixturedef: Any) -> Generator[None, Any, Any]:
        """A fixture wider than a test (session, module…) sends outside any test."""
        if fixturedef.scope == "function":
            return (yield)
        self._sync()
        owner, self.recorder.owner = self.recorder.owner, None
        try:
            return (yield)
        finally:
            self._sync()
            self.recorder.owner = owner

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        try:
            self._sync()
        except RuntimeError as exc:
            self.session_violations.append(Violation("*", "monitor", "MONITOR", str(exc), ""))
        self.session_violations += self.recorder.take(None)
        if self.session_violations:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.session_violations:
            terminalreporter.write_line(
                report(self.session_violations).replace(
                    "graphkeep rules:", "graphkeep rules (outside any test):", 1
                ),
                red=True,
            )
        for name in self.names:
            family = RULE_SETS[name]
            if family not in self.recorder.checked:
                terminalreporter.write_line(
                    f"graphkeep rules: {name}: no {FAMILY_NAMES[family]} request was sent in"
                    " this session, nothing was checked"
                )

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        self.uninstall()


def configure(config: pytest.Config) -> None:
    """Register the rules plugin when ``--graphkeep-rules`` (or ``$GRAPHKEEP_RULES``) names sets."""
    names = parse_rule_sets(option(config, "graphkeep_rules"))
    if not names or config.pluginmanager.has_plugin("graphkeep-rules"):
        return
    plugin = RulesPlugin(config, names)
    plugin.install()
    config.pluginmanager.register(plugin, "graphkeep-rules")


def addoption(group: Any) -> None:
    group.addoption(
        "--graphkeep-rules",
        default=None,
        help="comma list of managed services whose rules every request of the session must"
        f" follow: {', '.join(RULE_SETS)} (default: $GRAPHKEEP_RULES); a refused request fails"
        " its test",
    )
