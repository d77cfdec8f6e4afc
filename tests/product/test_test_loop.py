"""The test loop's own promise: under `make test` (pytest-xdist, ``--dist loadgroup``) the tests
of a module that share a module-scoped fixture run on one worker, so the fixture is built once
(tests/conftest.py marks them). A nested pytest on a small module proves it on the installed
pytest and pytest-xdist: each test records the worker it ran on and the fixture counts its builds."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SHARED = """
import os, pytest

@pytest.fixture(scope="module")
def built():
    with open(os.environ["LOOP_LOG"], "a") as f:
        f.write("built\\n")
    return 1

@pytest.mark.parametrize("i", range(8))
def test_uses_the_shared_fixture(built, i):
    with open(os.environ["LOOP_LOG"], "a") as f:
        f.write("ran " + os.environ.get("PYTEST_XDIST_WORKER", "main") + "\\n")
"""

ALONE = """
import pytest

@pytest.mark.parametrize("i", range(8))
def test_shares_nothing(i):
    pass
"""


def test_a_module_fixture_is_built_once_across_two_workers(tmp_path):
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "conftest.py").write_text((ROOT / "tests" / "conftest.py").read_text(encoding="utf-8"))
    (tests / "helpers").symlink_to(ROOT / "tests" / "helpers", target_is_directory=True)
    (tests / "test_shared.py").write_text(SHARED)
    (tests / "test_alone.py").write_text(ALONE)
    log = tmp_path / "log.txt"
    env = dict(os.environ, LOOP_LOG=str(log), PYTHONPATH=os.pathsep.join([str(tests), str(ROOT / "src")]))
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2", "--dist", "loadgroup", str(tests)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    lines = log.read_text().splitlines()
    assert lines.count("built") == 1, lines
    workers = {line.split()[1] for line in lines if line.startswith("ran ")}
    assert len(workers) == 1 and workers != {"main"}, lines
