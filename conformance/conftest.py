"""Lets pytest show values in failed asserts of the spec modules (they are not test files), and
runs each set-up's tests under its service rules (`conformance/rules.py`)."""

import pytest

pytest.register_assert_rewrite("conformance.spec")

from conformance.rules import RowRules, row_checks  # noqa: E402

__all__ = ["row_checks"]


def pytest_configure(config: pytest.Config) -> None:
    if not config.pluginmanager.has_plugin("conformance-row-rules"):
        config.pluginmanager.register(RowRules(config), "conformance-row-rules")
