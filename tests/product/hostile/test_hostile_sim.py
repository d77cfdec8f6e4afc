"""Hostile input to ``tempora-sim``: every case is one stderr line, exit status 2, no traceback,
and the workspace exactly as it was (see tests/helpers/hostile.py). In-process, on tiny synthetic traces."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import polars as pl
import pytest

from helpers.hostile import assert_refused, inject_errno, invoke, snapshot
from helpers.sim_cases import CASES, SMALL
from tempora_sim.commands.main import main
from tempora_sim.sweeps.synthetic import write_trace_set
from tempora_toolkit.atomic_files import output_lock

PROG = "tempora-sim"


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    """A workspace: a trace folder, an earlier sweep's results and an earlier report."""
    write_trace_set(tmp_path / "traces", ("standard", "tent"), **SMALL)
    results = tmp_path / "results"
    results.mkdir()
    (results / "utility.parquet").write_bytes(b"earlier results")
    (results / "notes.txt").write_text("the user's own notes")
    report = tmp_path / "report"
    (report / "tables").mkdir(parents=True)
    (report / "report.md").write_text("# an earlier report\n")
    (report / "tables" / "offline.csv").write_text("method,utility\n")
    return tmp_path


def _args(args, ws):
    return [a.replace("{ws}", str(ws)) for a in args]


@pytest.mark.parametrize("case", list(CASES))
def test_refused_in_one_line_and_nothing_changes(case, ws):
    args, needle, setup = CASES[case]
    if setup is not None:
        setup(ws)
    before = snapshot(ws)
    assert_refused(invoke(main, _args(args, ws)), PROG, needle, before, ws)


# ------------------------------------------------------------------------ injected faults
FAULTS = {
    "read-only out parent": (errno.EACCES, "{ws}/new", "{ws}", "permission denied"),
    "read-only existing out": (errno.EACCES, "{ws}/results", "{ws}/results", "permission denied"),
    "read-only file system": (errno.EROFS, "{ws}/results", "{ws}/results", "read-only file system"),
    "full disk, new out": (errno.ENOSPC, "{ws}/new", "{ws}", "no space left"),
    "full disk, existing out": (errno.ENOSPC, "{ws}/results", "{ws}/results", "no space left"),
}


COMMANDS = ["sweep", "report"]


@pytest.mark.parametrize("case", list(FAULTS))
@pytest.mark.parametrize("command", COMMANDS)
def test_filesystem_faults_are_one_line_and_keep_what_was_there(case, command, ws, monkeypatch):
    code, out, below, needle = FAULTS[case]
    out, below = out.replace("{ws}", str(ws)), below.replace("{ws}", str(ws))
    before = snapshot(ws)
    calls = ("write",) if code == errno.ENOSPC else ("open", "mkdir", "rename", "replace")
    # the sweep itself reads traces and compiles kernels first; only writes below `below` fail
    inject_errno(monkeypatch, Path(below), code, calls)
    args = [command, str(ws / "traces"), "--out", out, "--protocol", "offline,discrete", "--rho", "1"]
    assert_refused(invoke(main, args), PROG, needle, before, ws)


def test_writable_out_below_read_only_parent_is_written(ws, monkeypatch):
    """The staging folder is made inside an existing --out, so a read-only parent does not matter."""
    parent = ws / "ro"
    out = parent / "out"
    out.mkdir(parents=True)
    real_access = os.access
    monkeypatch.setattr(
        os, "access", lambda p, m, *a, **k: False if os.path.abspath(p) == str(parent) and m & os.W_OK else real_access(p, m, *a, **k)
    )
    real_open = os.open
    monkeypatch.setattr(os, "open", lambda p, *a, **k: _deny(p, parent, real_open, *a, **k))
    res = invoke(main, ["sweep", str(ws / "traces"), "--out", str(out), "--protocol", "offline", "--format", "json"])
    assert res.exit_code == 0, res.output + res.stderr
    assert sorted(p.name for p in out.iterdir()) == ["utility.csv", "utility.parquet"]


def _deny(path, parent, real, *args, **kwargs):
    if os.path.dirname(os.path.abspath(os.fsdecode(path))) == str(parent):
        raise PermissionError(errno.EACCES, "Permission denied", os.fsdecode(path))
    return real(path, *args, **kwargs)


@pytest.mark.parametrize("command", COMMANDS)
def test_an_output_in_use_is_refused_naming_the_holder(command, ws):
    out = ws / "busy"
    with output_lock(out, "report"):
        before = snapshot(ws)
        line = assert_refused(
            invoke(main, [command, str(ws / "traces"), "--out", str(out), "--protocol", "offline"]),
            PROG,
            "is being written by process",
            before,
            ws,
        )
    assert str(os.getpid()) in line


# ------------------------------------------------------------------------ what must work
def test_outputs_replace_old_ones_whole_with_umask_permissions(ws):
    old_umask = os.umask(0o027)
    try:
        res = invoke(main, ["sweep", str(ws / "traces"), "--out", str(ws / "fresh"), "--protocol", "offline", "--format", "json"])
    finally:
        os.umask(old_umask)
    assert res.exit_code == 0, res.stderr
    assert oct((ws / "fresh").stat().st_mode & 0o777) == oct(0o750)
    assert oct((ws / "fresh" / "utility.csv").stat().st_mode & 0o777) == oct(0o640)
    # an existing folder keeps the user's other files; ours are replaced
    res = invoke(main, ["sweep", str(ws / "traces"), "--out", str(ws / "results"), "--protocol", "offline", "--format", "json"])
    assert res.exit_code == 0, res.stderr
    assert (ws / "results" / "notes.txt").read_text() == "the user's own notes"
    assert pl.read_parquet(ws / "results" / "utility.parquet").height > 0
    assert not list(ws.rglob(".*")), "staging or lock files left behind"


def test_report_into_an_earlier_report_replaces_it_whole(ws):
    res = invoke(
        main,
        [
            "report",
            str(ws / "traces"),
            "--out",
            str(ws / "report"),
            "--protocol",
            "offline,discrete",
            "--rho",
            "1,0.5",
            "--budget-rule",
            "overshoot",
            "--queue",
            "0",
        ],
    )
    assert res.exit_code == 0, res.stderr
    assert "# Tempora report" in (ws / "report" / "report.md").read_text()
    assert (ws / "report" / "utility.parquet").is_file()
    assert not [p for p in ws.rglob(".*")], "staging or lock files left behind"


def test_grids_from_a_file_and_a_range(ws):
    (ws / "grid.txt").write_text("# ρ values\n1, 0.7\n50%\n")
    res = invoke(main, ["sweep", str(ws / "traces"), "--protocol", "discrete", "--rho", f"@{ws / 'grid.txt'}", "--format", "json"])
    assert res.exit_code == 0, res.stderr
    assert sorted({r["value"] for r in json.loads(res.stdout)}) == [0.5, 0.7, 1.0]
    res = invoke(main, ["sweep", str(ws / "traces"), "--protocol", "discrete", "--rho", "0.05:1:0.001", "--format", "json"])
    values = sorted({r["value"] for r in json.loads(res.stdout)})
    assert len(values) == 951 and values[0] == 0.05 and values[-1] == 1.0 and 0.123 in values


def test_a_large_grid_prints_a_bounded_table(ws):
    res = invoke(main, ["sweep", str(ws / "traces"), "--protocol", "discrete", "--rho", "0.01:1:0.0001"])
    assert res.exit_code == 0, res.stderr
    assert "12 of 9,901 grid values shown" in " ".join(res.output.split())  # the caption wraps
    assert len(res.output.splitlines()) < 80


def test_a_trace_with_a_non_utf8_name_is_read(ws):
    name = os.fsdecode(b"\xff-tent.parquet")
    os.rename(ws / "traces" / "tent.parquet", ws / "traces" / name)
    res = invoke(main, ["sweep", str(ws / "traces"), "--protocol", "offline", "--format", "json"])
    assert res.exit_code == 0, res.stderr
    assert {r["method"] for r in json.loads(res.stdout)} == {"standard", "tent"}


def test_report_accepts_every_sweep_option_make_paper_passes(ws):
    """`make paper` passes --budget-rule overshoot, --T and --B to report (they were refused once)."""
    res = invoke(
        main,
        [
            "report",
            str(ws / "traces"),
            "--out",
            str(ws / "paper"),
            "--budget-rule",
            "overshoot",
            "--T",
            "200,400",
            "--B",
            "2.5s,5s",
            "--lambda-ms",
            "5",
        ],
    )
    assert res.exit_code == 0, res.stderr
