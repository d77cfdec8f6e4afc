"""docs/guide/python-api.md runs as written: its ``python`` blocks, in order, as one notebook
(one process) in an empty folder, on a small demo split."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "guide" / "python-api.md"
FENCE = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)


def test_the_api_page_names_every_public_function():
    import tempora_sim
    import tempora_sim.api as sim_api
    import tempora_trace
    import tempora_trace.api as trace_api

    text = GUIDE.read_text(encoding="utf-8")
    for package, alias, api in ((tempora_sim, "ts", sim_api), (tempora_trace, "tt", trace_api)):
        for name in api.__all__:
            obj = getattr(api, name)
            assert obj.__doc__, f"{api.__name__}.{name} has no docstring"
            assert getattr(package, name) is obj, f"{package.__name__}.{name} is not the API's {name}"
            if callable(obj) and not isinstance(obj, type):
                assert f"`{alias}.{name}`" in text, f"{alias}.{name} ({api.__name__}) is not on the page"


@pytest.mark.e2e
@pytest.mark.slow
def test_the_api_page_runs_as_one_notebook(tmp_path):
    blocks = FENCE.findall(GUIDE.read_text(encoding="utf-8"))
    assert len(blocks) >= 6
    env = dict(
        os.environ,
        TEMPORA_HOME=str(tmp_path / "home"),
        TEMPORA_DEMO_TEST_SIZE="64",
        OMP_NUM_THREADS="1",
        PYTHONPATH=os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]),
    )
    work = tmp_path / "notebook"
    work.mkdir()
    run = subprocess.run([sys.executable, "-c", "\n".join(blocks)], cwd=work, env=env, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, f"--- stdout\n{run.stdout}\n--- stderr\n{run.stderr}"
    out = run.stdout
    # what each block said it did, and the files it wrote
    assert "standard-bs16.parquet" in out and "tent-bs16.parquet" in out and "λ = " in out
    assert sorted(p.name for p in (work / "traces" / "notebook").glob("*.parquet")) == ["standard-bs16.parquet", "tent-bs16.parquet"]
    assert (work / "report" / "report.md").is_file() and (work / "explore.html").stat().st_size > 100_000
    assert list((work / "live").glob("*.live.parquet"))
    assert "recommended" in out and "clock_gap_idle_pct" in out
