"""Lets pytest show values in failed asserts of the spec modules (they are not test files)."""

import pytest

pytest.register_assert_rewrite("conformance.spec")
