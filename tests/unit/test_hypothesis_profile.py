"""The Hypothesis profile every property runs under (tests/conftest.py).

A per-example deadline is a timing assertion; these tests pin that none is in
force, for a test without ``@settings`` and for one that sets only its own
example count, as most properties here do.
"""

from __future__ import annotations

from hypothesis import settings

from tests.conftest import HYPOTHESIS_PROFILE


def test_the_profile_in_force_has_no_deadline() -> None:
    assert settings.get_profile(HYPOTHESIS_PROFILE).deadline is None
    assert settings().deadline is None  # what a test without @settings runs with


def test_settings_that_name_only_an_example_count_inherit_no_deadline() -> None:
    assert settings(max_examples=5).deadline is None
