"""Test-wide settings: every compiled call cross-checks its fast guard against the full one."""
import pytest

import magpy


@pytest.fixture(autouse=True)
def _verify_fast_guard():
    magpy.config.verify_fast_guard = True
    yield
    magpy.config.verify_fast_guard = False
