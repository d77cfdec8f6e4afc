"""Shared fixtures (tiny CIFAR-C-layout data and a tiny BN network, so tracer tests run in
seconds on one CPU thread) and the marks of whole folders.

The marks are registered in pyproject.toml; a file marks itself (``pytestmark``), a folder is
marked here. ``slow`` tests get a longer per-test timeout, and under pytest-xdist the tests of
one module that share a module-scoped fixture run on one worker (``--dist loadgroup``), so an
expensive fixture (a wheel, the explore page of the demo set) is built once.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from helpers.cifar import tiny_net, write_cifar_c

# The suite never reaches for the network: a missing weights file is the offline refusal
# (tests/trace/models/test_weights_download.py covers downloads with a local stand-in for the server).
os.environ["TEMPORA_OFFLINE"] = "1"
# torch's thread pool on one thread in every process of the suite (the tracer processes its
# tests start inherit it), unless a test asks for more (--threads): two workers on two cores
# each with a pool as wide as the machine made OpenMP threads wait on each other's cores, and
# the suite ran about 20 s longer. Set before anything imports torch; a value the caller set stays.
os.environ.setdefault("OMP_NUM_THREADS", "1")
# The idle blocks of every trace the suite takes without a run-in, whatever this machine's
# setting (read where a run does not give --idle-settle): 1.5 s before each of six blocks made
# every trace about 10 s longer and the suite eight minutes; tests/trace/test_trace_variability.py
# times the run-in itself.
os.environ["TEMPORA_IDLE_SETTLE"] = "0"


_CACHE_BEFORE = os.environ.get("TEMPORA_TRACE_CACHE")

TESTS = Path(__file__).resolve().parent
#: folders (relative to tests/) whose every test carries these marks
FOLDER_MARKS = {"product/hostile": ("hostile", "slow")}
#: pytest-timeout's limit for a ``slow`` test, in seconds (the default is ``timeout`` in pyproject.toml)
SLOW_TIMEOUT = 900


def pytest_configure(config):
    """The simulator's trace cache (tempora_sim.sweeps.trace_cache) of this test run lives in a
    temporary folder, never in the user's cache; subprocesses inherit it."""
    import tempfile

    config._tempora_trace_cache = tempfile.mkdtemp(prefix="tempora-trace-cache-")
    os.environ["TEMPORA_TRACE_CACHE"] = config._tempora_trace_cache


def pytest_unconfigure(config):
    import shutil

    shutil.rmtree(getattr(config, "_tempora_trace_cache", ""), ignore_errors=True)
    if _CACHE_BEFORE is None:
        os.environ.pop("TEMPORA_TRACE_CACHE", None)
    else:
        os.environ["TEMPORA_TRACE_CACHE"] = _CACHE_BEFORE


@pytest.hookimpl(tryfirst=True)  # before `-m` selects and xdist reads the groups
def pytest_collection_modifyitems(config, items):
    timeouts = config.pluginmanager.hasplugin("timeout")
    groups = config.pluginmanager.hasplugin("xdist")
    for item in items:
        path = item.path.resolve()
        if not path.is_relative_to(TESTS):
            continue
        where = path.relative_to(TESTS).as_posix()
        for folder, marks in FOLDER_MARKS.items():
            if where.startswith(folder + "/"):
                for mark in marks:
                    item.add_marker(mark)
        if timeouts and item.get_closest_marker("slow") and not item.get_closest_marker("timeout"):
            item.add_marker(pytest.mark.timeout(SLOW_TIMEOUT))
        if groups and not item.get_closest_marker("xdist_group") and _shares_a_module_fixture(item):
            item.add_marker(pytest.mark.xdist_group(f"tests/{where}"))


def _shares_a_module_fixture(item) -> bool:
    """Whether the test uses a fixture its module builds once for all of its tests."""
    info = getattr(item, "_fixtureinfo", None)
    defs = info.name2fixturedefs.values() if info is not None else ()
    return any(d.scope == "module" for chain in defs for d in chain)


@pytest.fixture
def cifar_c_root(tmp_path: Path) -> Path:
    """Two corruptions, 32 images per severity (4 batches of 8)."""
    return write_cifar_c(tmp_path / "cifar-c", ["gaussian_noise", "fog"])


@pytest.fixture
def one_thread():
    """torch on one thread for the test (autouse in tests/trace/conftest.py)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def tiny_models(monkeypatch):
    """Registers ``tiny-bn`` and ``tiny-gn`` (one conv + norm + linear, cifar family) in the
    tracer's model registry for the duration of a test; weights are random but seeded."""
    import torch

    from tempora_trace import models

    def builder(norm):
        def build(weights, num_classes):
            torch.manual_seed(0)
            classes = num_classes or 10
            return tiny_net(norm, classes), models.ModelSpec(f"tiny-{norm}", norm, classes, 32, "cifar")

        return build

    monkeypatch.setitem(models.MODELS, "tiny-bn", builder("bn"))
    monkeypatch.setitem(models.MODELS, "tiny-gn", builder("gn"))
    return ["tiny-bn", "tiny-gn"]
