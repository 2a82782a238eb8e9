"""The scenario fixtures come from the one set-up module, :mod:`tests.scenarios.backends`."""

import pytest

pytest.register_assert_rewrite("tests.scenarios.backends")

from tests.scenarios.backends import backend, store  # noqa: E402, F401
