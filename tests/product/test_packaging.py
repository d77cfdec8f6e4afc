"""Packaging: the simulator installs and runs without torch; the distribution has a name of its
own and installs beside the unrelated ``tempora`` of the package index; the version has one source.

The sim-only install is real where it matters: the wheel is built from this tree, installed
with pip into a fresh virtual environment that cannot see torch, and ``pip check`` must find
every requirement of that install satisfied. To stay fast and offline, the third-party
packages are not downloaded again: the requirement closure of ``tempora-tta[sim]`` (read from the
built wheel's own metadata) is resolved against the test environment's installed
distributions and exposed to the fresh environment through a ``.pth`` file holding links to
exactly those distributions, nothing else. The side-by-side test downloads the other
``tempora`` (and what it requires) from the package index, the one test here that needs it.
"""

from __future__ import annotations

import importlib.metadata as md
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
#: this project's distribution on the package index (``tempora`` there is another project)
DISTRIBUTION = re.search(r'^name = "([^"]+)"', (ROOT / "pyproject.toml").read_text(encoding="utf-8"), re.M).group(1)


def _requirements(metadata_text: str) -> list[str]:
    return Parser().parsestr(metadata_text).get_all("Requires-Dist") or []


def _closure(requirements: list[str], extra: str) -> dict[str, md.Distribution]:
    """Installed distributions needed by ``requirements`` with ``extra``, transitively."""
    found: dict[str, md.Distribution] = {}
    todo = [(r, extra) for r in requirements]
    while todo:
        text, active = todo.pop()
        req = Requirement(text)
        if req.marker is not None and not req.marker.evaluate({"extra": active}):
            continue
        key = canonicalize_name(req.name)
        if key in found:
            continue
        dist = md.distribution(req.name)  # raises if the test environment lacks it
        found[key] = dist
        todo.extend((r, e) for r in (dist.requires or []) for e in ("", *req.extras))
    return found


def _link_distributions(dists: dict[str, md.Distribution], into: Path) -> None:
    """Symlink each distribution's top-level entries (packages, modules, dist-info) into ``into``."""
    into.mkdir()
    for dist in dists.values():
        base = Path(dist.locate_file(""))
        tops = {Path(f).parts[0] for f in (dist.files or []) if not str(f).startswith("..")}
        for top in tops:
            if top == "__pycache__" or top.endswith(".pth"):
                continue
            target = into / top
            if not target.exists():
                target.symlink_to(base / top)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """A wheel of this tree, built from a copy so the checkout gets no build/ folder."""
    work = tmp_path_factory.mktemp("wheel")
    tree = work / "tree"
    tree.mkdir()
    shutil.copytree(ROOT / "src", tree / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    for name in ["pyproject.toml", "README.md", *(p.name for p in ROOT.glob("LICEN[CS]E*"))]:
        shutil.copy(ROOT / name, tree / name)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "-w",
            str(work / "dist"),
            str(tree),
        ],
        check=True,
        capture_output=True,
    )
    (built,) = (work / "dist").glob(f"{canonicalize_name(DISTRIBUTION).replace('-', '_')}-*.whl")
    return built


def _wheel_version(wheel: Path) -> str:
    return re.search(r"^Version: (\S+)$", _wheel_metadata(wheel), re.M).group(1)


def _wheel_metadata(wheel: Path) -> str:
    with zipfile.ZipFile(wheel) as zf:
        name = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        return zf.read(name).decode()


@pytest.mark.e2e
@pytest.mark.slow
def test_trace_stack_is_an_extra_and_the_base_is_torch_free(wheel):
    meta = _wheel_metadata(wheel)
    reqs = [Requirement(r) for r in _requirements(meta)]
    base = {canonicalize_name(r.name) for r in reqs if r.marker is None}
    trace = {canonicalize_name(r.name) for r in reqs if r.marker is not None and r.marker.evaluate({"extra": "trace"})}
    assert {"numba", "polars", "pyarrow", "click"} <= base
    assert {"torch", "torchvision", "timm"} <= trace
    assert not base & {"torch", "torchvision", "timm", "huggingface-hub", "imagecorruptions"}
    # Upper bounds only for known incompatibilities: setuptools 81 dropped pkg_resources; pytest
    # 9.2's node ids defeat pytest-xdist 3.8's loadgroup (the dev extra; tests/product/test_test_loop.py).
    capped = {canonicalize_name(r.name) for r in reqs if any(s.operator in ("<", "<=") for s in r.specifier)}
    assert capped <= {"setuptools", "pytest"}, capped
    assert re.search(r"^Provides-Extra: sim$", meta, re.M) and re.search(r"^Provides-Extra: trace$", meta, re.M)


def _environment(wheel: Path, tmp_path: Path) -> tuple[Path, dict[str, str], list[str]]:
    """A fresh virtual environment that sees exactly the simulator's requirement closure (no
    torch): its interpreter, the environment for running it, and the pip command aimed at it."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    py = venv / "bin" / "python"
    site = Path(
        subprocess.run(
            [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], check=True, capture_output=True, text=True
        ).stdout.strip()
    )
    deps = _closure(_requirements(_wheel_metadata(wheel)), "sim")
    assert not set(deps) & {"torch", "torchvision", "timm"}
    _link_distributions(deps, tmp_path / "deps")
    (site / "sim_deps.pth").write_text(str(tmp_path / "deps") + "\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env["NUMBA_CACHE_DIR"] = str(tmp_path / "numba")
    return py, env, [sys.executable, "-m", "pip", "--python", str(py)]


def _pip(pip: list[str], env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    """pip on the fresh environment, in the environment without this process's PYTHONPATH."""
    return subprocess.run(pip + list(args), capture_output=True, text=True, env=env)


def _install(pip: list[str], env: dict[str, str], *args: str) -> None:
    run = _pip(pip, env, "install", "--quiet", *args)
    assert run.returncode == 0, run.stdout + run.stderr


@pytest.mark.e2e
@pytest.mark.slow
def test_sim_extra_installs_and_sweeps_without_torch(wheel, tmp_path):
    py, env, pip = _environment(wheel, tmp_path)
    venv = py.parent.parent
    _install(pip, env, "--no-deps", "--no-index", str(wheel))
    check = _pip(pip, env, "check")
    assert check.returncode == 0, check.stdout + check.stderr  # every base requirement is met, no torch

    no_torch = subprocess.run([str(py), "-c", "import torch"], capture_output=True, text=True, env=env)
    assert no_torch.returncode != 0 and "No module named 'torch'" in no_torch.stderr
    tracer = subprocess.run([str(py), "-c", "import tempora_trace"], capture_output=True, text=True, env=env)
    assert f"pip install '{DISTRIBUTION}[trace]'" in tracer.stderr

    traces = tmp_path / "traces"
    subprocess.run(
        [
            str(py),
            "-c",
            "import sys; from tempora_sim.sweeps.synthetic import write_trace_set; "
            "write_trace_set(sys.argv[1], ['standard', 'tent'], num_batches=12, episodes=['gaussian_noise'])",
            str(traces),
        ],
        check=True,
        env=env,
    )
    sweep = subprocess.run(
        [str(venv / "bin" / "tempora-sim"), "sweep", str(traces), "--protocol", "offline,discrete", "--rho", "1,0.5", "--format", "json"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert sweep.returncode == 0, sweep.stderr
    rows = json.loads(sweep.stdout)
    assert {r["method"] for r in rows} == {"standard", "tent"}
    # the interactive page's template, script and vendored chart library are package data
    page = tmp_path / "explore.html"
    explore = subprocess.run(
        [str(venv / "bin" / "tempora-sim"), "explore", str(traces), "--out", str(page), "--protocol", "discrete", "--resamples", "100"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert explore.returncode == 0, explore.stderr
    assert "echarts 6.1.0" in page.read_text(encoding="utf-8")
    assert (
        "torch"
        not in subprocess.run(
            [str(py), "-c", "import sys, tempora_sim.commands.main, tempora_sim.sweeps.replay; print(sorted(sys.modules))"],
            check=True,
            capture_output=True,
            text=True,
            env=env,
        ).stdout
    )


#: what the other ``tempora`` (date and time utilities) must still do beside this project
OTHER_TEMPORA_WORKS = """
import datetime, importlib.metadata as md, json, tempora, tempora.utc
assert tempora.parse_timedelta("1 day, 30 seconds") == datetime.timedelta(days=1, seconds=30)
assert tempora.utc.datetime(2018, 6, 26).tzinfo is datetime.timezone.utc
print(json.dumps({"version": md.version("tempora"), "module": tempora.__file__,
                  "missing": [str(f) for f in md.files("tempora") if not f.locate().exists()]}))
"""


@pytest.mark.e2e
@pytest.mark.slow
@pytest.mark.network
def test_installs_beside_the_unrelated_tempora_of_the_package_index(wheel, tmp_path):
    """``tempora`` on the package index is another project (date and time utilities): it is
    installed first, with its requirements, from the index; this project's wheel goes into the
    same environment after it; both import and work, and the other one lost no file."""
    py, env, pip = _environment(wheel, tmp_path)
    venv = py.parent.parent
    wheelhouse = tmp_path / "wheelhouse"
    fetched = subprocess.run(
        [sys.executable, "-m", "pip", "download", "--quiet", "--only-binary=:all:", "--dest", str(wheelhouse), "tempora"],
        capture_output=True,
        text=True,
        env=env,
    )
    last = (fetched.stderr.strip().splitlines() or ["(no message)"])[-1]
    assert fetched.returncode == 0, f"the package index is needed to fetch the other 'tempora' (pip download tempora): {last}"
    _install(pip, env, "--no-index", "--find-links", str(wheelhouse), "tempora")
    _install(pip, env, "--no-deps", "--no-index", str(wheel))
    check = _pip(pip, env, "check")
    assert check.returncode == 0, check.stdout + check.stderr

    other = subprocess.run([str(py), "-c", OTHER_TEMPORA_WORKS], capture_output=True, text=True, env=env)
    assert other.returncode == 0, other.stderr
    facts = json.loads(other.stdout)
    assert int(facts["version"].split(".")[0]) >= 5 and facts["missing"] == [], facts
    assert Path(facts["module"]).is_relative_to(venv)
    ours = subprocess.run(
        [
            str(py),
            "-c",
            "import sys, importlib.metadata as md, tempora_schema, tempora_sim; print(md.version(sys.argv[1]), tempora_sim.__version__)",
            DISTRIBUTION,
        ],
        capture_output=True,
        text=True,
        env=env,
    )
    assert ours.returncode == 0, ours.stderr
    assert ours.stdout.split() == [_wheel_version(wheel)] * 2
    for command in ("tempora-sim", "tempora-trace", "calc-prorate"):  # ours and theirs
        assert (venv / "bin" / command).is_file()
    help_ = subprocess.run([str(venv / "bin" / "tempora-sim"), "--help"], capture_output=True, text=True, env=env)
    assert help_.returncode == 0 and "sweep" in help_.stdout, help_.stderr


def test_version_comes_from_the_package_metadata():
    import tempora_sim
    import tempora_trace

    assert tempora_sim.__version__ == tempora_trace.__version__ == md.version(DISTRIBUTION)
