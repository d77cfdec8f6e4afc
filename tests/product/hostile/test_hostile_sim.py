"""Hostile input to ``tempora-sim``: every case is one stderr line, exit status 2, no traceback,
and the workspace exactly as it was (see tests/product/hostile/hostile.py). In-process, on tiny synthetic traces."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq
import pytest

from hostile import assert_refused, inject_errno, invoke, snapshot
from tempora_schema import METADATA_KEY
from tempora_schema.outputs import output_lock
from tempora_sim.cli import main
from tempora_sim.synthetic import make_trace, write_trace_set

PROG = "tempora-sim"
SMALL = dict(num_batches=12, episodes=("fog", "snow"), checkpoints=(0, 4), frozen_eval=4, batch_size=8, num_classes=10)


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


def _trace_with_meta(path: Path, change) -> Path:
    meta, table = make_trace("tent", **SMALL)
    raw = change(dict(meta))
    text = raw if isinstance(raw, str) else json.dumps(raw)
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table.replace_schema_metadata({METADATA_KEY: text}), path)
    return path


def _setup_symlink_loop(ws):
    os.symlink(ws / "loop-b", ws / "loop-a")
    os.symlink(ws / "loop-a", ws / "loop-b")


def _deep_json(_meta):
    return "[" * 200_000 + "]" * 200_000


# name -> (args with {ws} placeholders, needle, setup(ws) or None)
SWEEP = ["sweep", "{ws}/traces"]
CASES = {
    "unknown option": ([*SWEEP, "--bogus"], "no such option", None),
    "queue not a number": ([*SWEEP, "--queue", "abc"], "'--queue'", None),
    "queue beyond int32": ([*SWEEP, "--queue", "99999999999999999999"], "'--queue'", None),
    "negative queue": ([*SWEEP, "--queue", "-1"], "'--queue'", None),
    "unknown format": ([*SWEEP, "--format", "xml"], "'--format'", None),
    "missing argument": (["sweep"], "missing argument", None),
    "unknown command": (["swep", "{ws}/traces"], "no such command", None),
    "rho NaN": ([*SWEEP, "--rho", "nan"], "--rho", None),
    "rho inf": ([*SWEEP, "--rho", "inf"], "--rho", None),
    "rho overflow": ([*SWEEP, "--rho", "1e999"], "not a finite number", None),
    "T overflow": ([*SWEEP, "--T", "1e999s"], "not a finite number", None),
    "B negative": ([*SWEEP, "--B", "-1s"], "--B", None),
    "rho zero": ([*SWEEP, "--rho", "0"], "must be > 0", None),
    "rho empty item": ([*SWEEP, "--rho", "1,,0.5"], "empty item", None),
    "rho file missing": ([*SWEEP, "--rho", "@{ws}/nowhere.txt"], "cannot read", None),
    "rho file empty": ([*SWEEP, "--rho", "@{ws}/empty.txt"], "holds no values", lambda ws: (ws / "empty.txt").write_text("# nothing\n")),
    "rho file not text": (
        [*SWEEP, "--rho", "@{ws}/bin.txt"],
        "not a UTF-8 text file",
        lambda ws: (ws / "bin.txt").write_bytes(b"\xff\xfe\x00"),
    ),
    "rho range backwards": ([*SWEEP, "--rho", "1:0.5:0.1"], "ends before it starts", None),
    "rho range zero step": ([*SWEEP, "--rho", "0.1:1:0"], "step > 0", None),
    "rho range too long": ([*SWEEP, "--rho", "0.001:1:1e-9"], "more than 1,000,000", None),
    "lambda NaN": ([*SWEEP, "--lambda-ms", "nan"], "--lambda-ms", None),
    "lambda zero": ([*SWEEP, "--lambda-ms", "0"], "must be > 0", None),
    "unknown protocol": ([*SWEEP, "--protocol", "nope"], "unknown protocol 'nope'", None),
    "fallback with random": ([*SWEEP, "--fallback", "--skipped", "random"], "choose one", None),
    "explicit T below lambda": ([*SWEEP, "--protocol", "continuous", "--T", "0.001"], "must exceed λ", None),
    "out empty": ([*SWEEP, "--out", ""], "--out is empty", None),
    "out is a file": ([*SWEEP, "--out", "{ws}/results/notes.txt"], "is a file", None),
    "out below a file": ([*SWEEP, "--out", "{ws}/results/notes.txt/deeper"], "is a file, not a folder", None),
    "out symlink loop": ([*SWEEP, "--out", "{ws}/loop-a"], "symbolic links", _setup_symlink_loop),
    "out inside the traces": ([*SWEEP, "--out", "{ws}/traces/results"], "inside the trace directory", None),
    "no such traces": (["sweep", "{ws}/nowhere"], "no such file or directory", None),
    "empty trace folder": (["sweep", "{ws}/empty"], "no *.parquet", lambda ws: (ws / "empty").mkdir()),
    "dangling link among traces": (
        SWEEP,
        "dangling symbolic link",
        lambda ws: os.symlink(ws / "gone.parquet", ws / "traces" / "adabn.parquet"),
    ),
    "link loop among traces": (
        SWEEP,
        "symbolic link loop",
        lambda ws: (
            os.symlink(ws / "traces" / "x.parquet", ws / "traces" / "y.parquet"),
            os.symlink(ws / "traces" / "y.parquet", ws / "traces" / "x.parquet"),
        ),
    ),
    "truncated trace": (
        SWEEP,
        "not a readable Parquet file",
        lambda ws: (ws / "traces" / "cut.parquet").write_bytes((ws / "traces" / "tent.parquet").read_bytes()[:300]),
    ),
    "parquet that is not a trace": (
        SWEEP,
        "not a Tempora trace",
        lambda ws: pl.DataFrame({"a": [1]}).write_parquet(ws / "traces" / "other.parquet"),
    ),
    "metadata batch size 1e30": (
        [*SWEEP, "--lambda-ms", "10"],
        "outside 0..2^63-1",
        lambda ws: _trace_with_meta(ws / "traces" / "big" / "tent.parquet", lambda m: {**m, "batch_size": 10**30}),
    ),
    "metadata nested 200k deep": (
        SWEEP,
        "nested too deeply",
        lambda ws: _trace_with_meta(ws / "traces" / "deep" / "tent.parquet", _deep_json),
    ),
    "metadata NaN": (
        SWEEP,
        "NaN or Infinity",
        lambda ws: _trace_with_meta(
            ws / "traces" / "nan" / "tent.parquet", lambda m: json.dumps({**m, "method_params": {"lr": float("nan")}})
        ),
    ),
    "metadata not JSON": (SWEEP, "not valid JSON", lambda ws: _trace_with_meta(ws / "traces" / "bad" / "tent.parquet", lambda m: "{oops")),
    "two traces of one method": (
        SWEEP,
        "second trace of method 'tent'",
        lambda ws: _trace_with_meta(ws / "traces" / "again" / "tent.parquet", lambda m: m),
    ),
    "group without standard": (["sweep", "{ws}/traces/tent.parquet"], "no 'standard' trace", None),
    "report: no such source": (["report", "{ws}/nowhere", "--out", "{ws}/r2"], "no such file or directory", None),
    "report: missing --out": (["report", "{ws}/traces"], "missing option '--out'", None),
    "report: unknown budget rule": (["report", "{ws}/traces", "--out", "{ws}/r2", "--budget-rule", "bogus"], "'--budget-rule'", None),
    "report: bad episode, new folder": (
        ["report", "{ws}/traces", "--out", "{ws}/r2", "--episodes", "nowhere"],
        "episode(s) nowhere not in the results",
        None,
    ),
    "report: bad episode, existing report": (
        ["report", "{ws}/traces", "--out", "{ws}/report", "--episodes", "nowhere"],
        "episode(s) nowhere not in the results",
        None,
    ),
    "report: tables is a file": (
        ["report", "{ws}/traces", "--out", "{ws}/report2"],
        "a file is in the way",
        lambda ws: ((ws / "report2").mkdir(), (ws / "report2" / "tables").write_text("x")),
    ),
    "report: files, out inside their folder": (
        ["report", "{ws}/traces/standard.parquet", "{ws}/traces/tent.parquet", "--out", "{ws}/traces/r"],
        "inside the trace directory",
        None,
    ),
    "report: sweep option on results": (
        ["report", "{ws}/results2", "--out", "{ws}/r2", "--rho", "1"],
        "apply to traces",
        lambda ws: _results(ws / "results2"),
    ),
    "report: results not readable": (["report", "{ws}/results", "--out", "{ws}/r2"], "not a readable utility table", None),
    "show: unknown table": (["show", "nonsense", "{ws}/traces"], "unknown table 'nonsense'", None),
}


def _results(folder: Path) -> None:
    from tempora_sim import sweep

    folder.mkdir()
    sweep(folder.parent / "traces", protocols="offline").write_parquet(folder / "utility.parquet")


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
