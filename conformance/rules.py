"""The service rules a row of the matrix runs under (``Setup.rules``, and ``$GRAPHKEEP_RULES``
for every row): the rules checkers of ``graphkeep.testing.rules`` are installed for the row,
what they record is the running case's, and a case that sent a request a service refuses fails
with the violation lines (rule, request, service page).

``python -m conformance`` runs its cases outside pytest: the runners wrap each row in
:func:`checked` and each case in :func:`owned`. Under pytest (``conformance/test_*.py``)
:class:`RowRules` installs the same checkers for the tests of a set-up with rules and fails a
test as ``--graphkeep-rules`` does (the sets the session's ``--graphkeep-rules`` already
checks are left to it).
"""

from __future__ import annotations

from collections.abc import Generator, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from conformance.setups import Setup
from graphkeep.testing.rules import Violation, parse_rule_sets
from graphkeep.testing.rules.checks import Checks, report
from graphkeep.testing.rules.plugin import OwnedByTest

__all__ = ["RowRules", "checked", "owned", "report", "row_rules"]


def row_rules(setup: Setup) -> tuple[str, ...]:
    """The set-up's rules sets, then those ``$GRAPHKEEP_RULES`` adds to every row."""
    return tuple(dict.fromkeys([*setup.rules, *parse_rule_sets(None)]))


@contextmanager
def checked(setup: Setup) -> Iterator[Checks | None]:
    """The checkers of the row's rules, installed for the block (None: a row without rules)."""
    names = row_rules(setup)
    if not names:
        yield None
        return
    with Checks(names) as checks:
        yield checks


@contextmanager
def owned(checks: Checks | None, owner: str) -> Iterator[list[Violation]]:
    """:meth:`Checks.owned` of a row with rules; an empty list without."""
    if checks is None:
        yield []
        return
    with checks.owned(owner) as found:
        yield found


def _setup_of(item: pytest.Item) -> Setup | None:
    callspec = getattr(item, "callspec", None)
    setup = callspec.params.get("setup") if callspec is not None else None
    return setup if isinstance(setup, Setup) else None


class RowRules(OwnedByTest):
    """The pytest form: the checkers of the running test's set-up, kept installed while
    consecutive tests share its rules (a set-up's tests run together), the test the owner."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.names: tuple[str, ...] = ()
        self.checks: Checks | None = None

    def _names(self, item: pytest.Item) -> tuple[str, ...]:
        setup = _setup_of(item)
        if setup is None:
            return ()
        session = self.config.pluginmanager.get_plugin("graphkeep-rules")
        covered = set(getattr(session, "names", ()))
        return tuple(n for n in row_rules(setup) if n not in covered)

    def _switch(self, names: tuple[str, ...]) -> None:
        if names == self.names:
            return
        self._remove()
        if names:
            self.checks = Checks(names)
            self.checks.install()
        self.names = names

    def _remove(self) -> None:
        if self.checks is not None:
            self.checks.uninstall()
        self.checks, self.names = None, ()

    def found(self, item: pytest.Item) -> list[Violation]:
        if self.checks is None:
            return []
        self.checks.settle()
        return self.checks.recorder.take(item.nodeid) + self.checks.recorder.take(None)

    def test_over(self) -> None:
        if self.checks is not None:
            self.checks.recorder.owner = None

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> Generator[None, Any, Any]:
        self._switch(self._names(item))
        if self.checks is not None:
            self.checks.recorder.owner = item.nodeid
        return (yield)

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        self._remove()


@pytest.fixture
def row_checks(request: pytest.FixtureRequest) -> Checks | None:
    """The checkers installed for the running test's set-up (None: it has no rules)."""
    plugin = request.config.pluginmanager.get_plugin("conformance-row-rules")
    return plugin.checks if isinstance(plugin, RowRules) else None
