"""The hostile-input suite (every test here is marked ``hostile`` and ``slow``: tests/conftest.py)."""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType

import pytest


@pytest.fixture(scope="module")
def hostile_modules() -> dict[str, ModuleType]:
    """This folder's test modules by name (``sim`` for test_hostile_sim.py …), the objects pytest
    collected, for the one test that adds up their case tables against docs/reference/errors.md;
    no test module imports another."""
    names = sorted(p.stem for p in Path(__file__).parent.glob("test_hostile_*.py"))
    return {name.removeprefix("test_hostile_"): importlib.import_module(name) for name in names}
