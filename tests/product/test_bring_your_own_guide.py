"""docs/guide/bring-your-own.md runs as written: its blocks, in order, in an empty folder. A block
with a ``title="FILE"`` is written to FILE; every other ``bash`` and ``python`` block is run
(``console``, ``text`` and ``toml`` blocks without a title are shown, not run). The
generated images are small and the model tiny, so the guide runs in about a minute on two
cores; pretrained weights are never fetched (the suite runs offline)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "guide" / "bring-your-own.md"
FENCE = re.compile(r"^```(\w+)([^\n]*)\n(.*?)^```", re.MULTILINE | re.DOTALL)


def blocks() -> list[tuple[str, str | None, str]]:
    """(language, title or None, body) of every fenced block, in order."""
    out = []
    for lang, attrs, body in FENCE.findall(GUIDE.read_text(encoding="utf-8")):
        title = re.search(r'title="([^"]+)"', attrs)
        out.append((lang, title.group(1) if title else None, body))
    return out


def test_the_guide_names_its_files_and_runs_something():
    found = blocks()
    assert {t for _, t, _ in found if t} == {"my_models.py", "my-study.toml", "my_method.py"}
    assert sum(lang == "bash" and t is None for lang, t, _ in found) >= 6


@pytest.mark.e2e
@pytest.mark.slow
def test_the_guide_runs_from_an_empty_folder_to_a_report(tmp_path):
    bin_dir = Path(sys.executable).parent
    env = dict(
        os.environ,
        PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        TEMPORA_HOME=str(tmp_path / "home"),
        TORCH_HOME=str(tmp_path / "torch-home"),
        TEMPORA_OFFLINE="1",
        OMP_NUM_THREADS="1",
        PYTHONPATH=os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]),
    )
    work = tmp_path / "empty"
    work.mkdir()
    outputs = []
    for lang, title, body in blocks():
        if title is not None:
            (work / title).write_text(body)
        elif lang == "bash":
            t0 = time.perf_counter()
            run = subprocess.run(["bash", "-euo", "pipefail", "-c", body], cwd=work, env=env, capture_output=True, text=True)
            print(f"{time.perf_counter() - t0:6.1f} s  {body.splitlines()[0]}")
            assert run.returncode == 0, f"{body}\n--- stdout\n{run.stdout}\n--- stderr\n{run.stderr}"
            outputs.append(run.stdout)
        elif lang == "python":
            run = subprocess.run([sys.executable, "-c", body], cwd=work, env=env, capture_output=True, text=True)
            assert run.returncode == 0, f"{body}\n--- stderr\n{run.stderr}"
    # the listing the guide shows is the one the tool prints
    shown = next(body for lang, t, body in blocks() if lang == "text" and body.startswith("model my_models.py:build"))
    assert outputs[0].strip() == shown.strip()
    assert (work / "report" / "report.md").is_file()
    traces = sorted(p.relative_to(work / "traces") for p in (work / "traces").rglob("*.parquet"))
    assert len(traces) == 2 + 2 + 1 + 1 + 1  # own model x2, timm x2, class map, corruptions, own method
    assert (work / "report-with-my-method" / "report.md").is_file()
    assert "pseudo-label" in (work / "report-with-my-method" / "report.md").read_text(encoding="utf-8")
    assert {p.parts[1] for p in traces} == {"my_models.py-build", "timm-mobilenetv3_small_100", "torchvision-mobilenet_v3_small"}
