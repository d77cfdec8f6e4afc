"""Every tracer test runs torch on one thread: the tiny models take milliseconds, a result never
depends on how many cores the machine has or how many test workers share them, and a test
that needs more threads says so itself."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _torch_on_one_thread(one_thread):
    """The ``one_thread`` fixture of tests/conftest.py, for every test below tests/trace."""
